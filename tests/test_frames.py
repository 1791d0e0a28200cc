"""The pandas API (job.frames): frames that say what the stored tables and Diagnosis say, with categorical names."""

from __future__ import annotations

import json
import sys

import pyarrow.compute as pc
import pytest

import paradiag
from paradiag import schema
from paradiag.job import Job
from tests.conftest import REPO

pd = pytest.importorskip("pandas")

SLOW_RANK = REPO / "sample_traces" / "gpu_llm_slow_rank"  # 2 pipeline stages, rank 5 slow
DATA_PARALLEL = REPO / "sample_traces" / "gpu_resnet50_dp_host_stall"  # no pipeline


@pytest.fixture(scope="module")
def job(tmp_path_factory: pytest.TempPathFactory) -> Job:
    return paradiag.open(SLOW_RANK, tmp_path_factory.mktemp("frames") / "cache")


def test_breakdown_adds_up_and_matches_the_diagnosis(job: Job) -> None:
    frame = job.frames.breakdown()
    stored = job.diagnosis().breakdowns.filter(pc.is_valid(job.diagnosis().breakdowns.column("step")))
    assert len(frame) == stored.num_rows == job.steps.num_rows
    assert sorted(zip(frame["rank"], frame["step"], strict=True)) == sorted(
        zip(*(stored.column(c).to_pylist() for c in ("rank", "step")), strict=True)
    )
    parts = frame[["compute_ns", "comm_exposed_ns", "memory_exposed_ns", "sync_exposed_ns", "idle_ns"]].sum(
        axis=1
    )
    assert (parts == frame["window_ns"]).all()
    pct = frame[
        ["compute_pct", "comm_exposed_pct", "memory_exposed_pct", "sync_exposed_pct", "idle_pct"]
    ].sum(axis=1)
    assert pct.between(99.9, 100.1).all()
    assert (frame["overlap_ratio"] - frame["comm_overlapped_ns"] / frame["comm_ns"]).abs().max() < 1e-12
    totals = job.frames.breakdown(per_step=False)
    assert "step" not in totals.columns
    assert sorted(totals["rank"]) == job.rank_ids


def test_findings_name_the_slow_rank(job: Job) -> None:
    truth = json.loads((SLOW_RANK / "ground_truth.json").read_text())["faults"]
    slow = {r for fault in truth for r in fault.get("ranks", [])}
    frame = job.frames.findings()
    assert len(frame) == len(job.diagnosis().findings) > 0
    assert list(frame["kind"]) == [f.kind for f in job.diagnosis().findings]
    assert isinstance(frame["kind"].dtype, pd.CategoricalDtype)
    first = frame.iloc[0]
    assert first["kind"] == "slow_device" and set(first["ranks"]) == slow
    assert frame["impact_pct"].is_monotonic_decreasing


def test_stages_and_critical_path(job: Job) -> None:
    metrics = job.diagnosis().stage_metrics
    assert metrics is not None
    stages = job.frames.stages()
    assert list(stages["stage"]) == [s.stage for s in metrics.stages]
    assert stages.loc[stages["bottleneck"], "stage"].tolist() == [metrics.bottleneck_stage]
    path = job.frames.critical_path()
    assert len(path) == job.diagnosis().critical_path.num_rows
    one = job.frames.critical_path(step=1)
    assert len(one) > 0 and set(one["step"]) == {1}
    assert isinstance(path["kind"].dtype, pd.CategoricalDtype)


def test_events_and_kernels_have_categorical_names(job: Job) -> None:
    events = job.frames.events(ranks=[5])
    assert len(events) == job.events(ranks=[5]).num_rows and set(events["rank"]) == {5}
    for name in ("name", "kind", "category", "collective"):
        assert isinstance(events[name].dtype, pd.CategoricalDtype), name
    kernels = job.frames.kernels(ranks=[5], steps=[1])
    assert len(kernels) > 0
    assert set(kernels["kind"].astype(str)) <= set(schema.DEVICE_KINDS)
    assert set(kernels["step"]) == {1} and (kernels["device"] >= 0).all()
    expected = events[
        events["kind"].astype(str).isin(schema.DEVICE_KINDS) & (events["device"] >= 0) & (events["step"] == 1)
    ]
    assert len(kernels) == len(expected)


def test_frames_read_the_stored_diagnosis(job: Job, monkeypatch: pytest.MonkeyPatch) -> None:
    """Reopened from its cache, a job's frames come from the stored Diagnosis: nothing is analysed again."""
    import paradiag.analysis.diagnose as diagnose

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("the diagnosis was computed again")

    monkeypatch.setattr(diagnose, "diagnose", refuse)
    again = paradiag.open(job.cache_dir)
    assert again.frames.breakdown().equals(job.frames.breakdown())
    assert len(again.frames.findings()) == len(job.diagnosis().findings)


def test_no_pipeline_gives_an_empty_stages_frame(tmp_path_factory: pytest.TempPathFactory) -> None:
    dp = paradiag.open(DATA_PARALLEL, tmp_path_factory.mktemp("dp") / "cache")
    stages = dp.frames.stages()
    assert dp.diagnosis().stage_metrics is None
    assert stages.empty and "bottleneck" in stages.columns


def test_missing_pandas_says_how_to_install(job: Job, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pandas", None)  # what an environment without pandas sees
    with pytest.raises(ImportError, match=r"paradiag\[pandas\]"):
        _ = job.frames
