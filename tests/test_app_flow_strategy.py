"""The execution-flow graph reads MindSpore ``parallel_strategy_{rank}.json`` beside the trace: a bundled NPU sample
job copied to a temporary folder, with a small synthetic strategy file written into one rank's profiler folder."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from paradiag.app.data.flow import flow_data, op_type_key
from paradiag.app.figures.flow import SHARDED, flow_figure
from paradiag.dataset import open_job
from paradiag.side_inputs import strategy_files

SAMPLE = Path(__file__).resolve().parents[1] / "sample_traces" / "npu_slow_link"


def _int(v: int) -> dict[str, Any]:
    return {"dtype": "DT_INT64", "intVal": str(v)}


def _strategy(*vectors: list[int]) -> dict[str, Any]:
    return {
        "dtype": "DT_TUPLE",
        "values": [{"dtype": "DT_TUPLE", "values": [_int(s) for s in vec]} for vec in vectors],
    }


STRATEGY = {
    "config": {"rankId": 0, "stageId": 0, "parallelType": "semi_auto_parallel"},
    "graph": {
        "node": [
            {"name": "1", "opType": "GetNext", "fullName": "Default/GetNext-op1"},
            {
                "name": "2",
                "opType": "Gather",
                "fullName": "Default/embedding/Gather-op2",
                "attribute": [{"name": "in_strategy", "value": _strategy([1, 1], [4, 1])}],
            },
            {
                "name": "3",
                "opType": "MatMul",
                "fullName": "Default/attention/MatMul-op3",
                "attribute": [{"name": "in_strategy", "value": _strategy([4, 1], [1, 1])}],
            },
            {
                "name": "4",
                "opType": "AllReduce",
                "fullName": "Default/AllReduce-op4",
                "attribute": [
                    {"name": "group", "value": {"dtype": "DT_STRING", "strVal": "hccl_world_group"}}
                ],
            },
        ]
    },
}


def _operators(fig: Any) -> Any:
    return next(t for t in fig.data if t.name == "operators")


@pytest.fixture(scope="module")
def job_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("flow-strategy") / "job"
    shutil.copytree(SAMPLE, root)
    rank0 = next(p for p in sorted(root.iterdir()) if p.is_dir() and (p / "profiler_info_0.json").exists())
    (rank0 / "parallel_strategy_0.json").write_text(json.dumps(STRATEGY))
    return root


def test_strategy_files_are_found_two_levels_down(tmp_path: Path) -> None:
    (tmp_path / "a" / "b" / "c").mkdir(parents=True)
    for rel in (
        "parallel_strategy_0.json",
        "a/parallel_strategy_1.json",
        "a/b/parallel_strategy_2.json",
        "a/b/c/parallel_strategy_3.json",
    ):
        (tmp_path / rel).write_text("{}")
    assert [p.name for p in strategy_files(tmp_path)] == [
        "parallel_strategy_0.json",
        "parallel_strategy_1.json",
        "parallel_strategy_2.json",
    ]


def test_trace_names_and_graph_types_compare() -> None:
    assert op_type_key("aclnnMm_MatMulCommon_MatMulV2") == op_type_key("MatMul") == "matmul"
    assert op_type_key("Default/conv1-Conv2d/Conv2D-op2") == "conv2d"
    assert op_type_key("hcom_allReduce__951_0_1") == op_type_key("AllReduce") == "allreduce"
    assert op_type_key("hcom_receive__12_0_1") == op_type_key("Receive") == "receive"
    assert op_type_key("aclnnEmbedding_GatherV2AiCore_GatherV2") == op_type_key("Gather") == "gather"


def test_flow_carries_the_shard_strategy(job_dir: Path, tmp_path: Path) -> None:
    job = open_job(job_dir, tmp_path / "cache")
    data = flow_data(job, 0)
    info = data["strategy"]
    assert info["problems"] == []
    assert len(info["files"]) == 1 and info["files"][0].endswith("parallel_strategy_0.json")
    assert info["matched"] >= 3  # Gather, MatMul and the first all-reduce, matched by type in execution order
    fig = flow_figure(data, "time")
    points = _operators(fig)
    hover = "\n".join(points.hovertext)
    assert "strategy: " in hover
    assert "MatMul [[4,1],[1,1]]" in hover and "Gather [[1,1],[4,1]]" in hover
    assert "AllReduce group hccl_world_group" in hover
    assert SHARDED in list(points.marker.line.color)  # the node holding the sharded MatMul is outlined
    legend = [t.name for t in fig.data if t.showlegend]
    assert "sharded (parallel_strategy, 1 file)" in legend
    expanded = flow_data(job, 0, expand=True)
    assert any(
        "MatMul [[4,1],[1,1]]" in line
        for st in expanded["stages"]
        for n in st["nodes"]
        for line in n.get("strategy", [])
    )


def test_unreadable_strategy_file_is_listed_not_fatal(job_dir: Path, tmp_path: Path) -> None:
    broken = tmp_path / "job"
    shutil.copytree(job_dir, broken)
    (broken / "parallel_strategy_1.json").write_text("{not json")
    job = open_job(broken, tmp_path / "cache")
    data = flow_data(job, 0)
    assert len(data["strategy"]["files"]) == 1
    assert (
        len(data["strategy"]["problems"]) == 1
        and "parallel_strategy_1.json" in data["strategy"]["problems"][0]
    )
    legend = next(t for t in flow_figure(data).data if t.name and t.name.startswith("sharded"))
    assert "not read: parallel_strategy_1.json" in legend.hovertext


def test_without_strategy_nothing_changes(tmp_path: Path) -> None:
    job = open_job(SAMPLE, tmp_path / "cache")
    data = flow_data(job, 0)
    assert "strategy" not in data
    fig = flow_figure(data)
    assert not any("strategy:" in h for h in _operators(fig).hovertext)
    assert not any(t.name and t.name.startswith("sharded") for t in fig.data)
    assert set(_operators(fig).marker.line.color) == {"#555"}
