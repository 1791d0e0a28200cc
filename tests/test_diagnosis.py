"""The Diagnosis: computed at ingest, stored in the cache, read by the report, the snapshot and the app's view data.

A cache opened after its source folder moved away gives the same report, snapshot and views; the report needs no
event; a Diagnosis written by another analysis version is computed again; the typed objects round-trip."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import paradiag
from paradiag import parse_worker
from paradiag.analysis import diagnosis_types
from paradiag.analysis.diagnose import stored_or_computed
from paradiag.analysis.report import build_report
from paradiag.cache import MANIFEST
from paradiag.job import Job
from tests.conftest import REPO
from tests.test_app_flow_strategy import STRATEGY

SAMPLES = REPO / "sample_traces"
# Plotly names each figure's div with a fresh uuid.
UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def _plain(value: Any) -> Any:
    """Arrow tables and numpy values as plain Python, so that whole view payloads compare with ==."""
    if isinstance(value, pa.Table):
        return value.to_pydict()
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value.tolist() if hasattr(value, "tolist") else value


def everything(job: Job) -> dict[str, Any]:
    """The report, the snapshot page and every view's data of ``job``."""
    from paradiag.app.data import (
        collectives,
        comm,
        common,
        compare,
        detail,
        findings,
        flow,
        marey,
        mesh,
        overview,
        timeline,
    )
    from paradiag.app.static_page import render_snapshot

    report = build_report(job)
    step = common.slowest_step(job)
    assert step is not None
    ranks = job.rank_ids[:8]
    ov = overview.overview(job)
    return {
        "report": report,
        "snapshot": UUID.sub("id", render_snapshot(job, report)),
        "overview": ov,
        "heatmap": overview.heatmap_rows(ov, "zscore", max_rows=4),
        "mesh": mesh.mesh_of(job),
        "findings": findings.findings_of(job),
        "instances": collectives.instances(job),
        "waits": collectives.wait_by_rank_step(job),
        "matrix": comm.matrix(job),
        "link": comm.link_instances(job, ranks[0], ranks[1]),
        "marey": marey.marey_data(job, step, None),
        "flow": flow.flow_data(job, step),
        "timeline": timeline.timeline_data(job, ranks, common.step_span(job, step, ranks)),
        "detail": detail.detail_data(job, ranks[-1], step),
        "operators": compare.operators_of(job),
        "strategy": common.strategy(job),
        "diagnosis": job.diagnosis().document(),
    }


