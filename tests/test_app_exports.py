"""The job page's lane names, exports (each view's table as CSV, figures as SVG/PNG) and free-text event search,
through the real app's callbacks on a sample and on a real trace."""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Iterator
from typing import Any

import pytest

from paradiag.app.selection import Selection
from tests.conftest import shared_path

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
def sel(app_ctx: Any) -> Any:
    from paradiag.app.callbacks.selection import select

    return select(None, None, None, f"?job=sample:{SAMPLE}")


def _rows(download: dict[str, Any]) -> list[list[str]]:
    return list(csv.reader(io.StringIO(download["content"])))


@pytest.mark.real
def test_the_lanes_of_a_real_job_are_named_by_what_they_run_not_by_their_stream_ids() -> None:
    import paradiag
    from paradiag.app.data.common import step_span
    from paradiag.app.data.overview import opening_step
    from paradiag.app.data.timeline import timeline_data

    job = paradiag.open(shared_path("gpu", "hta_16rank_job_rank0"))
    step = opening_step(job)
    assert step is not None
    ranks = list(job.rank_ids)
    data = timeline_data(job, ranks, step_span(job, step, ranks), pixels=400, max_primitives=2000)
    rows = data["rows"]
    labels = [row["label"] for row in rows]
    assert len(rows) > 3 and len(set(labels)) == len(labels)  # this rank has several streams of one kind
    assert all(str(row["track"]) not in row["label"].split() for row in rows)  # no stream id in a name
    assert all(re.fullmatch(r"r\d+ (compute|comm|copy|sync)( \d)?", label) for label in labels), labels
    assert "r0 compute 1" in labels and "r0 compute 2" in labels  # two lanes of one kind: numbered 1, 2


def test_a_lane_alone_of_its_kind_has_no_number() -> None:
    from paradiag.app.data.timeline import lane_labels

    names = {7: "compute", 40: "comm", 41: "comm"}
    assert lane_labels(3, [7, 40, 41], names) == {7: "r3 compute", 40: "r3 comm 1", 41: "r3 comm 2"}


def test_each_views_csv_holds_the_rows_of_its_table(sel: Any) -> None:
    from paradiag.app import context
    from paradiag.app.callbacks.export import csv_file
    from paradiag.app.data.detail import detail_data
    from paradiag.app.data.export import TABLES
    from paradiag.app.views.detail import detail_rank

    job = context.job(sel.job)
    for view, (store, _) in TABLES.items():
        download = csv_file(view, 1, sel.view(store))
        rows = _rows(download)
        assert (
            re.fullmatch(rf"{SAMPLE}-{view}(-step{sel.step})?\.csv", download["filename"])
            and download["type"] == "text/csv"
        )
        assert len(rows) > 1 and all(len(r) == len(rows[0]) for r in rows), view
    # the detail's rows are the operators its bar chart draws, in its order, with their times
    detail = _rows(csv_file("detail", 1, sel.view("detail")))
    data = detail_data(job, detail_rank(job, sel.ranks), sel.step, sel.op)
    assert [r[2] for r in detail[1:]] == [o["name"] for o in data["operators"]]
    assert [float(r[3]) for r in detail[1:]] == pytest.approx(
        [o["rank_ms"] for o in data["operators"]], abs=1e-5
    )
    # the timeline's: the events of the ranks it draws, named by their lanes; no click yet, no download
    timeline = _rows(csv_file("timeline", 1, sel.view("timeline")))
    assert timeline[0] == ["rank", "lane", "kind", "name", "start_ms", "dur_us"]
    assert {r[1] for r in timeline[1:]} <= {
        f"r{r[0]} {kind}" for r in timeline[1:] for kind in ("compute", "comm", "copy", "sync")
    } | {r[1] for r in timeline[1:] if re.fullmatch(r"r\d+ \w+ \d", r[1])}
    assert csv_file("timeline", 0, sel.view("timeline")) is csv_file("timeline", None, None)


def test_every_panel_offers_its_exports_and_the_modebar_saves_svg(app_ctx: Any) -> None:
    from paradiag.app.data.export import TABLES
    from paradiag.app.layouts import job_page
    from paradiag.app.layouts.common import GRAPH_CONFIG, csv_button

    parts = list(job_page.layout()._traverse())
    ids = {getattr(c, "id", None) for c in parts}
    assert all(csv_button(view) in ids for view in TABLES)
    images = {(getattr(c, "data-pd-image", None), getattr(c, "data-format", None)) for c in parts}
    for graph in ("heatmap", "timeline", "marey", "detail-graph", "comm-matrix", "compare-ranks", "flow"):
        assert {(graph, "svg"), (graph, "png")} <= images and graph in ids
    assert GRAPH_CONFIG["toImageButtonOptions"]["format"] == "svg"


