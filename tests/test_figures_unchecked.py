"""Figures built without plotly's checks (``app.figures.common.assembled``: Marey's graph, the timeline) are what the checked
figure would be: every property one plotly knows, each value already in the form its validator would give it
(a title as ``{"text": ...}``, no empty lists), so the browser gets the same JSON either way."""

from __future__ import annotations

import json
from typing import Any

import plotly.graph_objects as go
import pytest

import paradiag
from paradiag.app.data import marey, timeline_fold
from paradiag.app.data.common import slowest_step, step_span
from paradiag.app.data.timeline import timeline_data
from paradiag.app.figures.common import assembled, scatter
from paradiag.app.figures.marey import OPERATORS, marey_figure
from paradiag.app.figures.timeline import timeline_figure
from paradiag.app.views.timeline.static import rows_of, shown_ranks
from paradiag.job import Job


def _checked(fig: go.Figure) -> dict[str, Any]:
    """The figure's JSON as plotly gives it once every property has gone through its validator (which raises on
    a property plotly does not know or a value it does not take)."""
    return json.loads(go.Figure(fig.to_plotly_json()).to_json())


# The jobs each builder is checked on: (job, its ranks folded as a large job's).
JOBS = [
    ("sample_traces/gpu_llm_slow_rank", False),  # a device a row, a slow rank marked
    ("sample_traces/gpu_llm_slow_rank", True),  # folded, as a large job's
    ("sample_traces/npu_pangu_pipeline_stage_imbalance", False),  # a pipeline: send/recv lines, bubbles
]


def _opened(monkeypatch: pytest.MonkeyPatch, view: Any, job_name: str, folded: bool) -> tuple[Job, int]:
    """The job and its slowest step, the ``view`` module's ranks folded beyond 2 ranks (else 16)."""
    monkeypatch.setattr(view, "SMALL_JOB", 2 if folded else 16)
    job = paradiag.open(job_name)
    step = slowest_step(job)
    assert step is not None
    return job, step


@pytest.mark.parametrize("job_name, folded", JOBS)
def test_marey_built_unchecked_is_the_checked_figure(
    monkeypatch: pytest.MonkeyPatch, job_name: str, folded: bool
) -> None:
    job, step = _opened(monkeypatch, marey, job_name, folded)
    data = marey.marey_data(job, step, None)
    plain = marey_figure(data)
    operator = plain.layout.meta[OPERATORS][0]  # every instance of the first operator outlined
    for fig in (
        plain,
        marey_figure(data, selected=(operator, None, None), path=marey.critical_path(job, step)),
    ):
        assert len(fig.data) > 3 and fig.layout.shapes[-1].name == "selected operator"
        assert json.loads(fig.to_json()) == _checked(fig)


@pytest.mark.parametrize("job_name, folded", JOBS)
def test_timeline_built_unchecked_is_the_checked_figure(
    monkeypatch: pytest.MonkeyPatch, job_name: str, folded: bool
) -> None:
    job, step = _opened(monkeypatch, timeline_fold, job_name, folded)
    ranks = shown_ranks(job, None, step)
    entries = rows_of(job, ranks, None)
    assert any(isinstance(e, dict) for e in entries) == folded
    lo, hi = step_span(job, step, None)
    drawn = set()
    for window, extra in (
        ((lo, hi), {"path": True, "instance": 3}),  # the critical path, a collective selected
        ((lo, lo + (hi - lo) // 20), {"path": True}),  # zoomed in: single intervals, their hover names
        ((lo, hi), {"max_primitives": 100}),  # merged to screen resolution, its note above the graph
    ):
        data = timeline_data(job, entries, window, pixels=800, step=step, **extra)  # type: ignore[arg-type]
        fig = timeline_figure(data, uirevision="u", marked=ranks[:1])
        drawn |= {t.name for t in fig.data}
        assert json.loads(fig.to_json()) == _checked(fig)
    assert {"critical path", "collective instance", "selected collective"} <= drawn


def test_an_unchecked_property_plotly_does_not_know_is_caught_by_the_check() -> None:
    fig = assembled([scatter(x=[1, 2], y=[3, 4], colour="red")], {"title": {"text": "t"}})
    with pytest.raises(ValueError, match="colour"):
        _checked(fig)
