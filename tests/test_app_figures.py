"""Figure builders are pure: data in, figure out. These check what each draws from small hand-made data."""

from __future__ import annotations

import math
from typing import Any

from paradiag.app import palette
from paradiag.app.figures.common import segments, short_name
from paradiag.app.figures.flow import flow_figure
from paradiag.app.figures.heatmap import heatmap_figure
from paradiag.app.figures.timeline import timeline_figure


def _gaps(values: Any) -> list[float | None]:
    return [None if math.isnan(v) else float(v) for v in values]


def test_segments_are_one_nan_separated_polyline() -> None:
    xs, ys = segments([0.0, 2.0], [1.0, 3.0], [0, 1])
    assert _gaps(xs) == [0.0, 1.0, None, 2.0, 3.0, None]
    assert _gaps(ys) == [0, 0, None, 1, 1, None]


def test_short_name_drops_templates_and_namespaces() -> None:
    assert short_name("void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float>(float*, int)") == "cunn_SoftMaxForward"
    assert short_name("ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)") == "ncclDevKernel_SendRecv"


def _rows() -> list[dict]:
    return [
        {"label": "rank 0", "ranks": [0], "stage": 0, "values": [1.0, 2.0], "spread": [None, None], "group": None},
        {"label": "rank 1", "ranks": [1], "stage": 1, "values": [3.0, None], "spread": [None, None], "group": None},
    ]


def test_heatmap_outlines_the_selected_cell_and_separates_stages() -> None:
    fig = heatmap_figure(_rows(), [0, 1], "step_ms", "step time (ms)", {"ranks": [1], "step": 0})
    assert len(fig.data) == 1 and fig.data[0].type == "heatmap"
    assert [list(r) for r in fig.data[0].z] == [[1.0, 2.0], [3.0, None]]
    assert fig.data[0].customdata[1][0] == "1"
    rects = [s for s in fig.layout.shapes if s.type == "rect"]
    assert len(rects) == 1 and rects[0].y0 == 0.5 and rects[0].x0 == -0.5
    assert any(s.type == "line" and s.y0 == 0.5 for s in fig.layout.shapes)  # the stage boundary


def test_heatmap_zscore_is_diverging_around_zero() -> None:
    fig = heatmap_figure(_rows(), [0, 1], "zscore", "z")
    assert fig.data[0].zmid == 0


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
    assert all(t.type == "scattergl" for t in fig.data)
    compute = next(t for t in fig.data if t.name == "compute" and t.mode == "lines")
    assert compute.line.color == palette.KIND["compute"]
    assert _gaps(compute.x) == [0.0, 1.0, None, 5.0, 6.0, None]
    assert fig.layout.uirevision == "u"
    assert list(fig.layout.xaxis.range) == [0.0, 10.0]


def test_timeline_without_rows_says_so() -> None:
    fig = timeline_figure({"rows": [], "kinds": {}, "waits": {}, "links": [], "window_ms": [0, 1]})
    assert "no device events" in fig.layout.annotations[0].text


def test_flow_colours_by_time_or_imbalance_and_rings_the_selection() -> None:
    node = {"kind": "compute", "label": "gemm", "operators": ["gemm"], "time_ms": 2.0, "imbalance": 1.5, "slowest_rank": 1, "repeat": 1, "span_ms": [0.0, 1.0]}
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
    first = {"kind": "compute", "label": "gemm", "operators": ["gemm"], "time_ms": 2.0, "imbalance": 1.0, "slowest_rank": 0, "repeat": 1, "span_ms": [0.0, 1.0]}
    second = dict(first, span_ms=[5.0, 6.0])
    data = {"step": 0, "stages": [{"stage": 0, "ranks": [0], "tp": 1, "dp": 1, "nodes": [first, second]}]}
    every = next(t for t in flow_figure(data, selected=("gemm", 0)).data if t.name == "selected")
    assert list(every.x) == [0, 1]
    one = next(t for t in flow_figure(data, selected=("gemm", 0, 5.4)).data if t.name == "selected")
    assert list(one.x) == [1]