@pytest.fixture(scope="module", params=["gpu_llm_slow_rank", "npu_slow_link"])
def moved(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> tuple[dict[str, Any], dict[str, Any]]:
    """A job's outputs with its source folder present, and again from a copy of its cache once the source is gone."""
    root = tmp_path_factory.mktemp("moved")
    source = root / "job"
    shutil.copytree(SAMPLES / request.param, source)
    cache = root / "cache"
    present = everything(paradiag.open(source, cache_dir=cache))
    source.rename(root / "elsewhere")
    copy = root / "cache-copy"  # another path, so that nothing kept in memory for the first cache is reused
    shutil.copytree(cache, copy)
    return present, everything(paradiag.open(copy))


def test_cache_without_its_source_gives_the_same_report_snapshot_and_views(
    moved: tuple[dict[str, Any], dict[str, Any]],
) -> None:
    present, absent = moved
    assert present["report"]["findings"], "the samples have findings to compare"
    for key in present:
        assert _plain(absent[key]) == _plain(present[key]), key


def test_strategy_files_are_read_at_ingest_and_kept_without_the_source(tmp_path: Path) -> None:
    from paradiag.app.data.common import strategy

    source = tmp_path / "job"
    shutil.copytree(SAMPLES / "npu_slow_link", source)
    rank0 = next(p for p in sorted(source.iterdir()) if p.is_dir() and (p / "profiler_info_0.json").exists())
    (rank0 / "parallel_strategy_0.json").write_text(json.dumps(STRATEGY))
    (source / "parallel_strategy_9.json").write_text("{not json")
    paradiag.open(source, cache_dir=tmp_path / "cache")
    shutil.rmtree(source)
    found = strategy(paradiag.open(tmp_path / "cache"))
    assert found["files"] == [f"{rank0.name}/parallel_strategy_0.json"]
    assert [r["op_type"] for r in found["ops"][0]] == ["GetNext", "Gather", "MatMul", "AllReduce"]
    assert found["ops"][0][2]["strategy"] == "[[4,1],[1,1]]" and found["stage_of"] == {0: 0}
    assert len(found["problems"]) == 1 and found["problems"][0].startswith(
        "parallel_strategy_9.json: not valid JSON"
    )


def test_the_report_reads_the_stored_diagnosis_and_no_event(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path / "cache"
    expected = build_report(paradiag.open(SAMPLES / "gpu_llm_slow_rank", cache_dir=cache))
    assert (cache / diagnosis_types.FOLDER / diagnosis_types.DOCUMENT).is_file()

    def no_events(*args: Any, **kwargs: Any) -> pa.Table:
        raise AssertionError("the report read events")

    monkeypatch.setattr(Job, "events", no_events)
    assert build_report(paradiag.open(cache)) == expected


def test_a_diagnosis_from_another_analysis_version_is_computed_again(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    job = paradiag.open(SAMPLES / "gpu_llm_slow_rank", cache_dir=cache)
    document = cache / diagnosis_types.FOLDER / diagnosis_types.DOCUMENT
    stored = json.loads(document.read_text())
    document.write_text(json.dumps({**stored, "version": "older", "findings": []}))
    assert diagnosis_types.load(cache) is None
    again = stored_or_computed(job)
    assert [f.kind for f in again.findings] == [f["kind"] for f in stored["findings"]]
    assert json.loads(document.read_text())["version"] == diagnosis_types.analysis_version()


@pytest.mark.parametrize("device", ["h100", "910b"])
def test_the_reduce_at_ingest_reads_the_maps_frames_which_are_the_events_frames(
    device: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The reduce of an ingest takes each rank's device frame from the map instead of reading the events back:
    the same frame the events give (two nodes, one with a skewed clock: the frames are shifted onto the job's
    clock), and the same Diagnosis as a reduce that reads the events; the frames are not left in the cache."""
    from click.testing import CliRunner

    from paradiag.analysis import diagnose
    from paradiag.analysis.frame import concat, device_frame
    from paradiag.simulator.cli import simulate

    folder = tmp_path / "job"
    args = [
        "--device",
        device,
        "--format",
        "kineto" if device == "h100" else "ascend",
        "--dp",
        "2",
        "--tp",
        "8",
        "--layers",
        "2",
        "--steps",
        "2",
    ]
    result = CliRunner().invoke(
        simulate, [*args, "--inject", "clock_skew:nodes=1,ms=3", "--quiet", "-o", str(folder)]
    )
    assert result.exit_code == 0, result.output
    read, compared = diagnose.read_frame, []

    def checked(job: Job) -> Any:
        frame = read(job)
        assert all(job.work_frame_file(r) is not None for r in job.rank_ids)
        expected = concat(
            [device_frame(job.events(ranks=[r], columns=diagnose.WORK_COLUMNS)) for r in job.rank_ids]
        )
        for name, value in vars(expected).items():
            assert (
                (getattr(frame, name) == value).all()
                if hasattr(value, "dtype")
                else getattr(frame, name) == value
            ), name
            assert getattr(getattr(frame, name), "dtype", None) == getattr(value, "dtype", None), name
        compared.append(len(frame))
        return frame

    monkeypatch.setattr(diagnose, "read_frame", checked)
    cache = tmp_path / "cache"
    job = paradiag.open(folder, cache_dir=cache)
    assert compared and compared[0] > 0
    assert set(job.by_rank("clock_offset_ns").values()) == {0, -3_000_000}
    assert not (cache / parse_worker.FRAMES).exists() and not any(cache.parent.glob(".*tmp*"))
    monkeypatch.undo()
    again = diagnose.diagnose(paradiag.open(cache))  # reopened: no frames, the events are read
    assert again.document() == job.diagnosis().document()
    assert all(getattr(again, name).equals(getattr(job.diagnosis(), name)) for name in diagnosis_types.TABLES)


def test_the_maps_frames_are_not_uploaded_to_a_cache_at_a_url(tmp_path: Path) -> None:
    """Ingested into a cache at a URL, the map's frames stay out of the committed generation (they are removed
    before the commit uploads what the parse did not) and the Diagnosis is the one a local cache gets."""
    pytest.importorskip("fsspec")
    store = tmp_path / "store"
    job = paradiag.open(SAMPLES / "gpu_llm_slow_rank", f"file://{store}")
    generation = next(p for p in store.iterdir() if p.is_dir())
    assert (generation / MANIFEST).is_file() and not (generation / parse_worker.FRAMES).exists()
    assert not (job.cache_dir / parse_worker.FRAMES).exists()
    local = paradiag.open(SAMPLES / "gpu_llm_slow_rank", cache_dir=tmp_path / "local")
    assert job.diagnosis().document() == local.diagnosis().document()


def test_typed_objects_round_trip_through_the_cache(tmp_path: Path) -> None:
    job = paradiag.open(SAMPLES / "gpu_moe_expert_imbalance", cache_dir=tmp_path / "cache")
    d = job.diagnosis()
    again = diagnosis_types.load(job.cache_dir)
    assert again is not None
    assert again.document() == d.document()
    assert all(getattr(again, name).equals(getattr(d, name)) for name in diagnosis_types.TABLES)
    assert (
        isinstance(again.findings[0], diagnosis_types.Finding)
        and again.findings[0].kind == "expert_imbalance"
    )
    assert all(f.kind in d.culprits()[r] for f in d.findings for r in f.culprit.ranks)


def test_rank_step_figures_carry_stage_z_scores(tmp_path: Path) -> None:
    d = paradiag.open(SAMPLES / "gpu_llm_slow_rank", cache_dir=tmp_path / "cache").diagnosis()
    figures = d.figures()
    culprit = d.findings[0].culprit.ranks[0]
    step = d.findings[0].step
    assert step is not None
    row = figures[(culprit, step)]
    peers = [r for (r, s), f in figures.items() if s == step and f["stage"] == row["stage"] and r != culprit]
    assert row["compute_z"] > 3 > max(abs(figures[(r, step)]["compute_z"]) for r in peers)
    assert sum(f["caused_ns"] for (r, _), f in figures.items() if r == culprit) > 0


@pytest.mark.parametrize(
    "source",
    [
        "from app import store",
        "import parsers.kineto",
        "from analysis.frame import Frame",
        "import simulator",
    ],
)
def test_bare_imports_of_the_package_folders_are_refused_by_the_linter(source: str) -> None:
    ruff = Path(sys.executable).with_name("ruff")
    result = subprocess.run(
        [str(ruff), "check", "--stdin-filename", "app/example.py", "-"],
        input=source + "\n",
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert result.returncode == 1 and "TID251" in result.stdout, result.stdout


def test_a_finding_field_the_types_do_not_know_is_refused_not_dropped() -> None:
    raw = {
        "kind": "slow_device",
        "culprit": {"ranks": [5]},
        "steps": [1],
        "impact_pct": 3.0,
        "severity": "low",
        "evidence": "e",
        "step": 1,
    }
    assert diagnosis_types.Finding.from_json(raw).as_json() == raw
    with pytest.raises(ValueError, match="Finding has no field cause"):
        diagnosis_types.Finding.from_json({**raw, "cause": "x"})
    with pytest.raises(ValueError, match="Culprit has no field group"):
        diagnosis_types.Finding.from_json({**raw, "culprit": {"group": "g"}})
