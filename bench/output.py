"""Where a benchmark's figures go: a JSON file when one was asked for (`--json F`)."""

from __future__ import annotations

import json
from typing import Any


def save_json(path: str | None, figures: Any) -> None:
    """Write `figures` to `path` (indented JSON); nothing when no path was given."""
    if path:
        with open(path, "w") as f:
            json.dump(figures, f, indent=2)
