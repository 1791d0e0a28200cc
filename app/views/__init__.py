"""The job page's views, each one unit: a folder ``app/views/<name>/`` holding

- ``live.py`` (Dash): its panel (``panel()``) and its place on the job page (``EXPORTS``: the graph its export
  bar exports and whether a table goes with it; ``HALF``: half a row, ``paradiag.app.layouts.job_page``), the
  selection fields it reads (``FIELDS``: a store per part, ``paradiag.app.selection.view_store``) and its
  callbacks (``register``);
- ``static.py`` (no Dash): the static render the snapshot uses (``static(job, report)``: titled sections, each a
  figure, an HTML string or both) and the rules the live view shares with it (which ranks, which rows).

The figures' builders (``paradiag.app.figures``) and the view data (``paradiag.app.data``) they call are shared by
several views and the snapshot. Adding a view is adding its folder and naming it in ``NAMES``.

This module and every ``static.py`` import no Dash, so the CLI and the snapshot run in the core install (without
``paradiag[web]``); the live views in order (``VIEWS``) and their stores' fields (``VIEW_FIELDS``), built by
``paradiag.app.views.live``, are read from here too, importing Dash on first use.

The selection reducer (``paradiag.app.callbacks.selection``) writes a view's store only when one of the fields it
reads changed, so a click recomputes and redraws the views it concerns and no other."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from paradiag.app.data.common import Kept

if TYPE_CHECKING:
    from paradiag.app.views.live import VIEW_FIELDS as VIEW_FIELDS
    from paradiag.app.views.live import VIEWS as VIEWS
    from paradiag.job import Job

T = TypeVar("T")

# In the page's order (the snapshot's too).
NAMES: tuple[str, ...] = ("overview", "timeline", "marey", "detail", "comm", "compare", "flow")

# A view's static render: (title, content) sections, each content a figure, an HTML string or (HTML, figure).
StaticRender = Callable[["Job", dict[str, Any]], list[tuple[str, Any]]]


DRAWN = (
    24  # whole-step figures a worker keeps (each view's, per step and setting: a few MB in all at 1024 ranks)
)
_drawn = Kept(DRAWN)


def drawn_once(key: tuple[Any, ...], build: Callable[[], T]) -> T:
    """A view's figure of a whole step, built once per worker and ``key`` (the job's scope and token, the step,
    the view's settings; never a zoom window or a selection, which are endless) and kept for the last DRAWN keys.
    A step change asks for 4-6 such figures at once, whose building the server's threads did one after the
    other (the interpreter's lock): Marey's took 280 ms of a 256-rank step change. ``paradiag.app.warm`` builds
    every step's in the background. The figure is shared: a caller never changes it (a ``Patch`` changes the
    browser's copy)."""
    return _drawn.get(key, build)


def part(name: str, which: str) -> Any:
    """View ``name``'s module ``which`` ("live" or "static")."""
    return importlib.import_module(f"{__name__}.{name}.{which}")


def name_of(view: str, name: str) -> Any:
    """Name ``name`` read from view package ``view`` (``paradiag.app.views.timeline.render_timeline``): from its
    static half, else from its live half (which imports Dash), so code that reads a view as one module keeps
    working. Its halves themselves are its submodules ``static`` and ``live``."""
    if name.startswith("__") or name in ("live", "static"):
        raise AttributeError(f"module {view!r} has no attribute {name!r}")
    for which in ("static", "live"):
        module = importlib.import_module(f"{view}.{which}")
        if hasattr(module, name):
            return getattr(module, name)
    raise AttributeError(f"module {view!r} has no attribute {name!r}")


def static_renders() -> tuple[StaticRender, ...]:
    """Each view's static render, in the page's order (no Dash is imported)."""
    return tuple(part(name, "static").static for name in NAMES)


def __getattr__(name: str) -> Any:
    """``VIEWS`` and ``VIEW_FIELDS``: the live halves (Dash), imported when first asked for."""
    if name in ("VIEWS", "VIEW_FIELDS"):
        from paradiag.app.views import live

        return getattr(live, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
