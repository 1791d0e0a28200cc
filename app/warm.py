"""Compute a job's aggregates before the pages ask for them (``paradiag serve PATH`` does this).

The once-per-job aggregates are shaped from the Diagnosis stored in the cache at ingest: they are ready before the
server listens, and so are the step views (Marey bands, flow, timeline, device detail) of the step a new page opens
on: computed in a background thread beside the first page, they took the CPU (and the interpreter's lock) from the
callbacks of its first screen, and the page's own requests for them computed the same views a second time. The other
steps' views read events too, so they are computed in a background thread, so that a step change never waits on a
cold read (on 1024 ranks a cold step costs seconds). Then, step by step, what a click on a row of the first heatmap
asks for: the timeline and the detail of that row's ranks (a folded row selects all its ranks; their first answer
took 0.5-1.9 s of a loaded server). The thread gives way to the pages: before each view of a step or row it waits
until no request has been in flight for ``QUIET_S``, so a click is not slowed by what nobody asked for yet for longer
than one view takes (a whole step's views took seconds).
"""

from __future__ import annotations

import gc
import threading
import time
from collections.abc import Callable
from functools import partial

from dash import Dash

from paradiag.app import context
from paradiag.app.data.collectives import instances
from paradiag.app.data.comm import view as comm_view
from paradiag.app.data.common import steps_of
from paradiag.app.data.compare import operators_of
from paradiag.app.data.detail import detail_data, operator_totals
from paradiag.app.data.findings import findings_of
from paradiag.app.data.flow import flow_data, flow_p2p
from paradiag.app.data.marey import marey_data
from paradiag.app.data.mesh import mesh_of
from paradiag.app.data.overview import DEFAULT_METRIC, opening_step, overview
from paradiag.app.views.detail.live import detail_rank
from paradiag.app.views.flow.live import FLOW_COLOR, render_flow
from paradiag.app.views.marey.live import render_marey
from paradiag.app.views.overview.static import rows_of
from paradiag.app.views.timeline.live import view_data
from paradiag.app.views.timeline.static import shown_ranks
from paradiag.job import Job

QUIET_S = 0.3  # no request for this long: the page has what it asked for, the next step may be warmed


class Requests:
    """How many requests are in flight and when the last one ended (``factory`` counts them)."""

    def __init__(self) -> None:
        self._lock = threading.Condition()
        self._in_flight = 0
        self._last = 0.0

    def started(self) -> None:
        with self._lock:
            self._in_flight += 1

    def ended(self) -> None:
        with self._lock:
            self._in_flight = max(self._in_flight - 1, 0)
            self._last = time.monotonic()
            self._lock.notify_all()

    def wait_quiet(self, quiet_s: float = QUIET_S) -> None:
        """Return once no request is in flight and none ended in the last ``quiet_s``."""
        with self._lock:
            while True:
                left = self._last + quiet_s - time.monotonic()
                if self._in_flight == 0 and left <= 0:
                    return
                self._lock.wait(timeout=max(left, quiet_s) if self._in_flight == 0 else None)


requests = Requests()


def warm(app: Dash, token: str) -> threading.Thread:
    """The aggregates and the views of the step a new page opens on now; the others in the returned (started)
    thread."""
    with app.server.app_context():
        job = context.job(token)
        mesh_of(job)
        overview(job)
        instances(job)
        findings_of(job)
        operators_of(job)  # the compare panel's side of this job
        comm_view(job)  # the communication matrix as the first page draws it
        operator_totals(job)  # the detail panel's and the operator search's
        first = opening_step(job)
        if first is not None:
            for view in step_views(job, first):
                view()
            for view in step_figures(token, first):
                view()
    settle()
    views = threading.Thread(target=warm_views, args=(app, token), name="paradiag-warm-views", daemon=True)
    views.start()
    return views


def warm_views(app: Dash, token: str) -> None:
    """Every step but the one a new page opens on (``warm`` did it), then the ranks of each row of the first
    heatmap in each step: each view when the pages are quiet."""
    with app.server.app_context():
        job = context.job(token)
        first = opening_step(job)
        if first is None:
            return
        steps = [first, *(s for s in steps_of(job) if s != first)]
        for step in steps[1:]:
            for view in [*step_views(job, step), *step_figures(token, step)]:
                requests.wait_quiet()
                view()
        rows = [row["ranks"] for row in rows_of(job, DEFAULT_METRIC, None)]
        for step in steps:
            for ranks in rows:
                for view in rank_views(job, ranks, step):
                    requests.wait_quiet()
                    view()
    requests.wait_quiet()
    settle()


def settle() -> None:
    """What the warm-up left alive (the job, its aggregates, the figures kept) set aside from the collector: a
    full collection walks every object alive, and one came with every step change (a request's decoded views
    outlive two younger collections), 74 ms of its 170 ms on the server of a 256-rank job; 6 ms once set aside.
    What is set aside is never collected as a cycle: a kept figure dropped later stays in memory (at most the
    figures kept at each of the two settles, ``paradiag.app.views.DRAWN`` each)."""
    gc.collect()
    gc.freeze()


def step_views(job: Job, step: int) -> list[Callable[[], object]]:
    """What a page that turns to ``step`` asks for, with the ranks the top finding blames: Marey's bands and
    rows, the flow graph, the timeline and the device detail (each computes one view's data, memoised)."""
    return [
        partial(marey_data, job, step, None),
        partial(flow_data, job, step),
        partial(flow_p2p, job, step),
        *rank_views(job, None, step),
    ]


def step_figures(token: str, step: int) -> list[Callable[[], object]]:
    """Marey's graph and the flow graph of the whole ``step`` as a page that turns to it draws them (nothing
    selected, nothing zoomed or opened; ``paradiag.app.views.drawn_once`` keeps them): their building took the
    server's threads one after the other on a step change."""
    sel = {"job": token, "step": step, "window": None, "op": None, "stage": None, "at": None}
    return [
        partial(render_marey, sel, [], []),
        partial(render_flow, sel, FLOW_COLOR, []),
    ]


def rank_views(job: Job, ranks: list[int] | None, step: int) -> list[Callable[[], object]]:
    """The timeline and the device detail of ``ranks`` selected in ``step`` (None: the ranks the top finding
    blames), as their callbacks ask for them."""
    return [
        lambda: view_data(job, shown_ranks(job, ranks, step), {"step": step}),
        lambda: detail_data(job, detail_rank(job, ranks), step, None),
    ]
