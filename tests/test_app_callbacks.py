"""Callbacks called as plain functions on a bundled sample job: the selection reducer, each view, the URL."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from dash import no_update

from paradiag.app import ids, palette
from paradiag.app.selection import Selection

SAMPLE = "gpu_llm_slow_rank"


@pytest.fixture(scope="module")
def app_ctx(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from paradiag.app.config import Config
    from paradiag.app.factory import create_app

    root = tmp_path_factory.mktemp("app")
    mp = pytest.MonkeyPatch()
    mp.setenv("PARADIAG_CACHE_DIR", str(root / "cache"))
    app = create_app(Config.from_env(upload_dir=root / "uploads", app_cache_dir=root / "app-cache"))
    with app.server.test_request_context("/"):
        yield app
    mp.undo()


@pytest.fixture
def sel(app_ctx: Any) -> Selection:
    from paradiag.app.callbacks.selection import select

    return select(None, None, None, f"?job=sample:{SAMPLE}")


def test_url_round_trips_the_selection() -> None:
    s = Selection(
        job="sample:x",
        step=2,
        ranks=[5, 6],
        stage=1,
        op="gemm",
        collective="all_reduce/g/#3",
        window=[1.5, 2.25],
        base="sample:y",
    )
    assert Selection.from_query(s.to_query()) == s
    assert Selection.from_store(s.to_store()) == s
    assert (
        Selection.from_query("?step=oops&t=3,1").step is None
        and Selection.from_query("?t=3,1").window is None
    )
    assert Selection.from_query("?t=1,x").window is None
    assert Selection.from_store({"job": "j", "future_field": 1}) == Selection(job="j")


def test_opening_a_job_opens_on_its_top_finding(sel: Selection) -> None:
    """The slow rank's finding quotes step 1: the page opens there, and every view is about rank 5."""
    from paradiag.app.data.overview import DEFAULT_METRIC
    from paradiag.app.views.detail.live import render_detail
    from paradiag.app.views.overview.live import render_heatmap
    from paradiag.app.views.timeline.live import render_timeline

    assert sel.job == f"sample:{SAMPLE}" and sel.step == 1 and sel.ranks is None
    heat = render_heatmap(sel.view("job"), DEFAULT_METRIC, [], sel.view("mark"))
    labels = list(heat.layout.yaxis.ticktext)
    culprit_rows = [
        labels[round(s.y0 + 0.45)]
        for s in heat.layout.shapes
        if s.type == "rect" and s.line.color == palette.CULPRIT
    ]
    assert (
        len(culprit_rows) == 1
        and culprit_rows[0].startswith("⚠ rank 5 · s1 ")
        and "compute 1." in culprit_rows[0]
    )  # why, without a hover
    z = dict(zip(labels, heat.data[0].z, strict=True))
    assert min(z[culprit_rows[0]]) > 3.5 and all(
        abs(v) < 3.5 for k, row in z.items() if "rank 5 " not in k for v in row
    )
    fig, info, _, drawn = render_timeline(sel.view("timeline"))
    assert info.startswith("ranks 5 (blamed by a finding)")
    assert fig.layout.yaxis.ticktext[0].startswith("<b>r5 compute")
    # The finding clicked, its rank selected: the timeline shows the same; it is not redrawn, only its line says so.
    again = render_timeline(sel.but(ranks=[5]).view("timeline"), None, None, drawn)
    assert again[0] is no_update and again[2] is no_update and again[1].startswith("ranks 5 (selected)")
    assert render_timeline(sel.but(ranks=[4]).view("timeline"), None, None, drawn)[0] is not no_update
    assert render_detail(sel.view("detail"))[0].startswith("rank 5, step 1")


