"""The timeline's payload stays bounded at any zoom, compare pairs ranks by mesh coordinates, and the
communication matrix reads the Diagnosis's (filled from NPU per-link data on real exports)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import paradiag
from paradiag.analysis.compare import compare, stage_deltas
from paradiag.app.data.common import origin_ns, read_events
from paradiag.app.data.timeline import timeline_data
from paradiag.app.figures.compare import rank_changes_figure
from paradiag.app.figures.timeline import timeline_figure
from tests.conftest import shared_path

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
    assert (
        exact["waits"]["x0"]
        and len(exact["waits"]["wait_us"]) == len(exact["waits"]["x0"])
        and exact["links"]
    )
    waits = merged["waits"]
    assert waits["count"] and sum(waits["count"]) == len(exact["waits"]["x0"]) and not merged["links"]
    assert len(waits["x0"]) <= len(merged["rows"]) * 51 < len(exact["waits"]["x0"])
    fig = timeline_figure(merged)
    hover = next(t for t in fig.data if t.name == "wait" and t.hoveron == "points")
    assert hover.text is None and "merged" in hover.hovertemplate
    exact_hover = next(t for t in timeline_figure(exact).data if t.name == "wait" and t.hoveron == "points")
    assert exact_hover.text is None and "waited %{customdata:.1f} µs" in exact_hover.hovertemplate


def _report(
    layout: dict[str, int], compute_ms: dict[int, float] | None = None, coords: bool = True
) -> dict[str, Any]:
    """A ``paradiag.report/1`` document's parts compare reads: ranks laid out as Megatron does (tp fastest, then
    dp, then pp), each computing 10 ms (or ``compute_ms[stage]``)."""
    dp, tp, pp = layout["dp"], layout["tp"], layout["pp"]
    place = {
        s * dp * tp + d * tp + t: {"dp": d, "tp": t, "pp": s, "ep": 0}
        for s in range(pp)
        for d in range(dp)
        for t in range(tp)
    }
    ranks = [
        {
            "rank": r,
            "step_time_ns": {"median": 20e6},
            "breakdown": {
                "compute_ns": (compute_ms or {}).get(c["pp"], 10.0) * 1e6,
                "comm_exposed_ns": 5e6,
                "idle_ns": 5e6,
                "window_ns": 20e6,
            },
        }
        for r, c in sorted(place.items())
    ]
    job = {
        "num_ranks": len(place),
        "device_type": "gpu",
        "parallel_layout": {**layout, "coords": {str(r): c for r, c in place.items()} if coords else {}},
    }
    return {"job": job, "ranks": ranks, "metrics": {"step_time_ns": {"median": 20e6}}, "findings": []}


def test_compare_pairs_stages_across_layouts_folding_the_axes_whose_degree_differs() -> None:
    """A 64-rank job (dp4 tp2 pp8) against an 8-rank one (pp8): stage s of one is stage s of the other, whatever
    the rank ids; dp and tp are folded to the median of each stage's ranks, and the slow stage is named."""
    base = _report({"dp": 4, "tp": 2, "pp": 8})
    cand = _report({"dp": 1, "tp": 1, "pp": 8}, compute_ms={3: 13.0})
    doc = compare(base, cand, {}, {})
    pairing = doc["rank_pairing"]
    assert (
        pairing["by"] == "mesh coordinates"
        and pairing["axes"] == ["pp"]
        and pairing["folded"] == {"tp": [2, 1], "dp": [4, 1]}
    )
    assert [r["label"] for r in doc["ranks"]] == [f"pp{s}" for s in range(8)]
    stage3 = doc["ranks"][3]
    assert (
        stage3["baseline_ranks"] == list(range(24, 32))
        and stage3["candidate_ranks"] == [3]
        and stage3["rank"] is None
    )
    assert stage3["compute_ns"]["delta_pct"] == 30.0 and all(
        r["compute_ns"]["delta_pct"] == 0.0 for i, r in enumerate(doc["ranks"]) if i != 3
    )
    assert doc["top_change"]["culprit"] == {"ranks": [3]} and "position pp3" in doc["top_change"]["evidence"]
    assert (
        "folded: TP (2 in the baseline, 1 here), DP (4 in the baseline, 1 here)" in pairing["text"]
        and "every rank paired" in pairing["text"]
    )
    assert rank_changes_figure(doc).layout.xaxis.title.text == "position, paired by mesh coordinates"


