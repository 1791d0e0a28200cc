"""The one selection state every view reads and writes, and its form in the URL's query string.

``{"job", "step", "ranks", "stage", "op", "collective", "window"}``: ``window`` is ``[t0, t1]`` in ms since the
job origin; ``collective`` is ``"group/step/seq"``; ``op`` an operator name and ``at`` (ms) which of its instances, when one was clicked; ``base`` the token of the baseline
job the compare panel measures against. Nothing else is shared.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs, urlencode

FIELDS = ("job", "step", "ranks", "stage", "op", "at", "collective", "window", "base")
EMPTY: dict[str, Any] = dict.fromkeys(FIELDS)


def from_query(search: str | None) -> dict[str, Any]:
    """The selection a URL query string names (unknown or malformed parts are ignored)."""
    q = {k: v[-1] for k, v in parse_qs((search or "").lstrip("?")).items()}
    sel = dict(EMPTY)
    sel["job"] = q.get("job") or None
    sel["step"] = _int(q.get("step"))
    sel["stage"] = _int(q.get("stage"))
    sel["ranks"] = [r for r in (_int(x) for x in q.get("ranks", "").split(",")) if r is not None] or None
    sel["op"] = q.get("op") or None
    sel["at"] = _float(q.get("at"))
    sel["collective"] = q.get("coll") or None
    window = [_float(x) for x in q.get("t", "").split(",")]
    sel["base"] = q.get("base") or None
    sel["window"] = window if len(window) == 2 and None not in window and window[0] < window[1] else None  # type: ignore[operator]
    return sel


def to_query(sel: dict[str, Any]) -> str:
    q: dict[str, str] = {}
    if sel.get("job"):
        q["job"] = sel["job"]
    if sel.get("step") is not None:
        q["step"] = str(sel["step"])
    if sel.get("ranks"):
        q["ranks"] = ",".join(map(str, sel["ranks"]))
    if sel.get("stage") is not None:
        q["stage"] = str(sel["stage"])
    if sel.get("op"):
        q["op"] = sel["op"]
    if sel.get("at") is not None:
        q["at"] = f"{sel['at']:.6g}"
    if sel.get("collective"):
        q["coll"] = sel["collective"]
    if sel.get("base"):
        q["base"] = sel["base"]
    if sel.get("window"):
        q["t"] = ",".join(f"{v:.6g}" for v in sel["window"])
    return "?" + urlencode(q) if q else ""


def update(sel: dict[str, Any] | None, **changes: Any) -> dict[str, Any]:
    out = dict(EMPTY, **(sel or {}))
    out.update(changes)
    return out


def for_job(token: str) -> dict[str, Any]:
    return update(None, job=token)


def describe(sel: dict[str, Any]) -> str:
    parts = []
    if sel.get("step") is not None:
        parts.append(f"step {sel['step']}")
    if sel.get("ranks"):
        ranks = sel["ranks"]
        parts.append("ranks " + ", ".join(map(str, ranks[:8])) + ("…" if len(ranks) > 8 else ""))
    if sel.get("stage") is not None:
        parts.append(f"stage {sel['stage']}")
    if sel.get("op"):
        parts.append(f"operator {sel['op'][:40]}")
    if sel.get("collective"):
        parts.append(f"collective {sel['collective']}")
    if sel.get("window"):
        a, b = sel["window"]
        parts.append(f"{a:.2f}–{b:.2f} ms")
    return " · ".join(parts) or "nothing selected"


def _int(text: str | None) -> int | None:
    try:
        return int(text) if text not in (None, "") else None
    except ValueError:
        return None


def _float(text: str | None) -> float | None:
    try:
        return float(text) if text not in (None, "") else None
    except ValueError:
        return None
