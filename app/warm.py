"""Compute a job's aggregates before the first page asks for them (``paradiag serve PATH`` does this).

The once-per-job aggregates are shaped from the Diagnosis stored in the cache at ingest: they are ready before the
server listens. The first page's step views (Marey bands, flow, timeline) read events; they are computed in a
background thread, so the server listens at once and the first page finds them ready or being made.
"""

from __future__ import annotations

import threading

from dash import Dash

from paradiag.app import context
from paradiag.app.callbacks.timeline import shown_ranks, view_data
from paradiag.app.data.collectives import instances
from paradiag.app.data.comm import view as comm_view
from paradiag.app.data.compare import operators_of
from paradiag.app.data.detail import operator_totals
from paradiag.app.data.findings import findings_of
from paradiag.app.data.flow import flow_data
from paradiag.app.data.marey import marey_data, p2p_pairs, step_bands
from paradiag.app.data.mesh import mesh_of
from paradiag.app.data.overview import opening_step, overview


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
    """The first page's views of the step it opens on, and the detail panel's operator totals."""
    with app.server.app_context():
        job = context.job(token)
        operator_totals(job)
        step = opening_step(job)  # the step a new page opens on
        if step is not None:
            step_bands(job, step)
            p2p_pairs(job, step)
            marey_data(job, step, None)
            flow_data(job, step)
            view_data(job, shown_ranks(job, None, step), {"step": step})  # the first page's timeline
