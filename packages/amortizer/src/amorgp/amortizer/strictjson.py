"""Strict JSON text for results files and the command line's output.

>>> json_text({"rmse": float("nan"), "n": 3})
'{"rmse": null, "n": 3}'
"""

from __future__ import annotations

import json
import math
from typing import Any

__all__ = ["json_text"]


def _nulls(obj: Any) -> Any:
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _nulls(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_nulls(v) for v in obj]
    return obj


def json_text(obj: Any, *, indent: int | None = None) -> str:
    """Strict JSON of ``obj``: NaN and infinite floats become ``null`` (never a non-JSON
    token); other objects are written as their ``str``."""
    return json.dumps(_nulls(obj), indent=indent, allow_nan=False, default=str)
