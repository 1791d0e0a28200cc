"""Compare refuses runs that cannot be paired position by position (the rule is analysis/compare's; the panel and
``paradiag compare`` read it), says its changes in words, offers every job the server serves; and the start page
stays reachable from a served job."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from paradiag.analysis.compare import change_text, compare, culprit_text, incomparable, rank_pairing

SAMPLES = Path(__file__).resolve().parents[1] / "sample_traces"


def _report(layout: dict[str, int]) -> dict[str, Any]:
    """A report of a job laid out tp fastest, then dp, then pp, with every rank alike."""
    place = {}
    for r in range(layout["dp"] * layout["tp"] * layout["pp"]):
        place[r] = {
            "tp": r % layout["tp"],
            "dp": r // layout["tp"] % layout["dp"],
            "pp": r // (layout["tp"] * layout["dp"]),
            "ep": 0,
        }
    ranks = [
        {
            "rank": r,
            "step_time_ns": {"median": 20e6},
            "breakdown": {"compute_ns": 10e6, "comm_exposed_ns": 5e6, "idle_ns": 5e6, "window_ns": 20e6},
        }
        for r in place
    ]
    job = {
        "num_ranks": len(place),
        "device_type": "gpu",
        "parallel_layout": {**layout, "ep": 1, "coords": {str(r): c for r, c in place.items()}},
    }
    return {"job": job, "ranks": ranks, "metrics": {"step_time_ns": {"median": 20e6}}, "findings": []}


@pytest.mark.parametrize(
    ("base", "cand", "refused"),
    [
        (
            {"dp": 2, "tp": 2, "pp": 2},
            {"dp": 4, "tp": 8, "pp": 8},
            "pipelines differ in depth (2 stages against 8)",
        ),
        (
            {"dp": 2, "tp": 2, "pp": 1},
            {"dp": 4, "tp": 8, "pp": 1},
            "split the model differently (TP 2 against 8)",
        ),
        (
            {"dp": 2, "tp": 2, "pp": 1},
            {"dp": 8, "tp": 2, "pp": 1},
            None,
        ),  # data parallel scaled: replicas fold
        (
            {"dp": 4, "tp": 2, "pp": 8},
            {"dp": 1, "tp": 1, "pp": 8},
            None,
        ),  # stage s is stage s: TP and DP fold
        ({"dp": 2, "tp": 2, "pp": 2}, {"dp": 2, "tp": 2, "pp": 2}, None),
    ],
)
def test_runs_that_cannot_be_paired_are_refused_naming_both_layouts(
    base: dict[str, int], cand: dict[str, int], refused: str | None
) -> None:
    b, c = _report(base), _report(cand)
    reason = incomparable(b, c, rank_pairing(b, c))
    doc = compare(b, c, {}, {})
    if refused is None:
        assert reason is None and doc["refused"] is None and doc["ranks"]
        return
    assert reason is not None and refused in reason and doc["refused"] == reason
    sizes = [
        f"{len(r['ranks'])} ranks ({' × '.join(f'{a.upper()}{v}' for a, v in lay.items() if v > 1)})"
        for r, lay in ((b, base), (c, cand))
    ]
    assert f"the baseline, {sizes[0]}, with this job, {sizes[1]}" in reason
    assert (
        "step_time_ns" not in doc and "ranks" not in doc
    )  # no deltas to misread (the +943% of a 256-rank job on an 8-rank one)


def test_culprits_and_changes_read_as_words() -> None:
    assert (
        culprit_text({"link": {"ranks": [70, 78, 86, 94]}, "ranks": [70, 78, 86, 94]})
        == "link between ranks 70, 78, 86, 94"
    )
    assert culprit_text({"stage": 5, "ranks": list(range(40, 48))}) == "stage 5 (ranks 40–47)"
    assert culprit_text({"ranks": [3], "operator": "aten::mm"}) == "rank 3, operator aten::mm"
    assert culprit_text({"link": {"nodes": [1, 2]}}) == "link between nodes 1, 2"
    top = {
        "kind": "slow_link",
        "culprit": {"link": {"ranks": [70, 78]}, "ranks": [70, 78]},
        "evidence": "new finding: 4x slower",
    }
    assert change_text(top) == "slow link of link between ranks 70, 78: new finding: 4x slower"
    assert (
        "{" not in change_text(top)
        and change_text({"kind": None, "evidence": "no change beyond noise"}) == "no change beyond noise"
    )


def test_paradiag_compare_refuses_a_mismatch_with_exit_2_and_says_why(tmp_path: Path) -> None:
    from paradiag.snapshot import compare as compare_cli

    runner = CliRunner()
    args = [str(SAMPLES / "gpu_llm_slow_rank"), str(SAMPLES / "npu_pangu_pipeline_stage_imbalance")]
    result = runner.invoke(compare_cli, args)
    assert result.exit_code == 2, result.output
    assert (
        "cannot compare the baseline, 8 ranks (DP2 × TP2 × PP2), with this job, 4 ranks (PP4)"
        in result.stderr
    )
    doc = json.loads(runner.invoke(compare_cli, [*args, "--json"]).stdout)
    assert (
        doc["refused"].startswith("cannot compare")
        and doc["baseline"]["layout"] == "8 ranks (DP2 × TP2 × PP2)"
    )
    fine = runner.invoke(
        compare_cli, [str(SAMPLES / "gpu_llm_fault_free"), str(SAMPLES / "gpu_llm_slow_rank")]
    )
    assert (
        fine.exit_code == 0 and "top change: slow device of rank 5" in fine.output and "{" not in fine.output
    )


@pytest.fixture
def served_app(tmp_path: Path) -> Iterator[Any]:
    from paradiag.app.config import Config
    from paradiag.app.factory import create_app

    mp = pytest.MonkeyPatch()
    mp.setenv("PARADIAG_CACHE_DIR", str(tmp_path / "cache"))
    more = (str(SAMPLES / "gpu_llm_fault_free"), str(SAMPLES / "npu_slow_link"))
    cfg = Config.from_env(
        job=str(SAMPLES / "gpu_llm_slow_rank"),
        more_jobs=more,
        upload_dir=tmp_path / "uploads",
        app_cache_dir=tmp_path / "app-cache",
    )
    app = create_app(cfg)
    with app.server.test_request_context("/"):
        yield app
    mp.undo()


def test_every_served_folder_is_a_baseline_and_opens_by_its_token(served_app: Any) -> None:
    from paradiag.app import jobs
    from paradiag.app.callbacks.header import sample_links
    from paradiag.app.context import config
    from paradiag.app.selection import Selection
    from paradiag.app.views.compare.live import baseline_options, render_compare

    options = {o["value"]: o["label"] for o in baseline_options({"job": "served"})}
    assert (
        options["served:1"] == "served gpu_llm_fault_free"
        and options["served:2"] == "served npu_slow_link"
        and "served" not in options
    )
    assert jobs.path_of("served:2", config(), "u") == SAMPLES / "npu_slow_link"
    for bad in ("served:3", "served:0", "served:x", "served:01234"):
        with pytest.raises(jobs.JobNotFound):
            jobs.path_of(bad, config(), "u")
    summary = str(render_compare(Selection(job="served", base="served:1").view("compare"))[0])
    assert "slow device of rank 5" in summary
    links = str(sample_links(None))
    assert "gpu_llm_slow_rank (served)" in links and "job=served%3A2" in links


def test_the_start_page_is_reachable_from_a_served_job(served_app: Any) -> None:
    from paradiag.app import ids
    from paradiag.app.callbacks.header import page
    from paradiag.app.callbacks.selection import address, select
    from paradiag.app.layouts.shell import layout

    assert select(None, None, None, "").job == "served"  # plain "/" opens the served job
    start = select(None, None, None, "?start")
    assert start.job is None and address(start) == "?start"  # a reload stays on the start page
    assert page(start.view("job"))[0] == {"display": "block"}
    header = layout().children[2]
    assert [(a.children, a.href) for a in header.children[:2]] == [
        ("paradiag", "?start"),
        ("open or upload a job", "?start"),
    ]
    assert header.children[1].id == ids.START_LINK


def test_finding_badges_explain_their_colour_and_the_job_page_opens_with_a_guide() -> None:
    from paradiag.app import palette
    from paradiag.app.callbacks.header import findings_list
    from paradiag.app.layouts.job_page import guide

    found = [
        {"kind": "slow_device", "severity": "high", "ranks": [5], "impact_pct": 12, "evidence": "e"},
        {"kind": "clock_skew", "severity": "info", "ranks": [1], "evidence": "x"},
    ]
    items = findings_list(found)
    badge = items[0].children.children[0]
    assert badge.style["background"] == palette.SEVERITY["high"] and badge.title.startswith(
        "high severity: a fix saves ≥ 10 %"
    )
    assert items[1].children.children[0].title.startswith("info severity")
    legend = str(items[-1])
    assert "badge colour = severity" in legend and all(name in legend for name in ("high", "medium", "low"))
    text = str(guide())
    assert "How to read this page" in text and "in ms" in text and "press ? for the keys" in text