@pytest.mark.parametrize(
    ("sample", "culprit"), [("gpu_resnet50_dp_host_stall", 3), ("gpu_llm_fault_free", None)]
)
def test_the_first_screen_follows_the_fault_of_any_job(
    app_ctx: Any, sample: str, culprit: int | None
) -> None:
    """A host stall (the host feeds the device late; its compute is normal) stands out in own time as a slow
    device does; a fault-free run outlines nobody and nothing leaves the noise band."""
    from paradiag.analysis.frame import OUTLIER_DEVIATIONS
    from paradiag.app.callbacks.selection import select
    from paradiag.app.data.overview import DEFAULT_METRIC
    from paradiag.app.views.overview.live import render_heatmap
    from paradiag.app.views.timeline.live import render_timeline

    sel = select(None, None, None, f"?job=sample:{sample}")
    heat = render_heatmap(sel.view("job"), DEFAULT_METRIC, [], sel.view("mark"))
    labels = list(heat.layout.yaxis.ticktext)
    red = [
        labels[round(s.y0 + 0.45)]
        for s in heat.layout.shapes
        if s.type == "rect" and s.line.color == palette.CULPRIT
    ]
    apart = [
        label
        for label, row in zip(labels, heat.data[0].z, strict=True)
        if max(abs(v) for v in row) >= OUTLIER_DEVIATIONS
    ]
    if culprit is None:
        assert red == [] and apart == []
        return
    assert red == apart and len(red) == 1 and red[0].startswith(f"⚠ rank {culprit} · s0 ")
    assert render_timeline(sel.view("timeline"))[1].startswith(f"ranks {culprit} (blamed by a finding)")


def test_unknown_job_gives_the_start_page(app_ctx: Any) -> None:
    from paradiag.app.callbacks.header import page
    from paradiag.app.callbacks.selection import select
    from paradiag.app.jobs import JobNotFound

    # The error handler turns this into the "not found" banner; the selection stays empty: the start page.
    with pytest.raises(JobNotFound):
        select(None, None, None, "?job=sample:nope")
    assert page(Selection().to_store())[0] == {"display": "block"}


def test_a_change_reaches_only_the_views_it_concerns(sel: Selection) -> None:
    from dash import no_update

    from paradiag.app.callbacks.selection import select, view_updates
    from paradiag.app.views import VIEW_FIELDS

    def updated(new: Selection) -> set[str]:
        return {
            name for name, v in zip(VIEW_FIELDS, view_updates(sel, new), strict=True) if v is not no_update
        }

    assert updated(
        select((ids.HEATMAP, "clickData"), {"points": [{"x": "1", "y": 5, "customdata": "6"}]}, sel, "")
    ) == {"mark", "timeline", "detail"}
    linked = sel.but(ranks=[4, 5], collective="all_reduce/group g/#3")
    assert {
        name
        for name, v in zip(VIEW_FIELDS, view_updates(linked, linked.but(ranks=[6])), strict=True)
        if v is not no_update
    } >= {"comm-link"}  # its members are outlined
    assert updated(select((ids.OP_SEARCH, "value"), "gemm", sel, "")) == {"detail", "marey", "flow"}
    assert updated(
        select((ids.TIMELINE_ZOOM, "data"), {"xaxis.range[0]": 1.0, "xaxis.range[1]": 2.0}, sel, "")
    ) == {"timeline", "marey"}
    assert updated(select((ids.BASELINE_PICKER, "value"), "sample:gpu_llm_fault_free", sel, "")) == {
        "compare"
    }
    assert updated(select(None, None, None, f"?job=sample:{SAMPLE}&step=2")) == {
        "mark",
        "step",
        "timeline",
        "detail",
        "marey",
        "flow",
    }


def test_a_new_page_draws_summary_and_heatmap_first(sel: Selection) -> None:
    """On a new page only the first screen's stores are written; the others follow the heatmap, once each."""
    from dash import no_update

    from paradiag.app.callbacks.selection import FIRST, LATER, release, view_updates
    from paradiag.app.views import VIEW_FIELDS

    first = dict(zip(VIEW_FIELDS, view_updates(None, sel), strict=True))
    assert {k for k, v in first.items() if v is not no_update} == set(FIRST) == {"job", "mark", "step"}
    later = release({"data": []}, sel.to_store(), *[None] * len(LATER))
    assert [v["job"] for v in later] == [sel.job] * len(LATER)
    assert release({"data": []}, sel.to_store(), *later) == (no_update,) * len(LATER)


