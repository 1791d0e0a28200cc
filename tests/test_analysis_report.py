"""The report JSON against its documented schema (docs/report.schema.json), on every bundled sample job and on
the real traces; and the slow rank of the aggregated 16-rank Ascend cluster result."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

import paradiag
from paradiag.analysis.cluster_csv import read_cluster_step_trace_time, slow_rank
from paradiag.analysis.report import build_report
from tests.conftest import REPO, shared_path

SCHEMA = json.loads((REPO / "docs" / "report.schema.json").read_text())
SAMPLES = sorted(p.name for p in (REPO / "sample_traces").iterdir() if (p / "ground_truth.json").exists())


def validate(report: dict) -> None:
    # Round-trip through JSON first: the schema speaks of JSON, not of numpy scalars.
    jsonschema.validate(json.loads(json.dumps(report, default=lambda v: v.item())), SCHEMA)


@pytest.mark.parametrize("name", SAMPLES)
def test_sample_report_matches_schema(name: str) -> None:
    report = build_report(paradiag.open(REPO / "sample_traces" / name))
    validate(report)
    truth = json.loads((REPO / "sample_traces" / name / "ground_truth.json").read_text())["faults"]
    kinds = [f["kind"] for f in report["findings"]]
    for fault in truth:
        assert fault["kind"] in kinds, (name, report["findings"])


def test_schema_rejects_an_unknown_finding_kind() -> None:
    report = build_report(paradiag.open(REPO / "sample_traces" / "gpu_llm_slow_rank"))
    report["findings"][0]["kind"] = "bad_luck"
    with pytest.raises(jsonschema.ValidationError):
        validate(report)


@pytest.mark.real
@pytest.mark.parametrize(
    "folder",
    ["gpu/hta_nccl_2rank_job", "gpu/kineto_legacy_resnet50", "npu/msinsight_alexnet_dp8_text_level1"],
)
def test_real_trace_report_matches_schema(folder: str) -> None:
    report = build_report(paradiag.open(shared_path(*folder.split("/"))))
    validate(report)
    assert report["job"]["parallel_layout"]["found_by"]


@pytest.mark.real
def test_cluster16_slow_rank_agrees_with_the_numbers() -> None:
    """In stage (0..7) rank 5 has both the most time of its own (computing + free) and the least exposed
    communication: the others wait for it. Checked here straight from the CSV's columns."""
    folder = shared_path("npu", "msinsight_cluster16_aggregated")
    table, stages = read_cluster_step_trace_time(folder)
    assert stages == [list(range(8)), list(range(8, 16))]
    found = slow_rank(table, stages)
    assert found is not None
    rows = {r["rank"]: r for r in table.to_pylist()}
    stage = found["stage_ranks"]
    own = {r: rows[r]["computing_ns"] + rows[r]["free_ns"] for r in stage}
    exposed = {r: rows[r]["communication_not_overlapped_ns"] for r in stage}
    assert found["rank"] == max(own, key=own.__getitem__) == min(exposed, key=exposed.__getitem__) == 5
    assert found["kind"] == "host_stall"  # its extra own time is Free (71.9 ms vs a stage median of 67.8 ms)


def test_sample_folder_list_is_not_empty() -> None:
    assert SAMPLES, Path(REPO / "sample_traces")
