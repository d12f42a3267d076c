"""Which code a process runs: a digest of cameo's source files. A version names a
release, and two commits may share one; their digests differ. A service that finds the
pool's controller running other code replaces it (`Runtime.start`), and each executor
reports its digest, so an operator sees when an upgrade has reached every process.
The actor classes carry it in their names (`versioned`)."""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path


@functools.cache
def code_id() -> str:
    """12 hex digits of the sha256 of the package's .py files (their paths and bytes)."""
    root = Path(__file__).resolve().parents[2]
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        digest.update(str(path.relative_to(root)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:12]


def versioned(cls: type) -> type:
    """`cls`, named with the code's digest. Ray keys an actor class and its methods by
    their names: a process that reads a handle of an actor of another version (a new
    executor linked to an old one during an upgrade) would load that version's class in
    place of its own, and run the other version's methods for its own calls.

    That process loads the other version's class by value, with the module-level names its
    methods use looked up in the modules loaded there. So those methods use no name the
    version upgraded from lacks in its modules (a new helper is reached through an object:
    `core.ingress.events_in`): else the load fails, Ray calls the actor through a stand-in
    whose methods take no positional argument, and every call of an old executor to a new
    one fails. tests/integration/test_upgrade.py checks it first."""
    cls.__name__ = cls.__qualname__ = f"{cls.__name__}_{code_id()}"
    return cls
