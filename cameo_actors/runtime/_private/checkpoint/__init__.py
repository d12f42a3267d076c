"""Checkpoints as both sides see them: the parts' format (`parts.py`), the durable storage
(`storage.py`), an executor's parts in it and on its node (`part_store.py`), and whether
every node reaches it (`shared.py`).

The executor writes parts (`executor/checkpointing.py`), the controller coordinates and
restores (`controller/checkpoints.py`, `controller/recovery.py`); both import this
package, which imports neither.
"""
