"""The execution-flow graph stays readable whatever the pipeline: the passes of one direction are one block of
micro-batches, a stage's row opens with at most ``VISIBLE`` nodes, and blocks open one at a time. Cases of that
class: 1F1B, GPipe and interleaved schedules, different layer counts, jobs without a pipeline, the NPU sample."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import paradiag
from paradiag.app.data.common import slowest_step
from paradiag.app.data.flow import VISIBLE, flow_data, flow_view

SMALL = ["--steps", "1", "--hidden", "256", "--seq-len", "128", "--vocab", "1024", "--seed", "3"]
PIPELINES = {
    "1f1b": [
        "--dp",
        "2",
        "--tp",
        "2",
        "--pp",
        "4",
        "--schedule",
        "1f1b",
        "--microbatches",
        "12",
        "--layers",
        "8",
    ],
    "gpipe": [
        "--dp",
        "1",
        "--tp",
        "2",
        "--pp",
        "4",
        "--schedule",
        "gpipe",
        "--microbatches",
        "8",
        "--layers",
        "12",
    ],
    "interleaved": [
        "--pp",
        "2",
        "--schedule",
        "interleaved",
        "--virtual-stages",
        "2",
        "--microbatches",
        "8",
        "--layers",
        "8",
    ],
}


def _simulate(root: Path, args: list[str]) -> Any:
    from paradiag.simulator.cli import simulate

    out = root / "job"
    result = CliRunner().invoke(simulate, [*args, *SMALL, "--quiet", "-o", str(out)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return paradiag.open(out, cache_dir=root / "cache")


def _all_nodes(nodes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [m for n in nodes for m in [n, *_all_nodes(n.get("members", []))]]


@pytest.mark.parametrize("schedule", sorted(PIPELINES))
def test_each_direction_of_a_pipeline_is_one_block_of_its_passes(tmp_path: Path, schedule: str) -> None:
    job = _simulate(tmp_path, PIPELINES[schedule])
    data = flow_data(job, slowest_step(job))
    passes = job.diagnosis().passes.to_pylist()
    for st in data["stages"]:
        assert 0 < len(st["nodes"]) <= VISIBLE
        mine = [p for p in passes if p["rank"] == st["ranks"][0] and p["step"] == data["step"]]
        drawn = [n["label"] for n in _all_nodes(st["nodes"]) if " micro-batch " in n["label"]]
        for direction in ("forward", "backward"):  # every pass of the analysis, once
            assert sum(1 for label in drawn if label.startswith(direction)) == sum(
                1 for p in mine if p["direction"] == direction
            )
        tops = [n["label"] for n in st["nodes"] if " ×" in n["label"] and "micro-batches" in n["label"]]
        assert len(tops) == len(set(tops))  # one block per direction (and model chunk)
    opened = flow_view(
        job, data["step"], [next(n["key"] for n in data["stages"][-1]["nodes"] if n["kind"] == "block")]
    )
    assert len(opened["stages"][-1]["nodes"]) > len(data["stages"][-1]["nodes"])  # a click opens one block


def test_more_layers_lengthen_a_pass_not_the_row(tmp_path: Path) -> None:
    rows = []
    for layers in ("4", "16"):
        job = _simulate(
            tmp_path / layers, ["--pp", "2", "--tp", "2", "--microbatches", "6", "--layers", layers]
        )
        data = flow_data(job, slowest_step(job))
        rows.append([len(st["nodes"]) for st in data["stages"]])
        deepest = max(len(_all_nodes(st["nodes"])) for st in data["stages"])
        assert deepest > max(rows[-1])  # what is collapsed is still there, one click away
    assert rows[0] == rows[1]


@pytest.mark.parametrize(
    "name",
    [
        "npu_pangu_pipeline_stage_imbalance",
        "gpu_llm_fault_free",
        "gpu_resnet50_dp_host_stall",
        "npu_slow_link",
        "gpu_moe_expert_imbalance",
    ],
)
def test_samples_open_within_the_visible_budget(name: str) -> None:
    job = paradiag.open(f"sample_traces/{name}")
    data = flow_data(job, slowest_step(job))
    assert all(0 < len(st["nodes"]) <= VISIBLE for st in data["stages"])
    keys = [n["key"] for st in data["stages"] for n in _all_nodes(st["nodes"]) if n["kind"] == "block"]
    assert len(keys) == len(set(keys))  # every block opens on its own
