"""The suites' feeder and reader threads record what they raised in `error`, and have a
`stop` event; the main thread checks them and stops them with these."""

from __future__ import annotations

from typing import Any


def check_threads(*threads: Any) -> None:
    """Raise, in the main thread, what one of `threads` raised."""
    for t in threads:
        if t.error is not None:
            raise RuntimeError(f"{t.name} failed: {t.error!r}") from t.error


def stop_threads(timeout_s: float, *threads: Any) -> None:
    """Stop `threads`, wait for them, raise what one raised."""
    for th in threads:
        th.stop.set()
    for th in threads:
        th.join(timeout_s)
    check_threads(*threads)