def test_a_folded_row_unfolds_and_folds_back(sel: Selection, monkeypatch: pytest.MonkeyPatch) -> None:
    """With fewer rows allowed than ranks, each stage folds, the slow rank keeps its row; a click unfolds a
    stage into its DP groups and adds a tick box for it; unticking (the value without it) folds it back."""
    from paradiag.app.views.overview import live as ov_cb
    from paradiag.app.views.overview import static as ov_static

    monkeypatch.setattr(ov_static, "MAX_ROWS", 4)  # the rows' rule, which the live view draws
    labels = list(ov_cb.render_heatmap(sel.view("job"), "own_z", [], sel.view("mark")).layout.yaxis.ticktext)
    assert (
        labels[:2] == ["s0 · 4 ranks", "s1 · 3 alike ranks"]
        and labels[2].startswith("⚠ rank 5 · s1 ")
        and len(labels) == 3
    )
    value, options = ov_cb.toggle_group({"points": [{"y": 0}]}, [], [], sel.view("job"), "own_z")
    assert value == ["s0"] and [o["value"] for o in options] == ["s0"]
    unfolded = list(
        ov_cb.render_heatmap(sel.view("job"), "own_z", value, sel.view("mark")).layout.yaxis.ticktext
    )
    assert [t for t in unfolded if t.startswith("s0.")] == ["s0.dp0 · 2 ranks", "s0.dp1 · 2 ranks"]
    assert (
        ov_cb.toggle_group({"points": [{"y": 2}]}, [], [], sel.view("job"), "own_z")[0] is no_update
    )  # a rank's own row


