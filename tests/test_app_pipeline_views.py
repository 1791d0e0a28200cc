"""Marey's graph, the execution-flow graph and the communication matrix: the analysis model they draw, the view
data (folding, windows, expansion) and the pure figure builders."""

from __future__ import annotations

import itertools
import json
from typing import Any

import numpy as np
import pytest

from paradiag.analysis import marey as model
from paradiag.app import palette
from paradiag.app.figures.common import inline_texts, text_of
from paradiag.app.figures.marey import marey_figure

SAMPLES = "sample_traces"


def _open(name: str) -> Any:
    import paradiag

    return paradiag.open(f"{SAMPLES}/{name}")


# ---- the Marey model ----


def test_instance_matrix_pairs_the_nth_occurrence_of_each_operator_on_every_device() -> None:
    # device 0 runs gemm, send, gemm; device 1 runs gemm, gemm, send and an extra op only it has.
    column = np.array([0, 0, 0, 1, 1, 1, 1])
    name = np.array([0, 1, 0, 0, 0, 1, 2])
    start = np.array([10, 20, 30, 11, 21, 40, 50])
    idx = model.instance_matrix(column, name, start, 2)
    assert idx.tolist() == [
        [0, 3],
        [2, 4],
        [1, 5],
    ]  # gemm#0, gemm#1, send#0 in order of median start; op 2 dropped
    assert model.instance_matrix(column[:0], name[:0], start[:0], 2).shape == (0, 2)


