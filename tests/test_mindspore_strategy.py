"""MindSpore ``parallel_strategy_{rank}.json``: the real upstream samples (MindInsight's test resources) and
synthetic files for what they lack (communication ops, peers, broken input)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from paradiag.parsers.base import TraceError
from paradiag.parsers.mindspore_strategy import SCHEMA, read_parallel_strategy
from tests.conftest import shared_path


def _int(v: int) -> dict[str, Any]:
    return {"dtype": "DT_INT64", "intVal": str(v)}


def _tuple(*values: Any) -> dict[str, Any]:
    return {"dtype": "DT_TUPLE", "values": list(values)}


def _strategy(*vectors: list[int]) -> dict[str, Any]:
    return _tuple(*(_tuple(*(_int(s) for s in vec)) for vec in vectors))


def test_real_files_rank_0_and_1() -> None:
    path = shared_path("paper_system", "upstream", "parallel_strategy_0.json")
    t0 = read_parallel_strategy(path)
    t1 = read_parallel_strategy(path.with_name("parallel_strategy_1.json"))
    assert t0.schema.equals(SCHEMA, check_metadata=False)
    assert t0.schema.metadata[b"parallel_type"] == b"auto_parallel"
    for rank, t in ((0, t0), (1, t1)):
        rows = t.to_pylist()
        assert len(rows) == 2  # GetNext and Conv2D
        assert [r["rank"] for r in rows] == [rank, rank]
        assert [r["stage"] for r in rows] == [0, 0]
        assert [r["op_type"] for r in rows] == ["GetNext", "Conv2D"]
        assert [r["op"] for r in rows] == ["Default/GetNext-op767", "Default/conv1-Conv2d/Conv2D-op2"]
        assert [r["scope"] for r in rows] == ["Default", "Default/conv1-Conv2d"]
        get_next, conv = rows
        assert get_next["strategy"] is None and get_next["splits"] is None and not get_next["sharded"]
        assert conv["strategy"] == "[[2,1,1,1],[1,1,1,1]]"  # batch split 2 ways over the 2 devices
        assert conv["splits"] == [[2, 1, 1, 1], [1, 1, 1, 1]]
        assert conv["strategy_attr"] == "gen_strategy"
        assert conv["sharded"]
        assert (
            conv["parallel_group"] is None
        )  # Conv2D's integer "group" attribute is not a communication group
        assert not any(r["is_communication"] for r in rows)
        assert all(r["peer"] is None for r in rows)


def test_communication_ops_groups_and_peers(tmp_path: Path) -> None:
    doc = {
        "config": {"rankId": "4", "stageId": 1},
        "graph": {
            "node": [
                {
                    "name": "1",
                    "opType": "MatMul",
                    "fullName": "Default/MatMul-op1",
                    "attribute": [
                        {"name": "in_strategy", "value": _strategy([1, 4], [4, 1])},
                        {"name": "gen_strategy", "value": _strategy([2, 2], [2, 1])},
                    ],
                },
                {
                    "name": "2",
                    "opType": "AllReduce",
                    "fullName": "Default/AllReduce-op2",
                    "attribute": [
                        {"name": "group", "value": {"dtype": "DT_STRING", "strVal": "4-5-6-7"}},
                        {"name": "group_rank_ids", "value": _tuple(*(_int(r) for r in (4, 5, 6, 7)))},
                    ],
                },
                {
                    "name": "3",
                    "opType": "Send",
                    "fullName": "Default/Send-op3",
                    "attribute": [{"name": "dest_rank", "value": _int(0)}],
                },
                {"name": "4", "opType": "Receive", "attribute": [{"name": "src_rank", "value": _int(8)}]},
                {
                    "name": "5",
                    "opType": "Add",
                    "instance_type": "Redistribution",
                    "attribute": [{"name": "strategy", "value": _strategy([1], [1])}],
                },
                "not a node",
            ]
        },
    }
    path = tmp_path / "parallel_strategy_4.json"
    path.write_text(json.dumps(doc))
    rows = read_parallel_strategy(path).to_pylist()
    assert len(rows) == 5
    mm, ar, send, recv, add = rows
    assert mm["strategy"] == "[[1,4],[4,1]]" and mm["strategy_attr"] == "in_strategy" and mm["sharded"]
    assert (mm["rank"], mm["stage"]) == (4, 1)
    assert ar["is_communication"] and ar["parallel_group"] == "4-5-6-7" and ar["group_ranks"] == "4,5,6,7"
    assert send["is_communication"] and send["peer"] == 0
    assert recv["is_communication"] and recv["peer"] == 8 and recv["op"] == "4"  # no fullName: the node id
    assert add["strategy"] == "[[1],[1]]" and not add["sharded"] and add["instance_type"] == "Redistribution"


def test_missing_fields_are_nulls(tmp_path: Path) -> None:
    path = tmp_path / "parallel_strategy_3.json"
    path.write_text(json.dumps({"graph": {"node": [{"opType": "Cast"}]}}))
    (row,) = read_parallel_strategy(path).to_pylist()
    assert row["rank"] == 3  # from the file name
    assert row["stage"] is None and row["op"] is None and row["strategy"] is None and not row["sharded"]
    path.write_text(json.dumps({"config": {"rankId": 0}}))
    assert read_parallel_strategy(path).num_rows == 0


@pytest.mark.parametrize("content", ["{not json", "[1, 2]", '{"traceEvents": []}'])
def test_unreadable_files_name_the_file(tmp_path: Path, content: str) -> None:
    path = tmp_path / "parallel_strategy_0.json"
    path.write_text(content)
    with pytest.raises(TraceError) as err:
        read_parallel_strategy(path)
    assert str(path) in str(err.value)
    with pytest.raises(TraceError, match=r"parallel_strategy_9\.json"):
        read_parallel_strategy(tmp_path / "parallel_strategy_9.json")
