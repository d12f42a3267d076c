"""Which code a process runs (`codebase`): the digest a service compares with the
controller's, and the actor classes named with it."""

from __future__ import annotations

import re

from cameo_actors.runtime._private import codebase


def test_the_code_digest_is_of_the_package_source_and_stable() -> None:
    first = codebase.code_id()
    assert re.fullmatch(r"[0-9a-f]{12}", first)
    codebase.code_id.cache_clear()  # computed again from the files: the same
    assert codebase.code_id() == first


def test_an_actor_class_is_named_with_the_code_digest() -> None:
    class Worker:
        pass

    named = codebase.versioned(Worker)
    assert named is Worker
    assert Worker.__name__ == Worker.__qualname__ == f"Worker_{codebase.code_id()}"