def _stage(
    devices: int, bands: int = 20, slow: dict[int, float] | None = None, late: dict[int, int] | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """bands x devices start/end: each band 10 long every 100; ``slow`` stretches a device's bands, ``late``
    shifts them."""
    start = np.tile(np.arange(bands)[:, None] * 100, (1, devices)).astype(np.int64)
    dur = np.full((bands, devices), 10.0)
    for c, factor in (slow or {}).items():
        dur[:, c] *= factor
    for c, shift in (late or {}).items():
        start[:, c] += shift
    return start, start + dur.astype(np.int64)


def test_fold_rows_keeps_an_anomalous_device_single_and_folds_the_rest() -> None:
    start, end = _stage(12, slow={7: 1.5})
    compute = np.ones(len(start), dtype=bool)
    rows = model.fold_rows(
        start, end, compute, [f"rank {c}" for c in range(12)], [c // 4 for c in range(12)], 2000
    )
    assert [(r.kind, r.members, r.anomalous) for r in rows] == [
        ("stage", [c for c in range(12) if c != 7], []),
        ("device", [7], [7]),
    ]


def test_fold_rows_gives_a_late_mesh_group_its_own_row_and_opens_groups_on_demand() -> None:
    start, end = _stage(12, late=dict.fromkeys((4, 5, 6, 7), 60))
    compute = np.ones(len(start), dtype=bool)
    names, groups = [f"rank {c}" for c in range(12)], [c // 4 for c in range(12)]
    rows = model.fold_rows(start, end, compute, names, groups, 1000)
    assert [(r.kind, r.members) for r in rows] == [
        ("stage", [0, 1, 2, 3, 8, 9, 10, 11]),
        ("group", [4, 5, 6, 7]),
    ]
    by_group = model.fold_rows(start, end, compute, names, groups, 1000, expand="groups")
    assert [r.kind for r in by_group] == ["group", "group", "group"]
    opened = model.fold_rows(start, end, compute, names, groups, 1000, opened=frozenset({2}))
    assert [r.members for r in opened if r.kind == "device"] == [[8], [9], [10], [11]]
    assert len(model.fold_rows(start, end, compute, names, groups, 1000, expand="devices")) == 12


def test_fold_rows_marks_the_findings_culprits_and_a_whole_stage_stays_folded() -> None:
    start, end = _stage(6)
    compute = np.ones(len(start), dtype=bool)
    names, groups = [f"rank {c}" for c in range(6)], list(range(6))
    kept = model.fold_rows(start, end, compute, names, groups, 2000, keep=frozenset({2}))
    assert [(r.kind, r.members, r.anomalous) for r in kept][-1] == ("device", [2], [2])
    whole = model.fold_rows(start, end, compute, names, groups, 2000, keep=frozenset(range(6)))
    assert [(r.kind, r.anomalous) for r in whole] == [("stage", list(range(6)))]


@pytest.mark.parametrize(
    ("lo", "hi", "visible"),
    [
        (250, 250, []),  # an empty window
        (10_000, 20_000, []),  # a window after the step
        (-500, -100, []),  # ... and before it
        (15, 95, []),  # inside the step, between two bands: no band overlaps it
        (95, 105, [1]),  # one band
        (0, 2000, list(range(20))),
    ],
)
def test_merge_bands_on_any_window(lo: int, hi: int, visible: list[int]) -> None:
    start, end = _stage(3)
    shown, group = model.merge_bands(start, end, ["compute"] * 20, lo, hi, 0.001)
    assert shown.tolist() == visible and len(group) == len(visible)
    assert model.merged(start[shown], group, "min").shape == (len(set(group.tolist())), 3)


def test_merge_bands_merges_close_neighbours_of_one_category_only() -> None:
    start, end = _stage(2, bands=4)
    _shown, group = model.merge_bands(start, end, ["compute", "compute", "send", "compute"], 0, 400, 0.5)
    assert group.tolist() == [0, 0, 1, 2]


# ---- view data on the samples ----


def test_marey_window_with_no_band_of_a_stage_in_it() -> None:
    """Issue 10: /?job=sample:npu_pangu_pipeline_stage_imbalance&step=1&t=3.553,3.603 raised in merge_bands."""
    from paradiag.app.data.common import origin_ns
    from paradiag.app.data.marey import marey_data

    job = _open("npu_pangu_pipeline_stage_imbalance")
    t0 = origin_ns(job)
    for a, b in ((3.553, 3.603), (1e6, 1e6 + 1), (5.0, 5.0)):
        data = marey_data(job, 1, (t0 + int(a * 1e6), t0 + int(b * 1e6)))
        assert len(data["stages"]) == 4
        marey_figure(data)  # draws (or says there is nothing) without raising
    assert (
        "no device work" in marey_figure(marey_data(job, 99, None)).layout.annotations[0].text
    )  # a step with no events
    one = marey_data(job, 1, None)["stages"][0]
    assert len(one["start"]) >= 1 and len(one["start"][0]) == len(one["rows"])


def test_marey_marks_the_slow_rank_of_gpu_llm_slow_rank() -> None:
    from paradiag.app.data.common import slowest_step
    from paradiag.app.data.marey import marey_data

    job = _open("gpu_llm_slow_rank")
    fig = marey_figure(marey_data(job, slowest_step(job), None))
    marks = next(t for t in fig.data if t.name == "anomalous device")
    assert any("rank 5" in text for text in marks.hovertext)
    ticks = list(fig.layout.yaxis.ticktext)
    assert [t for t in ticks if "⚠" in t] == [next(t for t in ticks if "rank 5" in t)]


def test_marey_bars_answer_the_mouse_and_a_click_outlines_one_instance() -> None:
    from paradiag.app.data.common import slowest_step
    from paradiag.app.data.marey import marey_data

    job = _open("gpu_llm_slow_rank")
    data = marey_data(job, slowest_step(job), None)
    fig = marey_figure(data)
    fills = [t for t in fig.data if t.fill == "toself" and t.name in palette.CATEGORY]
    assert {t.name for t in fills} >= {"compute", "send", "recv"} and all(
        t.mode == "none" and t.hoverinfo == "skip" for t in fills
    )
    points = [t for t in fig.data if t.hoveron == "points" and t.name == "compute"]
    assert points and all(t.mode == "none" for t in points)  # the bars' hover, drawn as nothing
    compute = next(t for t in points if "slowest device: rank %{customdata[4]}" in t.hovertemplate)
    texts = [text for t in points for text in text_of(t)]
    assert any("micro-batch 0 forward" in t for t in texts) and any("backward" in t for t in texts)
    index, stage, at, ms, slow_rank, slow_ms = compute.customdata[0][:6]
    op, stage = (
        fig.layout.meta["operators"][int(index)],
        int(stage),
    )  # the operator's name is the figure's, once
    assert (
        any(
            text_of(compute)[0].endswith(f"<br>{row['label']}") for st in data["stages"] for row in st["rows"]
        )
        and ms > 0
        and slow_ms > 0
    )
    assert slow_rank in {r for st in data["stages"] for row in st["rows"] for r in row["ranks"]}
    # each name travels once (trace meta), the page writes the points' text out: fewer bytes, the same words
    sent = sum(len(json.dumps(t.meta)) for t in points)
    assert sent < sum(len(text) for text in texts) and not any(t.text for t in points)
    written = inline_texts(marey_figure(data))
    assert [
        text for t in written.data if t.hoveron == "points" and t.name == "compute" for text in t.text
    ] == texts
    every = marey_figure(data, selected=(op, stage, None))
    one = marey_figure(data, selected=(op, stage, at))
    outline = one.layout.shapes[-1]  # the last shape: patched alone when the selection moves
    assert outline.name == "selected operator"
    rows = sum(len(st["rows"]) for st in data["stages"] if st["stage"] == stage)
    assert outline.path.count("M") == rows  # one rectangle per row of that one band
    assert every.layout.shapes[-1].path.count("M") >= rows


def test_marey_hover_points_lie_in_the_window_however_long_its_bars() -> None:
    """A narrow window (a comm-matrix link's instance: 0.1 ms at 256 ranks) under long waits put thousands of
    hover points outside it (0.5 MB): points lie in the window, at most HOVER_STEP of it apart."""
    from paradiag.app.data.common import origin_ns, slowest_step
    from paradiag.app.data.marey import marey_data
    from paradiag.app.figures.marey import HOVER_STEP

    job = _open("gpu_llm_slow_rank")
    step = slowest_step(job)
    whole = marey_data(job, step, None)
    lo, hi = whole["window_ms"]
    a = lo + (hi - lo) * 0.4
    b = a + (hi - lo) / 200  # far shorter than most bars
    t0 = origin_ns(job)
    data = marey_data(job, step, (t0 + int(a * 1e6), t0 + int(b * 1e6)))
    wa, wb = data["window_ms"]
    points = [t for t in marey_figure(data).data if t.hoveron == "points" and t.name in palette.CATEGORY]
    x = np.concatenate([np.asarray(t.x, dtype=np.float64) for t in points])
    bars = sum(len(row) for st in data["stages"] for row in st["start"])
    outside = (x < wa) | (x > wb)
    assert len(x) > outside.sum() and outside.sum() <= bars  # a bar past the window: one point, at its start
    assert bars <= len(x) <= bars * (1 / HOVER_STEP + 1)


# ---- the communication matrix ----


def test_slowness_rates_a_link_against_comparable_links() -> None:
    from paradiag.app.data.comm import slowness

    cells = [
        {"src": a, "dst": a + 1, "link_type": "HCCS", "bytes": 2**30, "instances": 8, "bandwidth_gbps": 100.0}
        for a in range(4)
    ]
    cells[2] = dict(cells[2], bandwidth_gbps=25.0)
    cells.append(
        {"src": 0, "dst": 4, "link_type": "RDMA", "bytes": 2**20, "instances": 8, "bandwidth_gbps": 10.0}
    )  # alone in its class
    assert slowness(cells) == [1.0, 1.0, 4.0, 1.0, 1.0]


def test_matrix_colours_the_slow_link_of_npu_slow_link() -> None:
    from paradiag.app.data.comm import view
    from paradiag.app.figures.comm import comm_figure

    data = view(_open("npu_slow_link"))
    z = np.array([[np.nan if v is None else v for v in row] for row in data["cells"]["slowness"]])
    i, j = np.unravel_index(np.nanargmax(z), z.shape)
    assert (data["src"][i]["label"], data["dst"][j]["label"]) == ("1", "2") and z[i, j] > 3
    fig = comm_figure(data, "slowness", selected=[1, 2])
    assert (
        fig.data[0].zmin == 1.0 and fig.layout.shapes[0].x0 == j - 0.5 and fig.layout.shapes[0].y0 == i - 0.5
    )


def test_matrix_aggregates_above_its_size_and_opens_a_block(monkeypatch: pytest.MonkeyPatch) -> None:
    from paradiag.app.data import comm

    monkeypatch.setattr(comm, "MAX_GROUPS", 2)
    job = _open("gpu_llm_slow_rank")  # 8 ranks, two pipeline stages
    top = comm.view(job)
    assert top["level"] == "stage" and [g["label"] for g in top["src"]] == ["s0", "s1"]
    whole = comm.matrix(job)
    assert sum(v for row in top["cells"]["bytes"] for v in row if v is not None) == pytest.approx(
        sum(c["bytes"] for c in whole["cells"]) / 1e6, rel=1e-3
    )
    s0 = top["src"][0]["ranks"]
    block = comm.block_at(top, "s0", "s1")  # a click on a block opens it
    assert block == {"src": s0, "dst": top["dst"][1]["ranks"]} and comm.block_at(top, "s9", "s0") is None
    opened = comm.view(job, block["src"], block["dst"])
    assert opened["level"] == "rank" and [g["label"] for g in opened["src"]] == [str(r) for r in s0]
    assert comm.block_at(opened, str(s0[0]), opened["dst"][0]["label"]) is None  # ranks: a click is a link
    from paradiag.app.figures.comm import comm_figure

    # the browser passes a click on to the drill by the level the figure says it was drawn at
    assert comm_figure(top, "bytes").layout.meta == {"level": "stage"}
    assert comm_figure(opened, "bytes").layout.meta == {"level": "rank"}


# ---- the execution-flow graph ----


def test_flow_opens_on_the_culprit_stage_of_the_pangu_sample() -> None:
    from paradiag.app.data.common import slowest_step
    from paradiag.app.data.flow import flow_view
    from paradiag.app.figures.flow import flow_figure

    job = _open("npu_pangu_pipeline_stage_imbalance")
    data = flow_view(job, slowest_step(job))
    assert data["culprit_stage"] == 0
    fig = flow_figure(data)
    ticks = list(fig.layout.yaxis.ticktext)
    assert "⚠" in ticks[0] and not any("⚠" in t for t in ticks[1:])
    assert fig.layout.shapes[0].y0 == pytest.approx(-0.4)
    assert {t.name for t in fig.data if t.showlegend} >= {
        "compute",
        "collective",
        "send",
        "receive",
        "repeated block",
    }
    points = next(t for t in fig.data if t.name == "operators")
    from paradiag.app.figures.flow import LABEL_APART

    for st in data["stages"]:  # each stage's hottest operator named with its time; labels never pile up
        mine = [
            (x, label)
            for x, y, label in zip(points.x, points.y, points.text, strict=True)
            if y == st["stage"] and label
        ]
        computing = [n for n in st["nodes"] if n["kind"] in ("compute", "memory", "block")]
        if computing:
            hot = max(computing, key=lambda n: n["time_ms"])
            assert any(f"{hot['time_ms']:.1f} ms" in label for _, label in mine)
        assert len(mine) <= 2 and all(abs(a[0] - b[0]) >= LABEL_APART for a, b in itertools.pairwise(mine))
    by_time = flow_figure(data, "time")
    timed = next(t for t in by_time.data if t.name == "operators")
    kinds = [n["kind"] for st in data["stages"] for n in st["nodes"]]
    assert all(
        np.isnan(c) == (k in ("send", "recv", "collective"))
        for c, k in zip(timed.marker.color, kinds, strict=True)
    )


def test_flow_blocks_open_one_at_a_time() -> None:
    from paradiag.app.data.common import slowest_step
    from paradiag.app.data.flow import flow_view

    job = _open("gpu_llm_slow_rank")
    step = slowest_step(job)
    collapsed = flow_view(job, step)
    block = next(n for st in collapsed["stages"] for n in st["nodes"] if n["kind"] == "block")
    stage = int(block["key"].split(":")[0])
    opened = flow_view(job, step, [block["key"]])
    before = next(st for st in collapsed["stages"] if st["stage"] == stage)["nodes"]
    after = next(st for st in opened["stages"] if st["stage"] == stage)["nodes"]
    assert (
        len(after)
        == len(before) - 1 + len([n for n in after if n.get("within") == block["key"]])
        > len(before)
    )
    inner = sum(
        1 for n in after if n.get("within") == block["key"] and n["kind"] == "block"
    )  # a block of passes holds passes
    assert (
        sum(1 for st in opened["stages"] for n in st["nodes"] if n["kind"] == "block")
        == sum(1 for st in collapsed["stages"] for n in st["nodes"] if n["kind"] == "block") - 1 + inner
    )
    assert "members" not in block


def test_marey_folds_alike_devices_and_opens_one_stage_at_a_time(monkeypatch: pytest.MonkeyPatch) -> None:
    from paradiag.app.data import marey
    from paradiag.app.data.common import slowest_step

    monkeypatch.setattr(marey, "SMALL_JOB", 2)  # fold an 8-rank job as if it were a large one
    job = _open("gpu_llm_slow_rank")
    step = slowest_step(job)
    data = marey.marey_data(job, step, None)
    rows = {st["stage"]: st["rows"] for st in data["stages"]}
    assert [r["ranks"] for r in rows[1] if r["anomalous"]] == [[5]]  # the slow rank alone and marked
    assert sum(len(r["ranks"]) for r in rows[1]) == 4 and len(rows[1]) < 4
    assert {"stage:0", "stage:1"} <= {o["value"] for o in data["expandable"]}
    opened = marey.marey_data(job, step, None, expand=["stage:1"])
    assert len(next(st for st in opened["stages"] if st["stage"] == 1)["rows"]) > len(rows[1])
    assert (
        next(st for st in opened["stages"] if st["stage"] == 0)["rows"] == rows[0]
    )  # the other stage stays folded


def test_a_large_stage_reads_the_devices_that_can_differ_and_draws_the_others_with_their_row(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from paradiag.app.data import marey
    from paradiag.app.data.common import slowest_step
    from paradiag.app.data.mesh import mesh_of

    monkeypatch.setattr(marey, "SMALL_JOB", 2)  # fold, and read as if every stage were large
    monkeypatch.setattr(marey, "READ_ALL", 2)
    job = _open("gpu_llm_slow_rank")
    step = slowest_step(job)
    mesh = mesh_of(job)
    stage = mesh.stage[5]
    read = marey.read_ranks(job, step, stage)
    groups = {mesh.dp[r] for r in mesh.ranks_of_stage(stage)}
    assert 5 in read and {mesh.dp[r] for r in read} == groups and len(read) < len(mesh.ranks_of_stage(stage))
    data = marey.marey_data(job, step, None)
    rows = next(st for st in data["stages"] if st["stage"] == stage)["rows"]
    assert sorted(r for row in rows for r in row["ranks"]) == mesh.ranks_of_stage(
        stage
    )  # every device drawn once
    assert [row["ranks"] for row in rows if row["anomalous"]] == [[5]]
    folded = next(row for row in rows if row["kind"] == "stage")
    assert folded["label"].endswith(f"{len(folded['ranks'])} alike") and folded["ranks"][0] in read
    group = mesh.dp[5]
    opened = marey.marey_data(job, step, None, expand=[f"group:{stage}:{group}"])
    singles = [
        row["ranks"]
        for st in opened["stages"]
        if st["stage"] == stage
        for row in st["rows"]
        if row["kind"] == "device"
    ]
    assert sorted(r for rs in singles for r in rs) == sorted(
        r for r in mesh.ranks_of_stage(stage) if mesh.dp[r] == group
    )  # an opened group reads its devices


def test_marey_rectangles_of_one_height_less_than_a_pixel_apart_are_one_polygon() -> None:
    from paradiag.app.figures.marey import _merged

    a, b = np.array([0.0, 1.0, 1.005, 5.0, 0.0, np.nan]), np.array([1.0, 1.004, 2.0, 6.0, 3.0, 1.0])
    y0, y1 = np.array([0.0, 0.0, 0.0, 0.0, 0.0, 0.0]), np.array([1.0, 1.0, 1.0, 1.0, 2.0, 1.0])
    x0, x1, lo, hi = _merged(a, b, y0, y1, pixel=0.01)
    # one row's touching bars merge; a gap wider than the pixel stays; a taller bar (another slice) stays apart;
    # a bar with no start (not on this row) is dropped
    assert sorted(zip(x0, x1, lo, hi, strict=True)) == [
        (0.0, 2.0, 0.0, 1.0),
        (0.0, 3.0, 0.0, 2.0),
        (5.0, 6.0, 0.0, 1.0),
    ]
    nested = _merged(np.array([0.0, 0.5, 3.0]), np.array([4.0, 1.0, 3.5]), 0.0, 1.0, pixel=0.01)
    assert [list(v) for v in nested[:2]] == [
        [0.0],
        [4.0],
    ]  # a bar inside a longer one ends where the longer ends
    assert len(_merged(a, b, y0, y1, pixel=0.0)[0]) == len(a)  # no pixel: as they are
