"""The typed boundaries hold at run time too: the report, the comparison and the view data a sample job gives are
the TypedDicts mypy checks them against (app/data/shapes.py, analysis/report.py, analysis/compare.py), every key
of each present, none else, each value of its type. mypy checks the literals; this checks what it takes on trust
(the dataclasses turned into dicts, a cast, the values numpy or Arrow hand back)."""

from __future__ import annotations

import types
import typing
from dataclasses import dataclass
from typing import Any, Literal, NotRequired, Union, get_args, get_origin, get_type_hints

import pytest

import paradiag
from paradiag.analysis.compare import CompareDoc
from paradiag.analysis.report import Report, report_of
from paradiag.app.data import comm, detail, flow, overview, search, shapes, timeline_fold
from paradiag.app.data.common import diagnosis, slowest_step, step_span
from paradiag.app.data.compare import compare_jobs
from paradiag.app.data.overview import report
from paradiag.app.data.timeline import timeline_data
from paradiag.app.figures.common import SHARED_TEXT
from paradiag.app.figures.timeline import timeline_figure


@dataclass
class Mismatch:
    path: str
    why: str


def mismatches(value: Any, tp: Any, path: str = "$") -> list[Mismatch]:
    """Where ``value`` is not of the type ``tp`` (TypedDicts, lists, tuples, dicts, unions, literals, plain types)."""
    if tp is Any:
        return []
    if typing.is_typeddict(tp):
        if not isinstance(value, dict):
            return [Mismatch(path, f"{type(value).__name__}, not a {tp.__name__}")]
        # __required_keys__ is wrong under postponed annotations (a NotRequired string reads as required)
        hints = get_type_hints(tp, include_extras=True)
        optional = {k for k, t in hints.items() if get_origin(t) is NotRequired}
        hints = {k: get_args(t)[0] if k in optional else t for k, t in hints.items()}
        required = set(hints) - optional
        out = [Mismatch(f"{path}.{k}", f"missing from {tp.__name__}") for k in required - set(value)]
        out += [Mismatch(f"{path}.{k}", f"not a key of {tp.__name__}") for k in set(value) - set(hints)]
        for k in set(value) & set(hints):
            out += mismatches(value[k], hints[k], f"{path}.{k}")
        return out
    origin = get_origin(tp)
    if origin in (Union, types.UnionType):
        found = [mismatches(value, t, path) for t in get_args(tp)]
        return [] if any(not f for f in found) else min(found, key=len)
    if origin is Literal:
        return [] if value in get_args(tp) else [Mismatch(path, f"{value!r} not one of {get_args(tp)}")]
    if origin is list:
        if not isinstance(value, list):
            return [Mismatch(path, f"{type(value).__name__}, not a list")]
        return [m for i, v in enumerate(value) for m in mismatches(v, get_args(tp)[0], f"{path}[{i}]")]
    if origin is tuple:
        args = get_args(tp)
        if not isinstance(value, tuple):
            return [Mismatch(path, f"{type(value).__name__}, not a tuple")]
        each = [args[0]] * len(value) if len(args) == 2 and args[1] is Ellipsis else list(args)
        return [
            m
            for i, (v, t) in enumerate(zip(value, each, strict=True))
            for m in mismatches(v, t, f"{path}[{i}]")
        ]
    if origin is dict:
        if not isinstance(value, dict):
            return [Mismatch(path, f"{type(value).__name__}, not a dict")]
        key_tp, value_tp = get_args(tp)
        return [
            m
            for k, v in value.items()
            for m in (
                *mismatches(k, key_tp, f"{path}<key {k!r}>"),
                *mismatches(v, value_tp, f"{path}[{k!r}]"),
            )
        ]
    if tp is type(None):
        return [] if value is None else [Mismatch(path, f"{value!r}, not None")]
    if tp is float:
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        return [] if ok else [Mismatch(path, f"{type(value).__name__}, not a float")]
    if tp is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
        return [] if ok else [Mismatch(path, f"{type(value).__name__}, not an int")]
    return [] if isinstance(value, tp) else [Mismatch(path, f"{type(value).__name__}, not a {tp.__name__}")]


def test_the_checker_names_a_renamed_key_a_missing_one_and_a_wrong_type() -> None:
    good = {"label": "s0", "ranks": [0, 1]}
    assert mismatches(good, shapes.RankGroup) == []
    assert {m.why for m in mismatches({"label": "s0", "rank": [0]}, shapes.RankGroup)} == {
        "missing from RankGroup",
        "not a key of RankGroup",
    }
    assert mismatches({"label": "s0", "ranks": ["0"]}, shapes.RankGroup) == [
        Mismatch("$.ranks[0]", "str, not an int")
    ]


def _open(name: str) -> Any:
    return paradiag.open(f"sample_traces/{name}")


@pytest.mark.parametrize("name", ["npu_pangu_pipeline_stage_imbalance", "gpu_llm_slow_rank"])
def test_the_report_is_its_typeddict(name: str) -> None:
    job = _open(name)
    doc = report_of(job, diagnosis(job))
    assert doc["ranks"] and doc["ranks"][0]["breakdown"] is not None  # the nested shapes are checked too
    assert mismatches(doc, Report) == []


