"""Where a benchmark's figures go: a JSON file when one was asked for (`--json F`), and
the lines it prints."""

from __future__ import annotations

import json
import os
from typing import Any


def save_json(path: str | None, figures: Any) -> None:
    """Write `figures` to `path` (indented JSON, its folder made if missing: a run of
    half an hour must not be lost to it); nothing when no path was given."""
    if path:
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        with open(path, "w") as f:
            json.dump(figures, f, indent=2)


def format_ms(v: float | None) -> str:
    """A latency for a printed line: whole ms, "-" when there is none."""
    return "-" if v is None else f"{v:,.0f} ms"
