"""The C part of `kafka_batches` (`_kafka_records.c`)."""

def join_values(records: bytes | memoryview, count: int, base_offset: int,
                first_offset: int) -> tuple[bytes, int, int, int]: ...

def json_columns(body: bytes, n: int, fields: tuple[tuple[bytes, str], ...]
                 ) -> list[tuple[bytes | None, bytes, bytes | None, int]] | None: ...
