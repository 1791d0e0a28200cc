"""Callbacks called as plain functions on a bundled sample job: the selection reducer, each view, the URL."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from paradiag.app import ids
from paradiag.app import selection as sel_mod

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
def sel(app_ctx: Any) -> dict[str, Any]:
    from paradiag.app.callbacks.selection import select

    return select(None, None, None, f"?job=sample:{SAMPLE}")


def test_url_round_trips_the_selection() -> None:
    s = sel_mod.update(None, job="sample:x", step=2, ranks=[5, 6], stage=1, op="gemm", collective="all_reduce/g/#3", window=[1.5, 2.25], base="sample:y")
    assert sel_mod.from_query(sel_mod.to_query(s)) == s
    assert sel_mod.from_query("?step=oops&t=3,1")["step"] is None and sel_mod.from_query("?t=3,1")["window"] is None


def test_opening_a_job_picks_its_slowest_step(sel: dict[str, Any]) -> None:
    assert sel["job"] == f"sample:{SAMPLE}" and sel["step"] in (0, 1, 2)


def test_unknown_job_gives_the_start_page(app_ctx: Any) -> None:
    from paradiag.app.callbacks.header import page
    from paradiag.app.callbacks.selection import select

    empty = select(None, None, None, "?job=sample:nope")
    assert empty["job"] is None
    assert page(empty)[0] == {"display": "block"}


def test_heatmap_click_selects_rank_and_step_and_views_follow(sel: dict[str, Any]) -> None:
    from paradiag.app.callbacks.details import render_detail
    from paradiag.app.callbacks.overview import render_heatmap
    from paradiag.app.callbacks.selection import select
    from paradiag.app.callbacks.timeline import render_timeline

    click = {"points": [{"x": "2", "y": 5, "customdata": "5"}]}
    new = select((ids.HEATMAP, "clickData"), click, sel, "")
    assert new["ranks"] == [5] and new["step"] == 2
    heat = render_heatmap(new, "zscore", [])
    assert any(s.type == "rect" for s in heat.layout.shapes)
    fig, info = render_timeline(new)
    assert info.startswith("ranks 5, 4, 6, 7")  # the rank, then its stage peers
    assert {r for t in fig.data if t.mode == "markers" for r in t.y} >= {0}
    title, operators, _breakdown, _distribution, coll = render_detail(new)
    assert title.startswith("rank 5, step 2")
    assert len(operators.data) == 2 and len(coll.data) == 2


def test_finding_click_selects_the_culprit(sel: dict[str, Any]) -> None:
    from paradiag.app.callbacks.header import summary
    from paradiag.app.callbacks.selection import select

    _facts, findings = summary(sel)
    assert findings and "slow_device" in str(findings[0])
    new = select({"type": ids.FINDING_BUTTON, "index": 0}, None, sel, "")
    assert new["ranks"] == [5]


def test_timeline_zoom_sets_the_window_and_back_returns(sel: dict[str, Any]) -> None:
    from paradiag.app.callbacks.selection import _back, select, zoom_stack

    zoomed = select((ids.TIMELINE, "relayoutData"), {"xaxis.range[0]": 11.0, "xaxis.range[1]": 12.0}, sel, "")
    assert zoomed["window"] == [11.0, 12.0]
    stack = zoom_stack((ids.TIMELINE, "relayoutData"), sel, zoomed, [])
    assert stack == [None]
    assert _back(zoomed, stack)["window"] is None
    assert select((ids.TIMELINE, "relayoutData"), {"xaxis.autorange": True}, zoomed, "")["window"] is None


def test_marey_click_selects_operator_and_flow_rings_it(sel: dict[str, Any]) -> None:
    from paradiag.app.callbacks.pipeline import render_flow, render_marey
    from paradiag.app.callbacks.selection import select

    marey, options, drawn = render_marey(sel, ["devices"])
    assert options[0]["value"] == "devices"
    bars = next(t for t in marey.data if t.name == "compute")
    i = next(i for i, c in enumerate(bars.customdata) if "gemm" in c[0])
    custom = list(bars.customdata[i])
    everywhere = select((ids.MAREY, "clickData"), {"points": [{"customdata": custom[:2]}]}, sel, "")
    new = select((ids.MAREY, "clickData"), {"points": [{"customdata": custom, "x": 0.01}]}, sel, "")
    assert new["op"] == custom[0] and new["stage"] == custom[1] and new["at"] == custom[2]
    rings = next(t for t in render_flow(everywhere, "time", [])[0].data if t.name == "selected")
    flow, _, flow_drawn = render_flow(new, "time", [])
    ring = next(t for t in flow.data if t.name == "selected")
    assert len(ring.x) == 1 and len(rings.x) >= len(ring.x)  # the clicked instance's node, not every node holding gemm
    ring_patch = render_flow(everywhere, "time", [], flow_drawn)[0].to_plotly_json()["operations"]  # only the ring moves
    assert [op["location"] for op in ring_patch] == [["data", flow_drawn["traces"] - 1]] and len(ring_patch[0]["params"]["value"]["x"]) == len(rings.x)
    outline = next(t for t in render_marey(new, ["devices"])[0].data if t.name == "selected operator")
    assert len(outline.x) > 0
    patch, _, _ = render_marey(new, ["devices"], drawn)  # the same drawing: only the outline is sent
    ops = patch.to_plotly_json()["operations"]
    assert [op["location"] for op in ops] == [["data", drawn["traces"] - 1]] and ops[0]["params"]["value"]["name"] == "selected operator"


def test_marey_zoom_merges_fewer_bands(sel: dict[str, Any]) -> None:
    from paradiag.app.callbacks.pipeline import render_marey

    full = next(t for t in render_marey(sel, [])[0].data if t.name == "compute")
    middle = sorted(float(c[2]) for c in full.customdata)
    a, b = middle[len(middle) // 3], middle[len(middle) // 3 + 5]
    zoomed = next(t for t in render_marey(sel_mod.update(sel, window=[a, b]), [])[0].data if t.name == "compute")
    assert len(zoomed.x) < len(full.x)  # fewer in view ...
    assert len({c[2] for c in zoomed.customdata}) >= 5  # ... but the zoom separates what the full view merged


def test_comm_click_selects_the_slowest_instance_on_the_link(sel: dict[str, Any]) -> None:
    from paradiag.app.callbacks.pipeline import comm_instances, render_comm
    from paradiag.app.callbacks.selection import select

    fig = render_comm(sel, "bandwidth")
    assert fig.data[0].type == "heatmap"
    click = {"points": [{"x": "1", "y": "0"}]}
    new = select((ids.COMM_MATRIX, "clickData"), click, sel, "")
    assert new["ranks"] == [0, 1] and new["collective"] and new["window"]
    assert "link 0 → 1" in str(comm_instances(click, sel))
    from paradiag.app.callbacks.timeline import render_timeline

    fig, _ = render_timeline(new)
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
    first, folder = save_upload([FileStorage(io.BytesIO(blob.getvalue()), filename="job.tar.gz")], tmp_path / "alice")
    second, _ = save_upload([FileStorage(io.BytesIO(b"{}"), filename="a/b.json"), FileStorage(io.BytesIO(b"[]"), filename="a/b.json")], tmp_path / "alice")
    assert first != second
    assert (folder / "job" / "rank0.json").read_bytes() == b"{}"
    assert not list(tmp_path.rglob("evil.json"))
    assert sorted(p.name for p in (tmp_path / "alice" / second / "files" / "a").iterdir()) == ["_b.json", "b.json"]


def test_picking_a_baseline_compares_and_names_the_culprit(sel: dict[str, Any]) -> None:
    from paradiag.app.callbacks.compare import baseline_options, render_compare
    from paradiag.app.callbacks.selection import select

    choices = [o["value"] for o in baseline_options(sel)]
    assert "sample:gpu_llm_fault_free" in choices and sel["job"] not in choices and choices[0] == ""
    assert "Pick a baseline" in str(render_compare(sel)[0])
    new = select((ids.BASELINE_PICKER, "value"), "sample:gpu_llm_fault_free", sel, "")
    assert new["base"] == "sample:gpu_llm_fault_free" and "base=sample" in sel_mod.to_query(new)
    summary, ranks, operators = render_compare(new)
    text = str(summary)
    assert "slow_device" in text and "ranks 5" in text  # the injected slow rank is the top change
    step_change = dict(zip(ranks.data[0].x, ranks.data[0].y, strict=True))
    assert step_change["5"] == max(step_change.values(), key=lambda v: v or 0)
    assert operators.data and operators.data[0].orientation == "h"
    assert select((ids.BASELINE_PICKER, "value"), "", new, "")["base"] is None
