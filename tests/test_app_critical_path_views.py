"""The step's critical path (``Diagnosis.critical_path``) drawn in Marey's graph: on the culprit's row for a
slow-rank job whether its devices are drawn one a row or folded, clipped to a zoomed window, and in the static
snapshot (with a sentence saying what it is)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import paradiag
from paradiag.app.data import marey
from paradiag.app.data.common import slowest_step
from paradiag.app.figures.marey import marey_figure, rows_of

SLOW = "sample_traces/gpu_llm_slow_rank"  # rank 5 computes 1.4x slower


def _time_by_row(trace: Any) -> dict[float, float]:
    """How long the line runs along each row (its points come in pairs: a piece's start and end)."""
    x, y = np.asarray(trace.x, dtype=np.float64), np.asarray(trace.y, dtype=np.float64)
    out: dict[float, float] = {}
    for a, b, row in zip(x[::2], x[1::2], y[::2], strict=True):
        out[float(row)] = out.get(float(row), 0.0) + float(b - a)
    return out


@pytest.mark.parametrize("small_job", [16, 2])  # every device a row; folded as a large job is
def test_the_path_runs_along_the_slow_ranks_row(monkeypatch: pytest.MonkeyPatch, small_job: int) -> None:
    monkeypatch.setattr(marey, "SMALL_JOB", small_job)
    job = paradiag.open(SLOW)
    step = slowest_step(job)
    data = marey.marey_data(job, step, None)
    path = marey.critical_path(job, step)
    fig = marey_figure(data, path=path)
    trace = next(t for t in fig.data if t.name == "critical path")
    assert (
        fig.layout.shapes[-1].name == "selected operator"
    )  # the selection's outline stays the last shape (it is patched alone)
    rank_y = rows_of(data)[1]
    by_row = _time_by_row(trace)
    assert max(by_row, key=by_row.__getitem__) == pytest.approx(rank_y[5])
    assert any("rank 5" in t and "compute" in t for t in trace.hovertext)
    assert all(" ms" in t and "critical path · " in t for t in trace.hovertext)
    total = sum(p["end_ms"] - p["start_ms"] for p in path)
    stored = job.diagnosis().critical_path.to_pylist()
    assert total == pytest.approx(
        sum(s["end_ns"] - s["start_ns"] for s in stored if s["step"] == step) / 1e6, rel=1e-3
    )
    assert "critical path" not in {t.name for t in marey_figure(data).data}  # off unless asked for


def test_the_path_is_clipped_to_the_window_and_bounded() -> None:
    job = paradiag.open("sample_traces/npu_pangu_pipeline_stage_imbalance")
    step = slowest_step(job)
    whole = marey.critical_path(job, step)
    assert 0 < len(whole) <= marey.MAX_PATH
    a, b = whole[0]["start_ms"], whole[-1]["end_ms"]
    lo, hi = a + (b - a) / 3, a + (b - a) / 2
    t0 = marey.origin_ns(job)
    part = marey.critical_path(job, step, (t0 + int(lo * 1e6), t0 + int(hi * 1e6)))
    assert 0 < len(part) < len(whole)
    assert min(p["start_ms"] for p in part) >= lo - 1e-6 and max(p["end_ms"] for p in part) <= hi + 1e-6


def test_the_snapshot_draws_the_path_and_says_so(tmp_path: Path) -> None:
    from paradiag.analysis.report import build_report
    from paradiag.app.static_page import render_snapshot

    job = paradiag.open(SLOW)
    page = render_snapshot(job, build_report(job))
    assert "with its critical path" in page and "The thick orange line is the step's critical path" in page
    assert '"name":"critical path"' in page
    assert "most compute on rank 5" in page


def test_a_zoomed_window_shows_the_path_in_more_detail() -> None:
    job = paradiag.open(SLOW)
    step = slowest_step(job)
    whole = marey.critical_path(job, step)
    a, b = whole[0]["start_ms"], whole[-1]["end_ms"]
    lo, hi = a + (b - a) * 0.45, a + (b - a) * 0.55
    t0 = marey.origin_ns(job)
    part = marey.critical_path(job, step, (t0 + int(lo * 1e6), t0 + int(hi * 1e6)))
    overlapping = [p for p in whole if p["end_ms"] > lo and p["start_ms"] < hi]
    assert len(part) > len(overlapping)  # the step's path merged to MAX_PATH pieces; a tenth of it is not
    assert sum(p["end_ms"] - p["start_ms"] for p in part) == pytest.approx(
        hi - lo, rel=0.01
    )  # the path tiles the window
