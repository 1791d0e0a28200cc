"""Larger inputs (issue 22): a replica whose operators take larger inputs than its peers' same calls, which all take
inputs of one size, works on more data by construction (a bigger local batch, longer sequences, an uneven split),
however little its compute time strays on a shared host. The parser sizes each host operator's tensor inputs from
``record_shapes`` (``Input Dims``, ``Input type``); the rule compares those sizes call for call."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow.compute as pc

import paradiag
from paradiag.analysis import findings
from paradiag.analysis.frame import device_frame
from paradiag.analysis.operators import larger_inputs, per_step_calls
from paradiag.parsers import kineto
from paradiag.parsers.kineto_decode import OperatorInputs, operand_bytes
from paradiag.simulator import SimConfig, parse_fault, simulate
from tests.helpers import host_events

MS = 1_000_000
US = 1_000


def _larger(frame: Any, peers: list[list[int]], host: frozenset[int]) -> dict[int, dict[str, Any]]:
    """larger_inputs of the frame's calls per (rank, step, operator), as the rank detector counts them."""
    return larger_inputs(per_step_calls(frame, host), peers)


def _rows(plan: dict[int, dict[str, list[int]]], calls: int = 5) -> list[dict[str, Any]]:
    """rank -> operator -> its inputs' bytes per step (one entry per step), ``calls`` calls of 100 us each."""
    rows = []
    for rank, ops in plan.items():
        for name, sizes in ops.items():
            for step, size in enumerate(sizes):
                for k in range(calls):
                    rows.append(
                        {
                            "rank": rank,
                            "name": name,
                            "step": step,
                            "start_ns": step * 100 * MS + k * 200 * US + hash(name) % 1000,
                            "dur_ns": 100 * US,
                            "bytes": size,
                        }
                    )
    return rows


def _frame(plan: dict[int, dict[str, list[int]]], calls: int = 5) -> Any:
    return device_frame(host_events(_rows(plan, calls)))


SAME = {"aten::mm": [4000, 4000, 4000], "aten::gelu": [1000, 1000, 1000], "aten::add_": [500, 500, 500]}


def test_a_replica_working_on_more_data_every_step_is_named_with_a_lower_bound_of_that_work() -> None:
    plan = {r: dict(SAME) for r in range(4)}
    # A 1.6x batch: the activations grow 1.6x, the matmul's inputs (activation + weight) less.
    plan[3] = {
        "aten::mm": [4600, 4600, 4600],
        "aten::gelu": [1600, 1600, 1600],
        "aten::add_": [500, 500, 500],
    }
    frame = _frame(plan)
    found = _larger(frame, [[0, 1, 2, 3]], frozenset(range(4)))
    assert set(found) == {3}
    ops = {frame.names[o["name"]]: o for o in found[3]["operators"]}
    assert set(ops) == {"aten::mm", "aten::gelu"}  # the in-place update's inputs are alike: not counted
    assert abs(ops["aten::gelu"]["ratio"] - 1.6) < 1e-9
    # Per step: 5 calls x 0.1 ms of each, times the share of its inputs beyond the peers' (0.375 and 0.13).
    expected = 5 * 100 * US * ((1 - 1000 / 1600) + (1 - 4000 / 4600))
    assert all(abs(ns - expected) < 1 for ns in found[3]["per_step"].values())

    [f] = _findings(frame, 100 * MS, set())
    assert (f.kind, f.culprit.ranks) == ("slow_device", [3])
    assert "gelu 1.60x their input bytes" in f.evidence and "1 more operator larger" in f.evidence
    assert findings.counted(f) and findings.above_host_noise([f]) == [f]  # sized, not timed
    assert abs(f.impact_pct - 100 * expected / (100 * MS)) < 0.01  # rounded to 0.01 %
    # Named already by a finding of its own time, or too little of a long step: nothing more.
    assert _findings(frame, 100 * MS, {3}) == []
    assert _findings(frame, 10_000 * MS, set()) == []


def _findings(frame: Any, step_ns: float, named: set[int]) -> list[Any]:
    peers, host = [[0, 1, 2, 3]], frozenset(range(4))
    return findings.larger_input_findings(
        _larger(frame, peers, host), frame, peers, host, step_ns, 1.0, named
    )


def test_sizes_that_vary_among_peers_in_some_steps_or_a_smaller_operator_are_no_evidence() -> None:
    plan = {r: dict(SAME) for r in range(4)}
    plan[1] = {**SAME, "aten::gelu": [1600, 1000, 1600]}  # not every step
    plan[2] = {
        **SAME,
        "aten::mm": [4600, 4600, 4600],
        "aten::add_": [400, 400, 400],
    }  # one larger, one smaller
    assert _larger(_frame(plan), [[0, 1, 2, 3]], frozenset(range(4))) == {}
    # Sequences of varying length: every rank's sizes differ from step to step and from each other.
    varying = {r: {"aten::gelu": [1000 + 37 * r * (s + 1) for s in range(3)]} for r in range(4)}
    assert _larger(_frame(varying), [[0, 1, 2, 3]], frozenset(range(4))) == {}
    # Alone in its stage: nothing to compare with; calls not sized (-1): nothing either.
    assert _larger(_frame({0: {"aten::gelu": [1600, 1600]}}), [[0]], frozenset({0})) == {}
    unsized = {r: {"aten::gelu": [-1, -1, -1]} for r in range(4)}
    assert _larger(_frame(unsized), [[0, 1, 2, 3]], frozenset(range(4))) == {}


