"""The first screen opens on what the top finding is about, for every kind of finding: the analysis' focus
(``paradiag.analysis.focus``) picks the subject, the overview's metric and its caption; the heatmap, the step chart
and Marey's graph mark the culprit in their own terms with the reason written out; the snapshot shows what the app
shows."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import paradiag
from paradiag.analysis.focus import METRICS, focus_of, job_pct, stage_z, stands_apart
from paradiag.app import palette
from paradiag.app.data.overview import heatmap_rows, overview, steps_focus
from paradiag.app.figures.heatmap import heatmap_figure
from paradiag.app.figures.steps import steps_figure

SAMPLES = Path(__file__).resolve().parents[1] / "sample_traces"

# sample -> (kind, subject, metric, the caption's start, the ranks the heatmap marks)
CASES = {
    "gpu_llm_slow_rank": ("slow_device", "rank", "own_z", "Rank 5 spends 1.", [5]),
    "gpu_resnet50_dp_host_stall": (
        "host_stall",
        "rank",
        "own_z",
        "The host of rank 3 starts its device",
        [3],
    ),
    "gpu_moe_expert_imbalance": (
        "expert_imbalance",
        "rank",
        "own_z",
        "Ranks 0, 1 (one expert-parallel index) spend",
        [0, 1],
    ),
    "npu_pangu_pipeline_stage_imbalance": (
        "stage_imbalance",
        "stage",
        "compute_job_pct",
        "Stage 0 computes",
        None,
    ),
    "npu_slow_link": ("slow_link", "link", "transfer_job_pct", "The link of ranks 1, 2 is slow", [1, 2]),
}


@pytest.fixture(scope="module")
def jobs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("focus")
    return {
        name: paradiag.open(SAMPLES / name, cache_dir=root / name) for name in [*CASES, "gpu_llm_fault_free"]
    }


def _rows(job: Any, max_rows: int = 32) -> list[dict[str, Any]]:
    f = focus_of(job.diagnosis())
    return heatmap_rows(overview(job), f.metric, None, max_rows, f.blamed, set(f.single), f.reasons)


@pytest.mark.parametrize("sample", list(CASES))
def test_the_overview_opens_on_the_top_finding_with_its_metric_and_caption(
    jobs: dict[str, Any], sample: str
) -> None:
    """Per kind: the subject, the metric that shows it (a stage or a link, alike within their stage, only against
    the job), a caption naming the culprit and the metric; the marked rows are the culprit's, each with its reason
    in its label, and the culprit's cells are the ones that stand out."""
    kind, subject, metric, start, marked = CASES[sample]
    job = jobs[sample]
    f = focus_of(job.diagnosis())
    assert (f.kind, f.subject, f.metric) == (kind, subject, metric)
    hidden = (
        sample == "npu_slow_link"
    )  # the job hides the link: every rank in its collectives spends the same
    assert f.caption.startswith(start) and f"coloured by {METRICS[metric]}" in f.caption
    assert (
        f.caption.endswith("; the ranks' own figures do not show it (the communication matrix does)")
        == hidden
    )
    rows = _rows(job)
    fig = heatmap_figure(rows, overview(job)["steps"], f.metric, "", caption=f.caption)
    assert (
        next(a.text for a in fig.layout.annotations if a.name == "caption").replace("<br>", " ") == f.caption
    )
    labels = list(fig.layout.yaxis.ticktext)
    red = [
        labels[round(s.y0 + 0.45)]
        for s in fig.layout.shapes
        if s.type == "rect" and s.line.color == palette.CULPRIT
    ]
    culprit_rows = [r for r in rows if r["culprit"]]
    assert (
        red
        and len(red) == len(culprit_rows)
        and all(
            label.startswith("⚠ ") and f"<b>· {r['reason']}</b>" in label
            for label, r in zip(red, culprit_rows, strict=True)
        )
    )
    if marked is not None:
        assert sorted(r for row in culprit_rows for r in row["ranks"]) == marked
    else:  # a stage: its rows, and nothing else
        assert {row["stage"] for row in culprit_rows} == {f.stage} and sum(
            len(row["ranks"]) for row in culprit_rows
        ) == len(f.ranks)
    # The culprit stands out in the metric drawn: its cells are the farthest from 0 (a z-score, a % of the median).
    far = [max(abs(v) for v in row["values"] if v is not None) for row in rows]
    assert (max(far[i] for i, row in enumerate(rows) if row["culprit"]) == max(far) > 0) != hidden


