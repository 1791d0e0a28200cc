"""The timeline at scale, on a simulated 64-rank job (dp8 tp2 pp4, rank 21 slow): alike ranks fold into one row
per stage and lane with their spread, the culprit keeps rows of its own at the top, a stage opens into its mesh
groups and a group into its ranks (and stays open across steps), and the critical path lands on the rows drawn."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from paradiag.app.data.common import step_span
from paradiag.app.data.mesh import mesh_of
from paradiag.app.data.overview import opening_step
from paradiag.app.data.timeline import timeline_data
from paradiag.app.figures.timeline import timeline_figure
from paradiag.simulator import SimConfig, parse_fault, simulate

CULPRIT = 21
# Big enough that compute, not kernel launches, sets the step; small enough to simulate and ingest in seconds.
MESH = {
    "dp": 8,
    "tp": 2,
    "pp": 4,
    "steps": 2,
    "layers": 4,
    "microbatches": 4,
    "hidden": 1024,
    "heads": 8,
    "seq_len": 512,
    "vocab": 1024,
    "seed": 3,
}


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, Path]]:
    """The simulated job served by an app (the callbacks read it as ``served``)."""
    from paradiag.app import context
    from paradiag.app.config import Config
    from paradiag.app.factory import create_app

    root = tmp_path_factory.mktemp("folds")
    mp = pytest.MonkeyPatch()
    mp.setenv("PARADIAG_CACHE_DIR", str(root / "cache"))
    folder = simulate(
        SimConfig(
            output=root / "job", faults=(parse_fault(f"slow_device:ranks={CULPRIT},factor=1.5"),), **MESH
        )
    )
    app = create_app(
        Config.from_env(job=str(folder), upload_dir=root / "uploads", app_cache_dir=root / "app-cache")
    )
    with app.server.test_request_context("/"):
        context.job(
            "served"
        )  # ingested once, into the module's cache (each test's own cache root comes later)
        yield app, folder
    mp.undo()


def _drawn(
    served: tuple[Any, Path], expand: list[str], path: bool = False
) -> tuple[Any, dict[str, Any], list[Any]]:
    from paradiag.app import context
    from paradiag.app.views.timeline.static import rows_of, shown_ranks

    job = context.job("served")
    step = opening_step(job)
    entries = rows_of(job, shown_ranks(job, None, step), expand)
    assert step is not None
    return (
        job,
        timeline_data(
            job, entries, step_span(job, step), pixels=800, max_primitives=5000, step=step, path=path
        ),
        entries,
    )


def test_alike_ranks_fold_and_the_culprit_stays_single(served: tuple[Any, Path]) -> None:
    job, data, entries = _drawn(served, [])
    mesh = mesh_of(job)
    singles = [e for e in entries if isinstance(e, int)]
    folds = [e for e in entries if isinstance(e, dict)]
    assert singles[0] == CULPRIT and len(singles) < 8
    assert sorted(singles + [r for f in folds for r in f["ranks"]]) == sorted(
        mesh.ranks
    )  # every rank drawn once
    assert [f["key"] for f in folds] == [f"s{s}" for s in mesh.stages]
    stage = mesh.stage[CULPRIT]
    culprit_fold = next(f for f in folds if f["stage"] == stage)
    alike = len(mesh.ranks_of_stage(stage)) - sum(1 for r in singles if mesh.stage[r] == stage)
    assert CULPRIT not in culprit_fold["ranks"] and len(culprit_fold["ranks"]) == alike

    fig = timeline_figure(data, marked=[CULPRIT])
    labels = list(fig.layout.yaxis.ticktext)
    assert labels[0].startswith(f"<b>r{CULPRIT} compute")
    assert all(
        label.startswith("▸ s")
        for label, row in zip(labels, data["rows"], strict=True)
        if row["rank"] is None
    )
    assert any(label.startswith(f"▸ s{stage} ×{alike} compute") for label in labels) and len(
        labels
    ) <= 4 * len(singles) + 3 * len(mesh.stages)
    for seg in data["folded"].values():  # the light band holds the median span
        assert all(
            lo <= a <= b <= hi
            for lo, a, b, hi in zip(seg["lo"], seg["x0"], seg["x1"], seg["hi"], strict=True)
        )
    names = {t.name for t in fig.data} | {s.name for s in fig.layout.shapes}  # bars are shapes, hovers traces
    assert {"compute spread", "compute folded"} <= names and "critical path" not in names


def test_a_stage_opens_into_its_groups_and_a_group_into_its_ranks(served: tuple[Any, Path]) -> None:
    job, _, _ = _drawn(served, [])
    mesh = mesh_of(job)
    stage = mesh.stage[CULPRIT]
    _, data, entries = _drawn(served, [f"s{stage}"])
    groups = sorted({mesh.dp[r] for r in mesh.ranks_of_stage(stage)})
    keys = [e["key"] for e in entries if isinstance(e, dict)]
    assert [k for k in keys if k.startswith(f"s{stage}.")] == [
        f"s{stage}.dp{g}" for g in groups if g != mesh.dp[CULPRIT]
    ]
    assert f"s{stage}" not in keys and all(f"s{s}" in keys for s in mesh.stages if s != stage)
    opened = groups[-1]
    _, data, entries = _drawn(served, [f"s{stage}", f"s{stage}.dp{opened}"])
    members = [r for r in mesh.ranks_of_stage(stage) if mesh.dp[r] == opened]
    assert set(members) <= {e for e in entries if isinstance(e, int)}
    assert {row["rank"] for row in data["rows"]} >= set(members)


def test_the_critical_path_lands_on_the_culprit_and_marks_the_folded_rows_it_crosses(
    served: tuple[Any, Path],
) -> None:
    from paradiag.app.data.common import diagnosis

    job, data, entries = _drawn(served, [], path=True)
    path, rows = data["path"], data["rows"]
    step = opening_step(job)
    on_path = sorted(
        (r for r in diagnosis(job).critical_path.to_pylist() if r["step"] == step),
        key=lambda r: r["start_ns"],
    )
    assert len(path["x0"]) == len(on_path)  # every rank is drawn, single or folded: no segment is lost
    fold_of = {
        r: row["fold"]
        for row in rows
        if row["rank"] is None
        for r in next(e["ranks"] for e in entries if isinstance(e, dict) and e["key"] == row["fold"])
    }
    for segment, row in zip(
        on_path, path["row"], strict=True
    ):  # each segment on its rank's row, or its fold's
        assert rows[row]["rank"] == segment["rank"] or (
            rows[row]["rank"] is None and rows[row]["fold"] == fold_of[segment["rank"]]
        )
    assert any(rows[row]["rank"] == CULPRIT for row in path["row"])
    assert any(rows[row]["rank"] is None for row in path["ranks"])
    edges = path["edges"]
    assert edges["x"] and all(a != b for a, b in zip(edges["y0"], edges["y1"], strict=True))
    assert all("waited for rank" in h for h in edges["hover"])
    fig = timeline_figure(data, marked=[CULPRIT])
    hover = next(
        t
        for t in fig.data
        if t.name == "critical path" and t.hoveron == "points" and t.customdata is not None
    )
    assert any(f"rank {CULPRIT}" in h for h in hover.text) and {h.split(" · ")[0] for h in hover.text} <= {
        "compute",
        "communication",
        "waiting",
        "host",
    }
    assert any("◆" in label for label in fig.layout.yaxis.ticktext)


def test_a_click_on_a_folded_row_opens_it_and_the_state_survives_a_step_change(
    served: tuple[Any, Path],
) -> None:
    from dash import no_update

    from paradiag.app import context
    from paradiag.app.callbacks.selection import select
    from paradiag.app.data.common import steps_of
    from paradiag.app.views.timeline.live import open_fold, render_timeline

    sel = select(None, None, None, "?job=served")
    _, info, folds, _ = render_timeline(sel.view("timeline"), [], [])
    assert info.startswith(f"ranks {CULPRIT} (blamed by a finding)") and "folded" in info
    y = next(i for i, key in enumerate(folds) if key)
    expand, options = open_fold({"points": [{"y": y, "x": 1.0}]}, folds, [], [])
    assert expand == [folds[y]] and options == [{"label": f" {folds[y]}", "value": folds[y]}]
    assert folds[0] == "" and open_fold({"points": [{"y": 0, "x": 1.0}]}, folds, [], []) == (
        no_update,
        no_update,
    )  # the culprit's own row
    other = next(s for s in steps_of(context.job("served")) if s != sel.step)
    for step in (sel.step, other):
        _, _, opened, _ = render_timeline(sel.but(step=step).view("timeline"), expand, ["path"])
        assert folds[y] not in opened and any(key.startswith(folds[y] + ".") for key in opened)


def _mesh(pp: int, dp: int, tp: int) -> Any:
    from paradiag.app.data.mesh import Mesh

    ranks = list(range(pp * dp * tp))
    return Mesh(
        ranks=ranks,
        stage={r: r // (dp * tp) for r in ranks},
        dp={r: r % (dp * tp) // tp for r in ranks},
        tp={r: r % tp for r in ranks},
        found_by="test",
    )


@pytest.mark.parametrize(("pp", "dp", "tp"), [(1, 64, 1), (4, 4, 4), (2, 8, 64)])
def test_every_rank_is_drawn_once_and_at_most_so_many_one_by_one(
    monkeypatch: pytest.MonkeyPatch, pp: int, dp: int, tp: int
) -> None:
    """Whatever the layout (data parallel only: groups of one rank; many groups; 1024 ranks) and whatever is
    opened, each rank is drawn once, single or in one fold, and no more than MAX_SINGLE_RANKS one by one."""
    from paradiag.app.data import timeline_fold

    mesh = _mesh(pp, dp, tp)
    monkeypatch.setattr(timeline_fold, "mesh_of", lambda job: mesh)
    every_group = [f"s{s}.dp{g}" for s in range(pp) for g in range(dp)]
    for expand in ([], ["s0"], [f"s{s}" for s in range(pp)] + every_group):
        entries = timeline_fold.fold_plan(None, [5, 3], expand)  # type: ignore[arg-type]
        singles = [e for e in entries if isinstance(e, int)]
        folded = [r for e in entries if isinstance(e, dict) for r in e["ranks"]]
        assert entries[:2] == [5, 3] and sorted(singles + folded) == mesh.ranks
        assert len(singles) <= timeline_fold.MAX_SINGLE_RANKS + 1  # (a last group of one is itself)
        assert all(
            len(e["ranks"]) > 1 and len({mesh.stage[r] for r in e["ranks"]}) == 1
            for e in entries
            if isinstance(e, dict)
        )
    if (
        dp * tp > timeline_fold.MAX_SINGLE_RANKS and tp == 1
    ):  # groups of one rank beyond the cap fold together
        assert any(
            e["key"] == "s0.rest" for e in timeline_fold.fold_plan(None, [], ["s0"]) if isinstance(e, dict)
        )  # type: ignore[arg-type]


def test_a_fold_whose_ranks_share_no_operator_keeps_its_row() -> None:
    """Ranks that run nothing in common (each a different expert, say) are still listed, and the row says why
    it is empty."""
    from paradiag.app.data.timeline_fold import lanes_of

    assert lanes_of({"category": []}) == ["compute"]
    row = {
        "rank": None,
        "fold": "s0",
        "members": 5,
        "lane": "compute",
        "label": "s0 ×5 compute",
        "instances": 0,
    }
    fig = timeline_figure(
        {"rows": [row], "kinds": {}, "folded": {}, "waits": {"x0": []}, "links": [], "window_ms": [0.0, 1.0]}
    )
    handle = next(t for t in fig.data if t.name == "open a fold")
    assert fig.layout.yaxis.ticktext[0].startswith("▸ s0 ×5") and "no operator in common" in handle.text[0]


def test_a_double_clicks_zoom_out_folds_back_what_its_first_click_opened() -> None:
    """The zoom out carries the folds opened before the double-click's first click (``paradiag.undo``); only a
    change is written, and a zoom without it changes nothing."""
    from dash import no_update

    from paradiag.app.selection import UNDO
    from paradiag.app.views.timeline.live import fold_back

    zoom = {"xaxis.autorange": True, UNDO: {"unfolded": ["s1"]}}
    assert fold_back(zoom, ["s1", "s2"]) == ["s1"]
    assert fold_back(zoom, ["s1"]) is no_update
    assert fold_back({"xaxis.autorange": True}, ["s1", "s2"]) is no_update
    assert fold_back({UNDO: {"op": "gemm"}}, ["s2"]) is no_update  # Marey's undo: no folds in it


def test_a_click_and_its_double_clicks_zoom_out_merged_into_one_request_open_nothing() -> None:
    """Where the browser merges a click on a folded row and the zoom out of the same double-click into one request
    (on a busy machine the click waits while the zoom comes), both are applied in the order they happened: the fold
    the click opens is folded back, whichever the request lists first; a click alone opens it."""
    from dash import no_update
    from dash._callback_context import context_value
    from dash._utils import AttributeDict

    from paradiag.app import ids
    from paradiag.app.selection import UNDO
    from paradiag.app.views.timeline.live import click_or_zoom

    click = {"points": [{"y": 1, "x": 2.0}], "paradiag.at": 1000.0}
    zoom = {"xaxis.autorange": True, UNDO: {"unfolded": []}, "paradiag.at": 1200.0}
    folds = ["", "s1"]

    def fire(*names: str) -> tuple[object, object]:
        token = context_value.set(
            AttributeDict(triggered_inputs=[{"prop_id": f"{n}.data", "value": 1} for n in names])
        )
        try:
            return click_or_zoom(click, zoom, folds, [], [])
        finally:
            context_value.reset(token)

    assert fire(ids.TIMELINE_ZOOM, ids.TIMELINE_CLICK) == (no_update, no_update)
    assert fire(ids.TIMELINE_CLICK, ids.TIMELINE_ZOOM) == (no_update, no_update)
    assert fire(ids.TIMELINE_CLICK) == (["s1"], [{"label": " s1", "value": "s1"}])
    # A zoom out that came first (another double-click's) and a later click: the click's fold opens.
    zoom["paradiag.at"] = 500.0
    assert fire(ids.TIMELINE_CLICK, ids.TIMELINE_ZOOM)[0] == ["s1"]
