"""The one selection state every view reads and writes and its form in the URL's query string (the part of it
each view depends on is the view's: ``paradiag.app.views``).

``window`` is ``[t0, t1]`` in ms since the job origin; ``collective`` names one instance (``.../#42``); ``op`` an
operator name and ``at`` (ms) which of its instances, when one was clicked; ``base`` the token of the baseline job
the compare panel measures against. The store holds ``Selection.to_store()`` (a plain dict of these fields);
callbacks read it back with ``Selection.from_store``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from typing import Any
from urllib.parse import parse_qs, urlencode

from paradiag.app import coerce


@dataclass(frozen=True)
class Selection:
    job: str | None = None
    step: int | None = None
    ranks: list[int] | None = field(default=None, hash=False)
    stage: int | None = None
    op: str | None = None
    at: float | None = None
    collective: str | None = None
    window: list[float] | None = field(default=None, hash=False)
    base: str | None = None

    @classmethod
    def from_store(cls, data: Any) -> Selection:
        """The selection a store (or any dict with some of the fields) holds: the one place a selection sent by
        a client is read. Each field is checked for its type and bounds (``FIELDS``); a field that fails is
        dropped (as if it were not set), other keys are ignored, and anything but a dict is the empty selection."""
        given = coerce.mapping(data) or {}
        return cls(**{k: read(given[k]) for k, read in FIELDS.items() if given.get(k) is not None})

    def to_store(self) -> dict[str, Any]:
        return asdict(self)

    def but(self, **changes: Any) -> Selection:
        return replace(self, **changes)

    def view(self, name: str) -> dict[str, Any]:
        """The fields view store ``name`` holds (each view declares what it reads: ``paradiag.app.views``)."""
        from paradiag.app.views import VIEW_FIELDS

        return {k: getattr(self, k) for k in VIEW_FIELDS[name]}

    @classmethod
    def from_query(cls, search: str | None) -> Selection:
        """The selection a URL query string names (unknown or malformed parts are ignored)."""
        q = {k: v[-1] for k, v in parse_qs((search or "").lstrip("?")).items()}
        ranks = [r for r in (coerce.integer(x, 0) for x in q.get("ranks", "").split(",")) if r is not None]
        raw = {
            "job": q.get("job"),
            "step": q.get("step"),
            "ranks": ranks,
            "stage": q.get("stage"),
            "op": q.get("op"),
            "at": q.get("at"),
        }
        return cls.from_store(
            {**raw, "collective": q.get("coll"), "window": q.get("t", "").split(","), "base": q.get("base")}
        )

    def to_query(self) -> str:
        q: dict[str, str] = {}
        if self.job:
            q["job"] = self.job
        if self.step is not None:
            q["step"] = str(self.step)
        if self.ranks:
            q["ranks"] = ",".join(map(str, self.ranks))
        if self.stage is not None:
            q["stage"] = str(self.stage)
        if self.op:
            q["op"] = self.op
        if self.at is not None:
            q["at"] = f"{self.at:.6g}"
        if self.collective:
            q["coll"] = self.collective
        if self.base:
            q["base"] = self.base
        if self.window:
            q["t"] = ",".join(f"{v:.6g}" for v in self.window)
        return "?" + urlencode(q) if q else ""

    def describe(self) -> str:
        parts = []
        if self.step is not None:
            parts.append(f"step {self.step}")
        if self.ranks:
            parts.append(
                "ranks " + ", ".join(map(str, self.ranks[:8])) + ("…" if len(self.ranks) > 8 else "")
            )
        if self.stage is not None:
            parts.append(f"stage {self.stage}")
        if self.op:
            parts.append(f"operator {self.op[:40]}")
        if self.collective:
            parts.append(f"collective {self.collective}")
        if self.window:
            a, b = self.window
            parts.append(f"{a:.2f}–{b:.2f} ms")
        return " · ".join(parts) or "nothing selected"


def _token(value: Any) -> str | None:
    return coerce.text(value, MAX_TOKEN) or None


def _ranks(value: Any) -> list[int] | None:
    ranks = coerce.integers(value)
    return list(dict.fromkeys(ranks)) if ranks else None


START = "?start"  # the start page's address on a server that serves a job (plain "/" opens the served job)
# The key of a double-click's zoom out (a graph's zoom store) under which comes what its first click changed, as it
# was before: that click took effect at once (assets/marey_clicks.js), the zoom out takes it back.
UNDO = "paradiag.undo"


def wants_start(search: str | None) -> bool:
    """Whether a URL query asks for the start page (``?start``): the header's brand and "open a job" links."""
    return "start" in parse_qs((search or "").lstrip("?"), keep_blank_values=True)


MAX_TOKEN = (
    200  # a job token: ``served``, ``sample:<name>``, ``upload:<id>`` (names of at most 128 characters)
)
# How each field is read from what a client sent (None: the field is not set).
FIELDS: dict[str, Callable[[Any], Any]] = {
    "job": _token,
    "step": lambda v: coerce.integer(v, 0),
    "ranks": _ranks,
    "stage": lambda v: coerce.integer(v, 0),
    "op": lambda v: coerce.text(v) or None,
    "at": coerce.number,
    "collective": lambda v: coerce.text(v, 1024) or None,
    "window": coerce.window,
    "base": _token,
}


def view_store(name: str) -> str:
    """The id of the store that holds view ``name``'s part of the selection."""
    return f"selection-{name}"
