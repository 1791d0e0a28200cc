"""A served job (``paradiag serve PATH``): after ``warm`` (app/warm.py) every step's views are ready, so a step
change reads no events, and the warming gives way while requests are in flight; its page is laid out visible."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from paradiag.app.selection import Selection

SAMPLE = Path(__file__).resolve().parents[1] / "sample_traces" / "gpu_llm_slow_rank"


def warmed_app(folder: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, what: str) -> Any:
    """The app serving ``folder`` as "served", warmed; from then on reading events fails the test (``what`` did)."""
    from paradiag.app.config import Config
    from paradiag.app.factory import create_app
    from paradiag.app.warm import warm
    from paradiag.job import Job

    monkeypatch.setenv("PARADIAG_CACHE_DIR", str(tmp_path / "cache"))
    app = create_app(
        Config.from_env(
            job=str(folder), upload_dir=tmp_path / "uploads", app_cache_dir=tmp_path / "app-cache"
        )
    )
    warm(app, "served").join()

    def cold(*_: Any, **__: Any) -> Any:
        raise AssertionError(f"{what} read events after warming")

    monkeypatch.setattr(Job, "events", cold)
    return app


def test_every_step_is_warmed_and_a_step_change_reads_no_events(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from paradiag.app.data.common import steps_of
    from paradiag.app.views.detail.live import render_detail
    from paradiag.app.views.flow.live import render_flow
    from paradiag.app.views.marey.live import render_marey
    from paradiag.app.views.timeline.live import render_timeline

    app = warmed_app(SAMPLE, tmp_path, monkeypatch, "a step view")
    with app.server.test_request_context("/"):
        from paradiag.app import context, ids
        from paradiag.app.callbacks.header import SHOWN
        from paradiag.app.layouts import shell

        page = shell.layout()
        assert (
            page[ids.JOB_PAGE].style == SHOWN and page[ids.START_PAGE].style != SHOWN
        )  # laid out visible: drawn once

        steps = steps_of(context.job("served"))
        assert len(steps) > 1
        for step in steps:
            sel = Selection(job="served", step=step)
            assert render_marey(sel.view("marey"), [])[0].data
            assert render_flow(sel.view("flow"), "imbalance", [])[0].data
            assert render_timeline(sel.view("timeline"))[0].data
            assert render_detail(sel.view("detail"))[0].startswith(f"rank 5, step {step}")


def test_warming_waits_until_no_request_is_in_flight() -> None:
    from paradiag.app.warm import Requests

    requests = Requests()
    requests.started()
    waited = threading.Thread(target=requests.wait_quiet, args=(0.01,))
    waited.start()
    waited.join(timeout=0.2)
    assert waited.is_alive()  # a request is in flight: the warming waits
    requests.ended()
    waited.join(timeout=30)
    assert not waited.is_alive()


def test_a_click_on_any_row_of_the_first_heatmap_reads_no_events_after_warming(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A folded row selects all its ranks: their timeline and detail are warmed too, in every step."""
    from paradiag.app.callbacks.selection import select
    from paradiag.app.data.overview import DEFAULT_METRIC
    from paradiag.app.views.detail.live import render_detail
    from paradiag.app.views.overview.live import render_heatmap
    from paradiag.app.views.timeline.live import render_timeline
    from paradiag.simulator import SimConfig, parse_fault, simulate
    from tests.test_app_timeline_folds import CULPRIT, MESH

    folder = simulate(
        SimConfig(
            output=tmp_path / "job", faults=(parse_fault(f"slow_device:ranks={CULPRIT},factor=1.5"),), **MESH
        )
    )
    app = warmed_app(folder, tmp_path, monkeypatch, "a click on a heatmap row")
    with app.server.test_request_context("/"):
        from paradiag.app import ids

        opened = Selection(job="served")
        heat = render_heatmap(opened.view("job"), DEFAULT_METRIC, [], opened.view("mark")).data[0]
        folded = [i for i, cells in enumerate(heat.customdata) if "," in cells[0]]
        assert folded and len(heat.y) < 64  # the stages fold
        for y, cells in enumerate(heat.customdata):
            for x, ranks in zip(heat.x, cells, strict=True):
                sel = select(
                    (ids.HEATMAP, "clickData"),
                    {"points": [{"x": x, "y": y, "customdata": ranks}]},
                    opened.but(step=0),
                    None,
                )
                assert sel.ranks == [int(r) for r in ranks.split(",")] and sel.step == int(x)
                assert render_timeline(sel.view("timeline"))[0].data
                assert render_detail(sel.view("detail"))[0].startswith(f"rank {sel.ranks[0]}, step {x}")
