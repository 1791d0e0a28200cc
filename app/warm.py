"""Compute a job's aggregates before the pages ask for them (``paradiag serve PATH`` does this).

The once-per-job aggregates are shaped from the Diagnosis stored in the cache at ingest: they are ready before the
server listens. The step views (Marey bands, flow, timeline, device detail) read events, so they are computed in a
background thread: the step a new page opens on first, then every other step, so that a step change never waits
on a cold read (on 1024 ranks a cold step costs seconds). Then, step by step, what a click on a row of the first
heatmap asks for: the timeline and the detail of that row's ranks (a folded row selects all its ranks; their
first answer took 0.5-1.9 s of a loaded server). The thread gives way to the pages: before each step or row it
waits until no request has been in flight for ``QUIET_S``, so the first page is not slowed by what nobody asked
for yet.
"""

from __future__ import annotations

import threading
import time

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
from paradiag.app.views.overview.static import rows_of
from paradiag.app.views.timeline.live import view_data
from paradiag.app.views.timeline.static import shown_ranks
from paradiag.dataset import Job

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
    """The aggregates now; the step views in the returned (started) thread."""
    with app.server.app_context():
        job = context.job(token)
        mesh_of(job)
        overview(job)
        instances(job)
        findings_of(job)
        operators_of(job)  # the compare panel's side of this job
        comm_view(job)  # the communication matrix as the first page draws it
    views = threading.Thread(target=warm_views, args=(app, token), name="paradiag-warm-views", daemon=True)
    views.start()
    return views


def warm_views(app: Dash, token: str) -> None:
    """The detail panel's operator totals and the step a new page opens on at once (the first page needs them);
    then every other step, then the ranks of each row of the first heatmap in each step, each when the pages are
    quiet."""
    with app.server.app_context():
        job = context.job(token)
        operator_totals(job)
        first = opening_step(job)  # the step a new page opens on
        if first is None:
            return
        warm_step(job, first)
        steps = [first, *(s for s in steps_of(job) if s != first)]
        for step in steps[1:]:
            requests.wait_quiet()
            warm_step(job, step)
        rows = [row["ranks"] for row in rows_of(job, DEFAULT_METRIC, None)]
        for step in steps:
            for ranks in rows:
                requests.wait_quiet()
                warm_ranks(job, ranks, step)


def warm_step(job: Job, step: int) -> None:
    """What a page that turns to ``step`` asks for, with the ranks the top finding blames: Marey's bands and
    rows, the flow graph, the timeline and the device detail."""
    marey_data(job, step, None)
    flow_data(job, step)
    flow_p2p(job, step)
    warm_ranks(job, None, step)


def warm_ranks(job: Job, ranks: list[int] | None, step: int) -> None:
    """The timeline and the device detail of ``ranks`` selected in ``step`` (None: the ranks the top finding
    blames), as their callbacks ask for them."""
    view_data(job, shown_ranks(job, ranks, step), {"step": step})
    detail_data(job, detail_rank(job, ranks), step, None)
