"""The C part of `kafka_batches` (`_kafka_records.c`)."""

def join_values(records: bytes | memoryview, count: int, base_offset: int,
                first_offset: int) -> tuple[bytes, int, int, int]: ...

def json_columns(body: bytes, n: int, fields: tuple[tuple[bytes, str], ...]
                 ) -> list[tuple[bytes | None, bytes, bytes | None, int]] | None: ...

def record_meta(records: bytes | memoryview, count: int, base_offset: int, first_offset: int,
                base_timestamp: int) -> tuple[int, bytes, bytes, bytes | None, bytes, bytes]: ...