def test_a_stage_finding_folds_its_stage_into_one_marked_row(jobs: dict[str, Any]) -> None:
    """With fewer rows than ranks, a whole stage's finding marks the stage's folded row (it does not unfold the
    stage into a row per rank); a rank's finding keeps its rank on a row of its own."""
    f = focus_of(jobs["npu_pangu_pipeline_stage_imbalance"].diagnosis())
    marked = [r for r in _rows(jobs["npu_pangu_pipeline_stage_imbalance"], max_rows=2) if r["culprit"]]
    assert len(marked) == 1 and sorted(marked[0]["ranks"]) == sorted(f.ranks) and f.single == []
    slow = _rows(jobs["gpu_llm_slow_rank"], max_rows=4)
    assert [r["ranks"] for r in slow if r["culprit"]] == [[5]] and any(len(r["ranks"]) > 1 for r in slow)


def test_a_job_without_findings_says_so() -> None:
    job = paradiag.open(SAMPLES / "gpu_llm_fault_free")
    f = focus_of(job.diagnosis())
    assert (f.kind, f.subject, f.ranks, f.single) == (None, "none", [], [])
    assert f.caption.startswith("No finding stands out")
    assert not any(r["culprit"] for r in _rows(job))


def test_the_step_chart_spans_its_data_and_says_what_the_fault_costs(jobs: dict[str, Any]) -> None:
    """The axis is around the step times, not from 0; the ranks' spread is a band; the title gives the step time,
    the spread, and the replay's step time without the top finding's cause, drawn as a line."""
    job = jobs["npu_slow_link"]
    ov, f = overview(job), focus_of(job.diagnosis())
    fig = steps_figure(
        ov["steps"], ov["ranks"], ov["metrics"]["step_ms"], f.single, f.step, focus=steps_focus(job)
    )
    step = np.array([[v for v in row if v is not None] for row in ov["metrics"]["step_ms"]], dtype=float)
    lo, hi = fig.layout.yaxis.range
    assert 0 < lo <= step.min() and step.max() <= hi < 1.5 * step.max()
    band = next(t for t in fig.data if t.name == "fastest–slowest rank")
    assert band.fill == "tonexty"
    title = next(a.text for a in fig.layout.annotations if a.name == "caption")
    assert title.startswith("step ") and "ranks within" in title
    predicted = steps_focus(job)["predicted_ms"]
    if predicted:
        assert f"without slow link (replay): {predicted:.1f} ms" in title


def test_a_blamed_ranks_line_is_drawn_only_where_it_leaves_the_median() -> None:
    """In a synchronous job the blamed rank's step time is everybody's: its line would hide the median's."""
    same = steps_figure([0, 1], [0, 1, 2], [[10.0, 10.0], [10.0, 10.01], [10.0, 10.0]], culprit=[1])
    apart = steps_figure([0, 1], [0, 1, 2], [[10.0, 10.0], [10.0, 12.0], [10.0, 10.0]], culprit=[1])
    assert "rank 1" not in [t.name for t in same.data] and "rank 1" in [t.name for t in apart.data]
    assert same.layout.yaxis.range[0] > 9.0  # a flat chart sits around its data


def test_stage_z_and_job_pct() -> None:
    """A rank against its stage (a whole slow stage scores 0 there) and against the job (it stands out)."""
    values = np.array([[1.0], [1.01], [0.99], [1.0], [2.0], [2.02], [1.98]])
    z = stage_z(values, [0, 0, 0, 0, 1, 1, 1])
    assert np.all(np.abs(z) < 3)
    pct = job_pct(values)
    assert np.all(pct[4:, 0] > 90) and np.all(np.abs(pct[:4, 0]) < 2)
    assert (
        stands_apart([None, 0.5], True)
        and not stands_apart([None, 0.5], False)
        and stands_apart([0.0, -9.0], False)
    )


