"""Figure builders are pure: data in, figure out. These check what each draws from small hand-made data."""

from __future__ import annotations

import math
import re
from typing import Any

import pytest

from paradiag.app import palette
from paradiag.app.data.overview import heatmap_rows
from paradiag.app.figures.common import boxes_path, short_name
from paradiag.app.figures.flow import flow_figure
from paradiag.app.figures.heatmap import heatmap_figure
from paradiag.app.figures.timeline import ROW_PX, timeline_figure


def _gaps(values: Any) -> list[float | None]:
    return [None if math.isnan(v) else float(v) for v in values]


def test_bars_are_closed_pieces_of_one_path() -> None:
    # x to 1/20,000 of its extent (3: four decimals), y (rows) to 0.001; a bar with a missing end is left out
    assert (
        boxes_path([0.0, 2.0, math.nan], [1.0, 3.0, 4.0], [-0.25, 0.75, 1.75], [0.25, 1.25, 2.25])
        == "M0.0000,-0.250H1.0000V0.250H0.0000ZM2.0000,0.750H3.0000V1.250H2.0000Z"
    )
    assert boxes_path([], [], [], []) == ""


def test_short_name_drops_templates_and_namespaces() -> None:
    assert (
        short_name("void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float>(float*, int)")
        == "cunn_SoftMaxForward"
    )
    assert short_name("ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)") == "ncclDevKernel_SendRecv"


def _rows() -> list[dict]:
    return [
        {
            "label": "rank 0",
            "ranks": [0],
            "stage": 0,
            "values": [1.0, 2.0],
            "spread": [None, None],
            "group": None,
        },
        {
            "label": "rank 1",
            "ranks": [1],
            "stage": 1,
            "values": [3.0, None],
            "spread": [None, None],
            "group": None,
        },
    ]


def test_heatmap_outlines_the_selected_cell_and_separates_stages() -> None:
    fig = heatmap_figure(_rows(), [0, 1], "step_ms", "step time (ms)", {"ranks": [1], "step": 0})
    assert len(fig.data) == 1 and fig.data[0].type == "heatmap"
    assert [list(r) for r in fig.data[0].z] == [[1.0, 2.0], [3.0, None]]
    assert fig.data[0].customdata[1][0] == "1"
    rects = [s for s in fig.layout.shapes if s.type == "rect"]
    assert len(rects) == 1 and rects[0].y0 < 1 < rects[0].y1 and rects[0].x0 == -0.5
    assert any(s.type == "line" and s.y0 == 0.5 for s in fig.layout.shapes)  # the stage boundary
    assert (
        fig.data[0].zmin == 0 and fig.data[0].zmax == 3.0
    )  # a time starts at 0: a 1 % spread looks like one


def test_heatmap_zscore_is_diverging_around_zero_and_outlines_culprits() -> None:
    rows = _rows()
    rows[1]["culprit"] = "slow_device"
    fig = heatmap_figure(rows, [0, 1], "zscore", "z")
    assert fig.data[0].zmid == 0 and fig.data[0].zmax == -fig.data[0].zmin >= 3.0
    red = [s for s in fig.layout.shapes if s.type == "rect" and s.line.color == palette.CULPRIT]
    assert (
        len(red) == 1 and red[0].x0 == -0.5 and red[0].x1 == 1.5 and red[0].y0 < 1 < red[0].y1
    )  # the whole row
    assert fig.layout.yaxis.ticktext[1].startswith("⚠")