def test_search_finds_an_event_by_a_substring_of_its_name_in_any_case(sel: Any) -> None:
    from paradiag.app import context
    from paradiag.app.callbacks.search import matches
    from paradiag.app.data.common import origin_ns, read_events, step_span
    from paradiag.app.data.search import search_events

    job = context.job(sel.job)
    lo, hi = step_span(job, sel.step)
    events = read_events(job, start_ns=lo, end_ns=hi, columns=["rank", "name", "start_ns"])
    host = next(
        n
        for n, k in zip(
            events.column("name").to_pylist(),
            read_events(job, start_ns=lo, end_ns=hi, columns=["kind"]).column("kind").to_pylist(),
            strict=True,
        )
        if "aten::" in str(n) or k == "host"
    )
    part = host[2:9].upper()  # a piece from inside the name, in another case
    found = search_events(job, sel.step, part, [5])
    assert (
        found["count"]
        == sum(1 for n in events.column("name").to_pylist() if part.lower() in str(n).lower())
        > 0
    )
    assert any(n["name"] == host for n in found["names"]) and all(
        part.lower() in m["name"].lower() for m in found["matches"]
    )
    starts = [m["start_ms"] for m in found["matches"] if m["rank"] == 5]
    assert starts == sorted(starts) and all(
        m["start_ms"] >= (lo - origin_ns(job)) / 1e6 - 1e-6 for m in found["matches"]
    )
    shown = matches(part, sel.view("timeline"))
    links = shown[1].children
    first = links[0].children
    assert (
        f"{found['count']:,} events of step {sel.step} match" in shown[0].children and "r" in first.children
    )
    linked = Selection.from_query(first.href)
    assert linked.window is not None
    rank, at = re.match(r"r(\d+) · .* · at ([0-9.]+) ms", first.children).groups()  # type: ignore[union-attr]
    assert (
        linked.job == sel.job
        and linked.step == sel.step
        and linked.ranks == [int(rank)]
        and linked.window[0] < float(at) < linked.window[1]
    )
    assert (
        "no event of step" in matches("no-such-event-name-xyz", sel.view("timeline"))
        and matches("  ", sel.view("timeline")) == []
    )


def test_the_snapshot_writes_each_points_hover_text_out(app_ctx: Any) -> None:
    """A page without the dashboard's scripts (the snapshot) gets the hover text the live page writes out."""
    import paradiag
    from paradiag.analysis.report import report_of
    from paradiag.app.data.marey import marey_data
    from paradiag.app.data.overview import opening_step
    from paradiag.app.figures.common import text_of
    from paradiag.app.figures.marey import marey_figure
    from paradiag.app.static_page import _figure, render_snapshot

    job = paradiag.open(f"sample_traces/{SAMPLE}")
    page = render_snapshot(job, report_of(job, job.diagnosis()))
    assert "pdText" not in page
    step = opening_step(job)
    assert step is not None
    fig = marey_figure(marey_data(job, step, None))
    texts = [text for t in fig.data if t.hoveron == "points" and t.meta for text in text_of(t)]
    html = _figure(fig)  # the snapshot's own rendering of a figure
    assert (
        texts
        and "pdText" not in html
        and all(
            json.dumps(text)[1:-1].replace("<", "\\u003c").replace(">", "\\u003e") in html
            for text in texts[:20]
        )
    )


def test_names_match_alike_whether_dictionary_encoded_or_plain() -> None:
    import pyarrow as pa

    from paradiag.app.data.search import _matching

    names = ["ncclDevKernel_AllReduce", "aten::mm", None, "AllGather", "gemm"]
    plain = pa.chunked_array([pa.array(names[:3]), pa.array(names[3:])])
    encoded = pa.chunked_array(
        [pa.array(names[:3]).dictionary_encode(), pa.array(names[3:]).dictionary_encode()]
    )
    for column in (plain, encoded):
        assert _matching(column, "ALL").to_pylist() == [True, False, False, True, False]
        assert _matching(column, "m").to_pylist() == [False, True, False, False, True]
