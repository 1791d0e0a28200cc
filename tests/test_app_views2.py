"""The timeline's payload stays bounded at any zoom, compare pairs ranks by mesh coordinates, and the
communication matrix reads the Diagnosis's (filled from NPU per-link data on real exports)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

import paradiag
from paradiag.app.data.common import origin_ns, read_events
from paradiag.app.data.timeline import timeline_data
from paradiag.app.figures.timeline import timeline_figure

SAMPLES = Path(__file__).resolve().parents[1] / "sample_traces"


def test_zoomed_out_timeline_merges_waits_to_screen_resolution_too() -> None:
    """Waits grow with the window like intervals do: once the intervals are merged per pixel column, so are the
    waits (a count per merged run, no per-wait text), and the drawing stays within rows x kinds x pixels."""
    job = paradiag.open(SAMPLES / "gpu_llm_slow_rank")
    ranks = job.rank_ids[:4]
    t0 = origin_ns(job)
    events = read_events(job, ranks=ranks, columns=["start_ns", "dur_ns"])
    end = int(np.max(events.column("start_ns").to_numpy() + events.column("dur_ns").to_numpy()))
    exact = timeline_data(job, ranks, (t0, end), pixels=50, max_primitives=10**9)
    merged = timeline_data(job, ranks, (t0, end), pixels=50, max_primitives=10)
    assert not exact["aggregated"] and merged["aggregated"]
    assert exact["waits"]["x0"] and len(exact["waits"]["wait_us"]) == len(exact["waits"]["x0"]) and exact["links"]
    waits = merged["waits"]
    assert waits["count"] and sum(waits["count"]) == len(exact["waits"]["x0"]) and not merged["links"]
    assert len(waits["x0"]) <= len(merged["rows"]) * 51 < len(exact["waits"]["x0"])
    fig = timeline_figure(merged)
    hover = next(t for t in fig.data if t.name == "wait" and t.mode == "markers")
    assert hover.text is None and "merged" in hover.hovertemplate
    exact_hover = next(t for t in timeline_figure(exact).data if t.name == "wait" and t.mode == "markers")
    assert exact_hover.text is None and "waited %{customdata:.1f} µs" in exact_hover.hovertemplate
