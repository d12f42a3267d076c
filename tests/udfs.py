"""User functions referenced by import path in test specs ('tests.udfs:fn')."""

from __future__ import annotations

from typing import Any


def split_words(e: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"ts": e["ts"], "word": w} for w in e["text"].split()]


def double(e: dict[str, Any]) -> dict[str, Any]:
    if e["value"] < 0:
        raise ValueError("negative value")
    return {**e, "value": e["value"] * 2}


def not_a_dict(e: dict[str, Any]) -> int:
    return 1
