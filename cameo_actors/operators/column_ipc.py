"""Arrow IPC streams: what carries columns in ingest calls, links between executors and
the HTTP API's bodies."""

from __future__ import annotations

import pyarrow as pa

from cameo_actors.operators.exceptions import ColumnsRefused

#: The media type of an Arrow IPC stream (the HTTP API's body for columns).
ARROW_STREAM = "application/vnd.apache.arrow.stream"


def to_ipc(data: pa.RecordBatch | pa.Table) -> bytes:
    """An Arrow IPC stream of a batch or a table (what travels in ingest calls, links and
    the HTTP API's bodies)."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, data.schema) as writer:
        writer.write(data)
    blob: bytes = sink.getvalue().to_pybytes()
    return blob


def from_ipc(blob: bytes) -> pa.RecordBatch:
    """The batch of `to_ipc`'s stream (zero-copy over `blob`); several batches are combined."""
    reader = pa.ipc.open_stream(pa.py_buffer(blob))
    batches = list(reader)
    if len(batches) == 1:
        return batches[0]
    table = pa.Table.from_batches(batches, reader.schema).combine_chunks()
    got = table.to_batches()
    return got[0] if got else pa.RecordBatch.from_pylist([], schema=reader.schema)


def read_stream(source: str, body: bytes) -> pa.Table:
    """An HTTP body of media type `ARROW_STREAM`; ColumnsRefused if it is not one."""
    try:
        reader = pa.ipc.open_stream(pa.py_buffer(body))
        return reader.read_all()
    except (pa.ArrowInvalid, pa.ArrowTypeError, OSError) as exc:
        raise ColumnsRefused(source, None, f"an Arrow IPC stream ({ARROW_STREAM})",
                             f"{len(body)} bytes that are not one ({exc})",
                             "write the body with pyarrow.ipc.new_stream (not the file format), "
                             "or send JSON") from None
