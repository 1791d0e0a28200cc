"""The job page's views, each one unit: a module holding its panel (``panel()``), the selection fields it reads
(``FIELDS``: a store per part, ``paradiag.app.selection.view_store``), its callbacks (``register``) and the
static render the snapshot uses (``static(job, report)``: titled sections, each a figure, an HTML string or both).
The figures' builders (``paradiag.app.figures``) and the view data (``paradiag.app.data``) they call are shared by
several views and the snapshot. Adding a view is adding a module here and naming it in ``VIEWS``.

The selection reducer (``paradiag.app.callbacks.selection``) writes a view's store only when one of the fields it
reads changed, so a click recomputes and redraws the views it concerns and no other."""

from __future__ import annotations

from types import ModuleType

from paradiag.app.views import comm, compare, detail, flow, marey, overview, timeline

# In the page's order (the snapshot's too). ``layouts.job_page`` places their panels.
VIEWS: tuple[ModuleType, ...] = (overview, timeline, marey, detail, comm, compare, flow)


def _fields() -> dict[str, tuple[str, ...]]:
    out: dict[str, tuple[str, ...]] = {}
    for view in VIEWS:
        for store, fields in view.FIELDS.items():
            if out.setdefault(store, fields) != fields:
                raise ValueError(f"views disagree on the fields of store {store!r}: {out[store]} vs {fields}")
    return out


# Each view store and the selection's fields it holds (the header's page switch and summary read "job" too).
VIEW_FIELDS: dict[str, tuple[str, ...]] = _fields()
