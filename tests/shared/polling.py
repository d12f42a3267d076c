"""Waiting in integration tests: poll a check (API or runtime calls) until it answers
something true, with the check's last answer in the failure."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def wait_for(check: Callable[[], Any], what: str, timeout_s: float = 60.0,
             every_s: float = 0.1) -> Any:
    """`check`'s first true answer; AssertionError naming `what` after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while True:
        got = check()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout_s} s (last: {got!r})")
        time.sleep(every_s)
