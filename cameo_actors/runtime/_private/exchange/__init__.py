"""What travels between processes, and how: the bytes on the wire (`wire.py`, `ingest.py`),
in-order channels between executors (`channels.py`), where outputs go (`routes.py`), and
the epoch markers that change a keyed step's routing in-band (`epochs.py`).

Imported by the executor and the client; it imports neither.
"""