def test_compare_pairs_same_layouts_by_coordinates_and_says_what_is_unpaired() -> None:
    """Same degrees but ranks numbered differently: each rank meets the one holding its place. Without
    coordinates ranks pair by id, and the ranks only one job has are named as unpaired."""
    base = _report({"dp": 2, "tp": 2, "pp": 2})
    cand = _report({"dp": 2, "tp": 2, "pp": 2})
    cand["job"]["parallel_layout"]["coords"] = {
        str(7 - int(r)): c for r, c in cand["job"]["parallel_layout"]["coords"].items()
    }
    cand["ranks"][0]["breakdown"]["compute_ns"] = 12e6  # rank 0 holds the place of the baseline's rank 7
    doc = compare(base, cand, {}, {})
    assert {r["baseline_ranks"][0]: r["candidate_ranks"] for r in doc["ranks"]} == {
        b: [7 - b] for b in range(8)
    }
    slow = next(r for r in doc["ranks"] if r["candidate_ranks"] == [0])
    assert (
        slow["baseline_ranks"] == [7] and slow["label"] == "7→0" and slow["compute_ns"]["delta_pct"] == 20.0
    )
    assert "8 hold a different rank id" in doc["rank_pairing"]["text"]
    small = _report({"dp": 2, "tp": 1, "pp": 1}, coords=False)
    by_id = compare(base, small, {}, {})["rank_pairing"]
    assert by_id["by"] == "rank id" and by_id["unpaired"] == {"baseline": [2, 3, 4, 5, 6, 7], "candidate": []}
    assert by_id["text"].endswith("unpaired: 6 baseline ranks (2, 3, 4, 5, 6, 7)")


def test_matrix_of_a_real_npu_export_draws_the_per_link_traffic_of_its_diagnosis() -> None:
    """The alexnet dp8 export traced ranks 0 and 1, whose HCCL link records name their group-local peers (no global
    ranks): the matrix is the Diagnosis's, with a row and column for every link end, each link rated."""
    from paradiag.app.data import comm
    from paradiag.app.data.common import diagnosis
    from paradiag.app.figures.comm import comm_figure

    job = paradiag.open(shared_path("npu", "msinsight_alexnet_dp8_text_level1"))
    links = diagnosis(job).communication_matrix
    data = comm.view(job)
    assert data["source"].startswith("the trace's per-link traffic") and data["level"] == "rank"
    assert [g["label"] for g in data["src"]] == [str(r) for r in range(8)]
    drawn = {
        (int(data["src"][i]["label"]), int(data["dst"][j]["label"])): v
        for i, row in enumerate(data["cells"]["bytes"])
        for j, v in enumerate(row)
        if v is not None
    }
    assert drawn == {(c.src, c.dst): pytest.approx(c.bytes / 1e6, rel=1e-3) for c in links} and {
        s for s, _ in drawn
    } == {0, 1}
    rated = [v for row in data["cells"]["slowness"] for v in row if v is not None]
    assert len(rated) == len(links) and min(rated) > 0
    assert comm_figure(data, "slowness").data[0].type == "heatmap"


def test_compare_pairs_stages_only_between_pipelines_of_the_same_depth() -> None:
    stages = {"stages": [{"stage": s, "compute_per_micro_batch_ns": 1e6} for s in range(2)]}
    deep = {"stages": [{"stage": s, "compute_per_micro_batch_ns": 1e6} for s in range(8)]}
    base, same, other = ({"metrics": {"pipeline": p}} for p in (stages, stages, deep))
    assert [s["stage"] for s in stage_deltas(base, same)] == [0, 1] and stage_deltas(base, other) == []


def test_compare_panel_says_how_ranks_were_paired(tmp_path: Path) -> None:
    from paradiag.app.config import Config
    from paradiag.app.factory import create_app
    from paradiag.app.selection import Selection
    from paradiag.app.views.compare.live import render_compare

    app = create_app(Config.from_env(upload_dir=tmp_path / "uploads", app_cache_dir=tmp_path / "app-cache"))
    with app.server.test_request_context("/"):
        view = Selection(job="sample:gpu_llm_slow_rank", base="sample:gpu_llm_fault_free").view("compare")
        summary, ranks, _ = render_compare(view)
    assert "ranks paired by mesh coordinates; every rank paired" in str(summary)
    assert ranks.layout.xaxis.title.text == "rank, paired by mesh coordinates"