def test_the_view_data_of_a_pipeline_job_are_their_typeddicts() -> None:
    job = _open("npu_pangu_pipeline_stage_imbalance")
    step = slowest_step(job)
    assert step is not None
    rank = job.rank_ids[0]
    matrix = comm.matrix(job)
    first = matrix["cells"][0]
    data = detail.detail_data(job, rank, step)
    assert data["operators"] and flow.flow_data(job, step)["stages"]
    found = search.search_events(job, step, data["operators"][0]["name"][:6])
    assert found["matches"]
    checked = {
        "flow_data": (flow.flow_data(job, step), shapes.FlowData),
        "flow_view": (flow.flow_view(job, step, expand_all=True), shapes.FlowData),
        "matrix": (matrix, shapes.CommMatrix),
        "view": (comm.view(job), shapes.CommView),
        "link_instances": (comm.link_instances(job, first["src"], first["dst"]), list[shapes.LinkInstance]),
        "detail": (data, shapes.DetailData),
        "search": (found, shapes.SearchResult),
    }
    found_wrong = {name: mismatches(value, tp) for name, (value, tp) in checked.items()}
    assert found_wrong == {name: [] for name in checked}


def test_the_comparison_is_its_typeddict_compared_or_refused() -> None:
    fault_free, slow = _open("gpu_llm_fault_free"), _open("gpu_llm_slow_rank")
    doc = compare_jobs(fault_free, slow)
    assert doc["refused"] is None and doc["ranks"] and doc["top_change"]["kind"] is not None
    refused = compare_jobs(fault_free, _open("npu_pangu_pipeline_stage_imbalance"))
    assert refused["refused"] and "ranks" not in refused
    assert mismatches(doc, CompareDoc) == [] and mismatches(refused, CompareDoc) == []
    assert mismatches(report(slow), Report) == []


def test_the_timeline_data_are_their_typeddicts_single_ranks_folds_and_the_path() -> None:
    job = _open("gpu_llm_slow_rank")
    step = overview.opening_step(job)
    assert step is not None
    ranks = list(job.rank_ids)
    window = step_span(job, step, ranks)
    plain = timeline_data(job, ranks, window, pixels=400, max_primitives=10**9, step=step)
    merged = timeline_data(job, ranks, window, pixels=400, max_primitives=50, step=step)
    culprit = overview.focus_of(job).ranks[0]
    entries = timeline_fold.fold_plan(job, [culprit], None)  # the culprit single, its alike stages folded
    folded = timeline_data(job, entries, step_span(job, step), pixels=400, step=step, path=True)
    assert plain["kinds"] and plain["links"] and "wait_us" in plain["waits"]
    assert merged["aggregated"] and all("count" in seg for seg in merged["kinds"].values())
    assert any(row["rank"] is None for row in folded["rows"]) and folded["folded"]
    assert folded["path"] is not None and folded["path"]["x0"] and folded["path"]["edges"]["x"]
    checked = {
        "entries": (entries, list[int | shapes.FoldEntry]),
        "plain": (plain, shapes.TimelineData),
        "merged": (merged, shapes.TimelineData),
        "folded": (folded, shapes.TimelineData),
        "fold_times": (
            timeline_fold.fold_times(job, step, [e for e in entries if isinstance(e, dict)]),
            list[shapes.FoldTimes],
        ),
    }
    found_wrong = {name: mismatches(value, tp) for name, (value, tp) in checked.items()}
    assert found_wrong == {name: [] for name in checked}
    # a kind's intervals are all one by one or all merged, never a mix
    assert mismatches(plain["kinds"], dict[str, shapes.Intervals]) == []
    assert mismatches(merged["kinds"], dict[str, shapes.MergedIntervals]) == []
    shared = [t.meta[SHARED_TEXT] for t in timeline_figure(folded).data if isinstance(t.meta, dict)]
    assert shared and all(mismatches(m, shapes.SharedText) == [] for m in shared)


def test_the_heatmap_and_step_chart_data_are_their_typeddicts() -> None:
    job = _open("gpu_llm_slow_rank")
    ov = overview.overview(job)
    f = overview.focus_of(job)
    rows = overview.heatmap_rows(ov, "step_ms", None, 32, f.blamed, set(f.single), f.reasons)
    folded = overview.heatmap_rows(ov, "step_ms", ["s0"], 2, f.blamed, set(f.single), f.reasons)
    assert any(r["spread"] for r in folded) and any(r["culprit"] for r in rows)
    checked = {
        "overview": (ov, shapes.Overview),
        "rows": (rows, list[shapes.HeatmapRow]),
        "folded": (folded, list[shapes.HeatmapRow]),
        "steps_focus": (overview.steps_focus(job), shapes.StepsFocus),
    }
    found_wrong = {name: mismatches(value, tp) for name, (value, tp) in checked.items()}
    assert found_wrong == {name: [] for name in checked}
