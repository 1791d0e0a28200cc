"""The live views (Dash), in the page's order (``paradiag.app.views.NAMES``), and the selection's fields each view
store holds."""

from __future__ import annotations

from types import ModuleType

from paradiag.app.views import NAMES, part

VIEWS: tuple[ModuleType, ...] = tuple(part(name, "live") for name in NAMES)


def _fields() -> dict[str, tuple[str, ...]]:
    out: dict[str, tuple[str, ...]] = {}
    for view in VIEWS:
        for store, fields in view.FIELDS.items():
            if out.setdefault(store, fields) != fields:
                raise ValueError(f"views disagree on the fields of store {store!r}: {out[store]} vs {fields}")
    return out


# Each view store and the selection's fields it holds (the header's page switch and summary read "job" too).
VIEW_FIELDS: dict[str, tuple[str, ...]] = _fields()
