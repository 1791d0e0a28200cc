"""Typed reads of values a client sent (a callback's inputs, a selection's fields, a plotly event's points).

Each helper returns the value in the type asked for, within its bounds, or None when it is not one: it never
raises, whatever it is given (None, a wrong type, NaN, 1e308, 10**30, a nested list, a long string). A forged
value is so treated as an absent one, and the view shows what it shows without it. Callbacks get their inputs
through these (``paradiag.app.boundary``); nothing here knows a job.
"""

from __future__ import annotations

import math
import re
from typing import Any

# Bounds of the numbers a view can mean: counts, steps and ranks fit in 31 bits, and a time in ms since a job's
# start fits in ±1e12 (31 years): int(ms * 1e6) of anything beyond would overflow an int64 column.
MAX_INT = 2**31 - 1
MAX_MS = 1e12
MAX_ITEMS = 65536  # the longest list of ranks (or of anything) a request may name
MAX_TEXT = 4096  # an operator's name (C++ templates are long); a token or a choice is far shorter
_DECIMAL = re.compile(r"^\s*[-+]?\d{1,12}\s*$")


def integer(value: Any, lo: int = -MAX_INT, hi: int = MAX_INT) -> int | None:
    """An int within [lo, hi] from an int, an integral float or a decimal string; else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, float):
        if not math.isfinite(value) or not value.is_integer():
            return None
        value = int(value)
    elif isinstance(value, str):
        if not _DECIMAL.match(value):
            return None
        value = int(value)
    if not isinstance(value, int):
        return None
    return value if lo <= value <= hi else None


def number(value: Any, lo: float = -MAX_MS, hi: float = MAX_MS) -> float | None:
    """A finite float within [lo, hi] from a number or a numeric string; else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, str):
        if len(value) > 64:
            return None
        try:
            value = float(value)
        except ValueError:
            return None
    if isinstance(value, int):
        value = float(value) if abs(value) <= 2**63 else math.inf
    if not isinstance(value, float) or not math.isfinite(value):
        return None
    return value if lo <= value <= hi else None


def text(value: Any, max_len: int = MAX_TEXT) -> str | None:
    """A string of at most ``max_len`` characters without NUL; else None (never cut: a cut name is another name)."""
    if not isinstance(value, str) or len(value) > max_len or "\0" in value:
        return None
    return value


def mapping(value: Any) -> dict[str, Any] | None:
    """A dict with string keys; else None."""
    if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
        return None
    return value


def items(value: Any, read: Any, max_items: int = MAX_ITEMS) -> list[Any] | None:
    """A list (or tuple) each of whose items ``read`` accepts, read by it; None when it is no list, is longer
    than ``max_items``, or holds one item ``read`` refuses (a list with a forged item is forged)."""
    if not isinstance(value, list | tuple) or len(value) > max_items:
        return None
    out = [read(v) for v in value]
    return None if any(v is None for v in out) else out


def integers(value: Any, lo: int = 0, hi: int = MAX_INT, max_items: int = MAX_ITEMS) -> list[int] | None:
    return items(value, lambda v: integer(v, lo, hi), max_items)


def texts(value: Any, max_len: int = MAX_TEXT, max_items: int = 1024) -> list[str] | None:
    return items(value, lambda v: text(v, max_len), max_items)


def window(value: Any) -> list[float] | None:
    """``[t0, t1]`` in ms, both finite and within ±MAX_MS, t0 < t1; else None."""
    bounds = items(value, number, 2)
    if bounds is None or len(bounds) != 2 or not bounds[0] < bounds[1]:
        return None
    return bounds


def choice(value: Any, allowed: Any, default: Any = None) -> Any:
    """``value`` when it is one of ``allowed`` (compared as JSON scalars), else ``default``."""
    if isinstance(value, str | int | float | bool) or value is None:
        try:
            if value in allowed:
                return value
        except TypeError:  # an unhashable or odd member of ``allowed``
            return default
    return default


def first_point(event: Any) -> dict[str, Any] | None:
    """The first point of a plotly event (``clickData``, ``selectedData``): a dict, else None."""
    data = mapping(event)
    points = data.get("points") if data else None
    if not isinstance(points, list) or not points:
        return None
    return mapping(points[0])