def test_marey_marks_the_stage_or_the_rank_with_its_reason_as_text(jobs: dict[str, Any]) -> None:
    """Marey's graph writes why on the graph: the stage's rows outlined together with the headline, a blamed
    rank's row with its reason; merged bands keep every category's share (stacked slices)."""
    from paradiag.app.data.marey import marey_data
    from paradiag.app.data.overview import opening_step
    from paradiag.app.figures.marey import marey_figure

    job = jobs["npu_pangu_pipeline_stage_imbalance"]
    f = focus_of(job.diagnosis())
    data = marey_data(job, opening_step(job), None)
    notes = [a.text for a in marey_figure(data).layout.annotations]
    assert notes == [f"<b>⚠ {f.headline}</b>"]
    job = jobs["gpu_llm_slow_rank"]
    data = marey_data(job, opening_step(job), None)
    notes = [a.text for a in marey_figure(data).layout.annotations]
    assert notes == ["<b>⚠ rank 5: compute 1.40x</b>"] or (
        len(notes) == 1 and notes[0].startswith("<b>⚠ rank 5: compute 1.")
    )
    shares = [mix for st in data["stages"] for mix in st["shares"]]
    assert shares and all(abs(sum(s for _, s in mix) - 1) < 1e-3 for mix in shares)
    coarse = marey_data(job, opening_step(job), None, merge_frac=0.2)  # neighbours of several kinds merge
    assert any(len(mix) > 1 for st in coarse["stages"] for mix in st["shares"])
    fig = marey_figure(coarse)
    fills = {t.name for t in fig.data if t.fill == "toself" and t.name in palette.CATEGORY}
    assert {
        "compute",
        "collective",
    } <= fills  # a merged band's compute is drawn, not hidden under the dominant


def test_the_snapshot_shows_the_ranks_and_the_metric_the_app_shows(jobs: dict[str, Any]) -> None:
    """One rule, read by both: the snapshot's timeline draws the app's ranks, its heatmap the app's metric and
    caption."""
    from paradiag.analysis.report import report_of
    from paradiag.app.data.overview import opening_step
    from paradiag.app.static_page import render_snapshot
    from paradiag.app.views.timeline.static import shown_ranks

    job = jobs["npu_slow_link"]
    f = focus_of(job.diagnosis())
    page = render_snapshot(job, report_of(job, job.diagnosis()))
    step = opening_step(job)  # the step both open on
    ranks = shown_ranks(job, None, step)
    assert f"Timeline of step {step} (ranks {', '.join(map(str, ranks))}" in page
    assert f.caption.split(":")[0] in page and METRICS[f.metric] in page


def test_the_step_chart_gives_a_cpu_jobs_counted_estimate_beside_the_replay() -> None:
    """A CPU job's extra work keeps its own estimate (the replay runs the clock's durations, which a shared host
    scatters): the chart says both, not "saves 0%" alone under a finding of 0.64 %."""
    from paradiag.app.figures.steps import summary

    focus = {"what": "slow device", "predicted_ms": 58.0, "saving_pct": 0.0, "estimate_pct": 0.64, "step": 2}
    lo, hi = np.array([58.0, 58.1]), np.array([60.0, 60.1])
    text = summary([2, 3], np.array([58.8, 58.9]), lo, hi, focus)  # type: ignore[arg-type]
    assert "without slow device (replay): 58.0 ms (saves 0% of the step)" in text
    assert "<br>its own estimate: ~0.64% of the step" in text
    plain = {**focus, "estimate_pct": None}
    assert "estimate" not in summary([2, 3], np.array([58.8, 58.9]), lo, hi, plain)  # type: ignore[arg-type]