def test_step_chart_click_and_brush_pick_a_step(sel: Selection) -> None:
    from paradiag.app.callbacks.selection import select
    from paradiag.app.data.overview import overview
    from paradiag.app.views.overview.live import render_steps

    fig = render_steps(sel.view("job"), sel.view("mark"))
    names = [t.name for t in fig.data]
    assert {"fastest–slowest rank", "median rank", "slowest rank", "rank 5"} <= set(names)
    # What the chart says: the step, the ranks' spread, what the replay predicts without the slow device; an axis
    # around the data (not from 0), the replay's line inside it.
    replay = next(t for t in fig.data if (t.name or "").startswith("without it (replay)"))
    caption = next(a.text for a in fig.layout.annotations if a.name == "caption")
    assert caption.startswith("step ") and "without slow device (replay):" in caption
    lo, hi = fig.layout.yaxis.range
    assert lo > 0.5 * hi and lo <= replay.y[0] < hi
    assert [s.x0 for s in fig.layout.shapes] == [sel.step]
    assert select((ids.STEPS, "clickData"), {"points": [{"x": 2}]}, sel, "").step == 2
    ov = overview(context_job(sel))
    medians = {
        s: sorted(row[j] for row in ov["metrics"]["step_ms"])[len(ov["ranks"]) // 2]
        for j, s in enumerate(ov["steps"])
    }
    brushed = select((ids.STEPS, "selectedData"), {"range": {"x": [-0.4, 2.4]}}, sel, "")
    assert brushed.step == max(medians, key=lambda s: medians[s])


def test_a_new_step_moves_only_the_step_charts_marker(sel: Selection) -> None:
    """A click that changes the step sends the marker line alone (a Patch of the shapes), where the full figure
    draws it; a click on ranks keeps it."""
    from paradiag.app.callbacks.selection import select
    from paradiag.app.views.overview.live import mark_steps, render_steps

    new = select((ids.STEPS, "clickData"), {"points": [{"x": 2}]}, sel, "")
    ops = mark_steps(new.view("step")).to_plotly_json()["operations"]
    assert [op["location"] for op in ops] == [["layout", "shapes"]]
    full = render_steps(new.view("job"), new.view("step")).to_plotly_json()["layout"]["shapes"]
    assert ops[0]["params"]["value"] == full and [s["x0"] for s in full] == [2]
    ranks = select((ids.TIMELINE_RANKS, "value"), [3], new, "")
    assert ranks.view("step") == new.view(
        "step"
    )  # other ranks of the same step: the step chart is left alone
    assert mark_steps(ranks.view("step")).to_plotly_json()["operations"][0]["params"]["value"] == full


def context_job(sel: Selection) -> Any:
    from paradiag.app import context

    return context.job(str(sel.job))


def test_heatmap_click_selects_rank_and_step_and_views_follow(sel: Selection) -> None:
    from paradiag.app.callbacks.selection import select
    from paradiag.app.views.detail.live import render_detail
    from paradiag.app.views.overview.live import mark_heatmap
    from paradiag.app.views.timeline.live import render_timeline

    click = {"points": [{"x": "2", "y": 6, "customdata": "6"}]}
    new = select((ids.HEATMAP, "clickData"), click, sel, "")
    assert new.ranks == [6] and new.step == 2
    shapes = mark_heatmap(new.view("mark"), "zscore", []).to_plotly_json()["operations"][0]["params"]["value"]
    assert [s["line"]["color"] for s in shapes if s["type"] == "rect"] == [
        palette.CULPRIT,
        palette.HIGHLIGHT,
    ]  # only the outline moves
    fig, info, _, _ = render_timeline(new.view("timeline"))
    assert info.startswith("ranks 6 (selected) · then the ranks that wait for them longest: ")
    peers = info.split("longest: ")[1].split(" · ")[0].split(", ")
    assert {"4", "5", "7"} <= set(peers) and peers[-1] == "5"  # its stage peers; the slow rank 5 waits least
    assert {r for t in fig.data if t.hoveron == "points" for r in t.y} >= {0}
    title, detail, drawn = render_detail(new.view("detail"))
    assert title.startswith("rank 6, step 2")
    cells = {(t.xaxis, t.yaxis): t for t in detail.data}
    operators = [t for t in detail.data if t.xaxis == "x"]
    collectives = [t for t in detail.data if t.xaxis == "x4"]
    assert (
        len(operators) == 2 and len(collectives) == 2 and len(cells) >= 3
    )  # its four graphs in one figure's cells
    # stacked cells' bars lie on one another: a collective's transfer starts where its wait ends
    wait, transfer = collectives
    assert list(transfer.base) == [float(v) for v in wait.x]
    # The same rank, step and operator: nothing is redrawn; another operator: the figure with its durations
    assert render_detail(new.view("detail"), drawn) == (no_update,) * 3
    other = operators[1].customdata[0]
    again = render_detail({**new.view("detail"), "op": other}, drawn)
    assert any(t.type == "box" for t in again[1].data) and "durations of" in again[1].layout.xaxis3.title.text


def test_finding_click_selects_the_culprit(sel: Selection) -> None:
    from paradiag.app.callbacks.header import summary
    from paradiag.app.callbacks.selection import select

    _facts, findings = summary(sel.view("job"))
    assert findings and "slow_device" in str(findings[0]) and "in step 1" in str(findings[0])
    new = select({"type": ids.FINDING_BUTTON, "index": 0}, None, sel.but(step=0), "")
    assert new.ranks == [5] and new.step == 1  # the step its evidence cites


def test_timeline_zoom_sets_the_window_and_back_returns(sel: Selection) -> None:
    from paradiag.app.callbacks.selection import _back, select, zoom_stack

    zoomed = select((ids.TIMELINE_ZOOM, "data"), {"xaxis.range[0]": 11.0, "xaxis.range[1]": 12.0}, sel, "")
    assert zoomed.window == [11.0, 12.0]
    stack = zoom_stack((ids.TIMELINE_ZOOM, "data"), sel, zoomed, [])
    assert stack == [None]
    assert _back(zoomed, stack).window is None
    assert select((ids.TIMELINE_ZOOM, "data"), {"xaxis.autorange": True}, zoomed, "").window is None


def test_marey_click_selects_operator_and_flow_rings_it(sel: Selection) -> None:
    from paradiag.app.callbacks.selection import select
    from paradiag.app.views.flow.live import render_flow
    from paradiag.app.views.marey.live import render_marey

    marey, options, drawn = render_marey(sel.view("marey"), ["devices"])
    assert options[0]["value"] == "devices"
    custom = list(next(c for c in _compute_points(marey) if "gemm" in c[0]))
    everywhere = select((ids.MAREY_CLICK, "data"), {"points": [{"customdata": custom[:2]}]}, sel, "")
    new = select((ids.MAREY_CLICK, "data"), {"points": [{"customdata": custom, "x": 0.01}]}, sel, "")
    assert new.op == custom[0] and new.stage == custom[1] and new.at == custom[2]
    rings = next(t for t in render_flow(everywhere.view("flow"), "time", [])[0].data if t.name == "selected")
    flow, _, flow_drawn = render_flow(new.view("flow"), "time", [])
    ring = next(t for t in flow.data if t.name == "selected")
    assert len(ring.x) == 1 and len(rings.x) >= len(
        ring.x
    )  # the clicked instance's node, not every node holding gemm
    ring_patch = render_flow(everywhere.view("flow"), "time", [], flow_drawn)[0].to_plotly_json()[
        "operations"
    ]  # only the ring moves
    assert [op["location"] for op in ring_patch] == [["data", flow_drawn["traces"] - 1]] and len(
        ring_patch[0]["params"]["value"]["x"]
    ) == len(rings.x)
    selected_marey = render_marey(new.view("marey"), ["devices"])[0]
    outline = selected_marey.layout.shapes[-1]
    assert outline.name == "selected operator" and outline.path.count("M") > 0
    # the step's figure, built once, outlined on a copy: it stays unmarked, the rest is the same drawing
    step_marey = render_marey(sel.but(op=None, stage=None, at=None).view("marey"), ["devices"])[0]
    assert step_marey.layout.shapes[-1].path != outline.path
    assert json.loads(step_marey.to_json())["data"] == json.loads(selected_marey.to_json())["data"]
    step_flow = render_flow(sel.but(op=None, stage=None, at=None).view("flow"), "time", [])[0]
    assert len(step_flow.data[-1].x or ()) == 0
    assert json.loads(step_flow.to_json())["data"][:-1] == json.loads(flow.to_json())["data"][:-1]
    patch, _, _ = render_marey(
        new.view("marey"), ["devices"], [], drawn
    )  # the same drawing: only the outline is sent
    ops = patch.to_plotly_json()["operations"]
    assert [op["location"] for op in ops] == [["layout", "shapes", drawn["shapes"] - 1]] and ops[0]["params"][
        "value"
    ]["name"] == "selected operator"


def test_marey_zoom_merges_fewer_bands(sel: Selection) -> None:
    from paradiag.app.views.marey.live import render_marey

    full = {
        float(c[2]) for c in _compute_points(render_marey(sel.view("marey"), [])[0])
    }  # the instances' middles
    middle = sorted(full)
    a, b = middle[len(middle) // 3], middle[len(middle) // 3 + 5]
    zoomed = {float(c[2]) for c in _compute_points(render_marey(sel.but(window=[a, b]).view("marey"), [])[0])}
    assert len(zoomed) < len(full)  # fewer in view ...
    assert len(zoomed) >= 5  # ... but the zoom separates what the full view merged


def _compute_points(fig: Any) -> list[Any]:
    """The customdata of Marey's compute bars (their undrawn hover points), each naming its operator as a click
    passed on by the browser does (the figure holds its index into layout.meta's names: DEFER_CLICK)."""
    names = fig.layout.meta["operators"]
    return [
        [names[int(c[0])], *(float(v) for v in c[1:])]
        for t in fig.data
        if t.name == "compute" and t.hoveron == "points"
        for c in t.customdata
    ]


def test_comm_click_selects_the_slowest_instance_on_the_link(sel: Selection) -> None:
    from paradiag.app.callbacks.selection import select
    from paradiag.app.views.comm.live import comm_instances, mark_comm, render_comm

    fig = render_comm(sel.view("comm"), "bandwidth")
    assert fig.data[0].type == "heatmap"
    click = {"points": [{"x": "1", "y": "0"}]}
    new = select((ids.COMM_MATRIX, "clickData"), click, sel, "")
    assert new.ranks == [0, 1] and new.collective and new.window
    table = comm_instances(click, sel.to_store())  # one Markdown text: a line, then a row per instance
    assert table.startswith("link 0 → 1:") and table.count("\n| ") >= 3  # the head and 1+ instances
    outline = mark_comm(new.view("comm-link"), "bandwidth").to_plotly_json()["operations"]
    assert [op["location"] for op in outline] == [["layout", "shapes"]]  # the cells are not sent again
    full = render_comm(new.view("comm"), "bandwidth", None, new.view("comm-link")).to_plotly_json()["layout"]
    assert outline[0]["params"]["value"] == full["shapes"] and len(full["shapes"]) == 1
    assert (
        mark_comm(sel.but(ranks=[0, 1]).view("comm-link"), "bandwidth").to_plotly_json()["operations"][0][
            "params"
        ]["value"]
        == []
    )  # ranks without a collective: no link outlined
    from paradiag.app.views.timeline.live import render_timeline

    fig, *_ = render_timeline(new.view("timeline"))
    outlined = [t for t in fig.data if t.name == "selected collective"]
    assert outlined and len(outlined[-1].x) == 2  # the instance's two members, joined at their starts


def test_upload_saves_privately_and_never_overwrites(app_ctx: Any, tmp_path: Path) -> None:
    import io
    import tarfile

    from werkzeug.datastructures import FileStorage

    from paradiag.app.uploads import save_upload

    blob = io.BytesIO()
    with tarfile.open(fileobj=blob, mode="w:gz") as t:
        for name, data in (("job/rank0.json", b"{}"), ("../evil.json", b"x")):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
    first, folder = save_upload(
        [FileStorage(io.BytesIO(blob.getvalue()), filename="job.tar.gz")], tmp_path / "alice"
    )
    second, _ = save_upload(
        [
            FileStorage(io.BytesIO(b"{}"), filename="a/b.json"),
            FileStorage(io.BytesIO(b"[]"), filename="a/b.json"),
        ],
        tmp_path / "alice",
    )
    assert first != second
    assert (folder / "job" / "rank0.json").read_bytes() == b"{}"
    assert not list(tmp_path.rglob("evil.json"))
    assert sorted(p.name for p in (tmp_path / "alice" / second / "files" / "a").iterdir()) == [
        "_b.json",
        "b.json",
    ]


def test_picking_a_baseline_compares_and_names_the_culprit(sel: Selection) -> None:
    from paradiag.app.callbacks.selection import select
    from paradiag.app.views.compare.live import baseline_options, render_compare

    choices = [o["value"] for o in baseline_options(sel.to_store())]
    assert "sample:gpu_llm_fault_free" in choices and sel.job not in choices and choices[0] == ""
    assert "Pick a baseline" in str(render_compare(sel.view("compare"))[0])
    new = select((ids.BASELINE_PICKER, "value"), "sample:gpu_llm_fault_free", sel, "")
    assert new.base == "sample:gpu_llm_fault_free" and "base=sample" in new.to_query()
    summary, ranks, operators = render_compare(new.view("compare"))
    text = str(summary)
    assert "the jobs differ" not in text
    assert "slow device of rank 5" in text  # the injected slow rank is the top change, in words
    step_change = dict(zip(ranks.data[0].x, ranks.data[0].y, strict=True))
    assert step_change["5"] == max(step_change.values(), key=lambda v: v or 0)
    assert operators.data and operators.data[0].orientation == "h"
    assert select((ids.BASELINE_PICKER, "value"), "", new, "").base is None
    other = render_compare(new.but(base="sample:gpu_resnet50_dp_host_stall").view("compare"))[0]
    assert "cannot compare" in str(other) and "8 ranks (DP8)" in str(other)  # another pipeline depth: refused


def test_a_double_clicks_zoom_out_takes_back_what_its_first_click_selected(sel: Selection) -> None:
    """A click on Marey's graph selects at once; the zoom out of a double-click carries what was selected before
    its first click (assets/marey_clicks.js) and puts it back, also when the browser merged the click and the zoom
    into one request (applied in the order they happened)."""
    from dash._callback_context import context_value
    from dash._utils import AttributeDict

    from paradiag.app.boundary import fired
    from paradiag.app.callbacks.selection import READS, select
    from paradiag.app.selection import UNDO

    chosen = sel.but(op="gemm", stage=1, at=12.5, window=[11.0, 13.0])
    clicked = select((ids.MAREY_CLICK, "data"), {"points": [{"customdata": ["ln", 2, 12.0]}]}, chosen, "")
    assert (clicked.op, clicked.stage, clicked.at) == ("ln", 2, 12.0)
    before = {"op": "gemm", "stage": 1, "at": 12.5}
    out = select((ids.MAREY_ZOOM, "data"), {"xaxis.autorange": True, UNDO: before}, clicked, "")
    assert (out.op, out.stage, out.at, out.window) == ("gemm", 1, 12.5, None)
    nothing = {"op": None, "stage": None, "at": None}
    out = select((ids.MAREY_ZOOM, "data"), {"xaxis.autorange": True, UNDO: nothing}, clicked, "")
    assert (out.op, out.stage, out.at) == (None, None, None)
    # The timeline's folds are no selection field: its zoom out leaves the selection's instance as it is.
    out = select((ids.TIMELINE_ZOOM, "data"), {"xaxis.autorange": True, UNDO: {"unfolded": []}}, clicked, "")
    assert out.op == "ln" and out.window is None
    # Merged: the zoom listed first, the click first in time.
    shown = dict.fromkeys(READS)
    shown[(ids.MAREY_ZOOM, "data")] = {"xaxis.autorange": True, "paradiag.at": 2000.0}
    shown[(ids.MAREY_CLICK, "data")] = {"points": [], "paradiag.at": 1000.0}
    triggered = [
        {"prop_id": f"{ids.MAREY_ZOOM}.data", "value": 1},
        {"prop_id": f"{ids.MAREY_CLICK}.data", "value": 1},
    ]
    token = context_value.set(AttributeDict(triggered_inputs=triggered))
    try:
        assert fired(shown) == [(ids.MAREY_CLICK, "data"), (ids.MAREY_ZOOM, "data")]
    finally:
        context_value.reset(token)