def test_a_replica_calling_an_operator_more_often_is_for_the_extra_calls_rule_not_this_one() -> None:
    plan = {r: dict(SAME) for r in range(4)}
    rows = _rows({r: plan[r] for r in (0, 1, 3)}) + _rows(
        {2: {**SAME, "aten::gelu": [1600, 1600, 1600]}}, calls=7
    )
    # Rank 2 calls gelu 7 times a step, its peers 5: its calls' sizes are not compared (extra_calls counts them).
    assert _larger(device_frame(host_events(rows)), [[0, 1, 2, 3]], frozenset(range(4))) == {}


def test_an_operators_input_bytes_are_its_tensors_and_tensor_lists_not_its_scalars() -> None:
    op = OperatorInputs(
        dims=[[32, 256], [256, 512], [], [[4, 4], [8]], []],
        types=["float", "c10::BFloat16", "Scalar", "TensorList", ""],
        concrete=[],
    )
    assert operand_bytes(op) == 32 * 256 * 4 + 256 * 512 * 2 + (16 + 8) * 4
    assert operand_bytes(OperatorInputs(dims=[[], []], types=["Scalar", "int"], concrete=[])) is None


def _trace(tmp_path: Path, rows: list[int]) -> Path:
    """One CPU rank of a gloo job: a step with three aten::gelu calls on ``rows`` x 256 floats each."""
    events: list[dict[str, Any]] = [
        {
            "ph": "X",
            "cat": "user_annotation",
            "name": "ProfilerStep#1",
            "pid": 1,
            "tid": 1,
            "ts": 0,
            "dur": 10_000,
        }
    ]
    for k, n in enumerate(rows):
        events.append(
            {
                "ph": "X",
                "cat": "cpu_op",
                "name": "aten::gelu",
                "pid": 1,
                "tid": 1,
                "ts": 100 + 1000 * k,
                "dur": 500,
                "args": {
                    "External id": 10 + k,
                    "Input Dims": [[n, 256], []],
                    "Input type": ["float", "Scalar"],
                },
            }
        )
    path = tmp_path / "rank0.json"
    path.write_text(
        json.dumps(
            {
                "distributedInfo": {"backend": "gloo", "rank": 0, "world_size": 2},
                "traceEvents": events,
            }
        )
    )
    return path


def test_the_parser_gives_each_host_operator_and_its_compute_slices_the_bytes_of_its_inputs(
    tmp_path: Path,
) -> None:
    parsed = kineto.parse(_trace(tmp_path, [32, 48, 32]))
    table = parsed.events
    kinds = table.column("kind").cast("string")
    for kind in ("host", "compute"):
        rows = table.filter(
            pc.and_(pc.equal(kinds, kind), pc.equal(table.column("name").cast("string"), "aten::gelu"))
        )
        assert sorted(rows.column("bytes").to_pylist()) == [32 * 256 * 4, 32 * 256 * 4, 48 * 256 * 4]


def _simulated(tmp_path: Path, spec: str, device: str = "cpu", hidden: int = 256) -> list[Any]:
    """A simulated dp4 job shaped as PyTorch 2.x records it, with the fault ``spec``."""
    out = tmp_path / f"job-{device}-{spec.replace(':', '-').replace(',', '-')}"
    simulate(
        SimConfig(
            output=out,
            device=device,
            shape="torch2",
            dp=4,
            tp=1,
            pp=1,
            seed=5,
            faults=(parse_fault(spec),),
            layers=4,
            hidden=hidden,
            heads=16,
            seq_len=128 if device == "cpu" else 1024,
            vocab=1024,
            steps=3,
            microbatches=2,
        )
    )
    return paradiag.open(out, cache_dir=out.with_name(out.name + ".cache")).diagnosis().findings


def test_a_simulated_replica_with_more_data_is_named_by_its_inputs_or_its_time_with_the_cause(
    tmp_path: Path,
) -> None:
    # 5 % more data: its time hardly shows, its inputs do.
    [small] = _simulated(tmp_path, "slow_device:ranks=1,factor=1.05,inputs=1")
    assert (small.kind, small.culprit.ranks) == ("slow_device", [1]) and findings.counted(small)
    assert "1.05x their input bytes" in small.evidence
    # 50 % more: its time shows, and the finding says why.
    top = _simulated(tmp_path, "slow_device:ranks=1,factor=1.5,inputs=1")[0]
    assert (top.kind, top.culprit.ranks) == ("slow_device", [1]) and not findings.counted(top)
    assert "its operators work on more data than its peers'" in top.evidence


def test_on_gpus_a_slow_rank_with_more_data_says_so_and_a_slower_device_does_not(tmp_path: Path) -> None:
    """GPU kernels take their launching operator's input bytes: a timed slow rank is told apart from a slower GPU."""
    [data] = _simulated(tmp_path, "slow_device:ranks=1,factor=1.5,inputs=1", "h100", 2048)
    [device] = _simulated(tmp_path, "slow_device:ranks=1,factor=1.5", "h100", 2048)
    assert (data.kind, data.culprit.ranks) == (device.kind, device.culprit.ranks) == ("slow_device", [1])
    assert "work on more data than its peers'" in data.evidence
    assert "more data" not in device.evidence