def test_many_ranks_fold_into_alike_rows_and_outliers_stay() -> None:
    """40 ranks in 2 stages: each stage folds into one row of alike ranks, the rank that stands out keeps its own
    row; an unfolded stage shows its DP groups, folded the same way."""
    ranks = list(range(40))
    own = [[0.2, -0.1] for _ in ranks]
    own[27] = [9.0, 8.0]
    ov = {
        "ranks": ranks,
        "steps": [0, 1],
        "stage": [r // 20 for r in ranks],
        "dp": [(r // 2) % 10 for r in ranks],
        "metrics": {"own_z": own, "step_ms": [[10.0, 11.0] for _ in ranks]},
    }
    rows = heatmap_rows(ov, "step_ms", max_rows=32)
    assert [r["label"] for r in rows] == ["s0 · 20 ranks", "s1 · 19 alike ranks", "rank 27 · s1"]
    assert rows[1]["spread"][0] == "10.000 / 10.000 / 10.000"
    rows = heatmap_rows(ov, "step_ms", expanded=["s1"], max_rows=32, culprit={3: "slow_device"})
    assert [r["label"] for r in rows][:3] == ["s0 · 19 alike ranks", "rank 3 · s0", "s1.dp0 · 2 ranks"]
    assert "rank 27 · s1" in [r["label"] for r in rows] and len(rows) == 2 + 10 + 1
    assert len(heatmap_rows(ov, "step_ms", max_rows=64)) == 40


def test_timeline_draws_one_webgl_trace_per_kind_plus_waits_and_links() -> None:
    data = {
        "rows": [{"rank": 0, "track": 7, "label": "r0"}, {"rank": 1, "track": 7, "label": "r1"}],
        "window_ms": [0.0, 10.0],
        "aggregated": False,
        "num_events": 3,
        "kinds": {
            "compute": {"x0": [0.0, 5.0], "x1": [1.0, 6.0], "row": [0, 1], "hover": ["a", "b"]},
            "communication": {"x0": [2.0], "x1": [4.0], "row": [0], "hover": ["c"]},
        },
        "waits": {"x0": [2.0], "x1": [3.0], "row": [0], "hover": ["w"]},
        "links": [{"x": [2.0, 3.0], "row": [0, 1]}],
    }
    fig = timeline_figure(data, uirevision="u")
    names = [t.name for t in fig.data]
    assert names.count("compute") == 2 and names.count("communication") == 2 and "wait" in names
    assert all(
        t.type == "scatter" for t in fig.data
    )  # SVG: a WebGL canvas as tall as a timeline costs seconds
    # the bars: one filled path shape per kind (in its legend group, whose entry is a trace of its own)
    compute = next(s for s in fig.layout.shapes if s.name == "compute")
    assert compute.fillcolor == palette.KIND["compute"] and compute.legendgroup == "compute"
    half = max(3.0, min(16.0, ROW_PX * 0.7)) / 2 / ROW_PX  # the bars as high as the lines they replace
    corners = [[float(v) for v in m.split(",")] for m in re.findall(r"M([-0-9.]+,[-0-9.]+)", compute.path)]
    assert corners == [[0.0, pytest.approx(-half, abs=1e-3)], [5.0, pytest.approx(1 - half, abs=1e-3)]]
    assert re.findall(r"H([-0-9.]+)", compute.path)[::2] == ["1.0000", "6.0000"]
    assert fig.layout.uirevision == "u"
    assert list(fig.layout.xaxis.range) == [0.0, 10.0]


def test_timeline_without_rows_says_so() -> None:
    fig = timeline_figure({"rows": [], "kinds": {}, "waits": {}, "links": [], "window_ms": [0, 1]})
    assert "no device events" in fig.layout.annotations[0].text


def test_flow_colours_by_time_or_imbalance_and_rings_the_selection() -> None:
    node = {
        "kind": "compute",
        "label": "gemm",
        "operators": ["gemm"],
        "time_ms": 2.0,
        "imbalance": 1.5,
        "slowest_rank": 1,
        "repeat": 1,
        "span_ms": [0.0, 1.0],
    }
    block = dict(node, kind="block", label="2 nodes ×4", imbalance=1.1, operators=["a", "b"])
    data = {"step": 0, "stages": [{"stage": 0, "ranks": [0, 1], "tp": 2, "dp": 1, "nodes": [node, block]}]}
    by_time = flow_figure(data, "time")
    points = next(t for t in by_time.data if t.name == "operators")
    assert list(points.marker.color) == [2.0, 2.0]
    assert list(points.marker.symbol) == ["circle", "square"]
    by_imbalance = flow_figure(data, "imbalance", selected=("gemm", 0))
    assert list(next(t for t in by_imbalance.data if t.name == "operators").marker.color) == [1.5, 1.1]
    assert "selected" in [t.name for t in by_imbalance.data]


def test_flow_rings_only_the_node_of_the_clicked_instance() -> None:
    first = {
        "kind": "compute",
        "label": "gemm",
        "operators": ["gemm"],
        "time_ms": 2.0,
        "imbalance": 1.0,
        "slowest_rank": 0,
        "repeat": 1,
        "span_ms": [0.0, 1.0],
    }
    second = dict(first, span_ms=[5.0, 6.0])
    data = {"step": 0, "stages": [{"stage": 0, "ranks": [0], "tp": 1, "dp": 1, "nodes": [first, second]}]}
    every = next(t for t in flow_figure(data, selected=("gemm", 0)).data if t.name == "selected")
    assert list(every.x) == [0, 1]
    one = next(t for t in flow_figure(data, selected=("gemm", 0, 5.4)).data if t.name == "selected")
    assert list(one.x) == [1]


def test_finding_ranks_read_as_ranges() -> None:
    from paradiag.app.callbacks.header import rank_list

    assert rank_list(list(range(224, 256))) == "224–255 (32)"
    assert rank_list([60, 52]) == "52, 60" and rank_list([5]) == "5"
    assert rank_list([1, 2, 3, 7, 9, 10]) == "1–3, 7, 9, 10 (6)"
