"""Each fault kind leaves the mark it should, and the ground truth says what was injected."""

from __future__ import annotations

import gzip
import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from paradiag.simulator import SimConfig, parse_fault, simulate
from paradiag.simulator.groundtruth import read as read_truth

BASE = {"steps": 2, "layers": 4, "hidden": 512, "seq_len": 512, "jitter": 0.0}


def _run(tmp: Path, name: str, faults: tuple[str, ...] = (), **options: Any) -> tuple[Path, dict[str, Any]]:
    job = simulate(
        SimConfig(output=tmp / name, faults=tuple(parse_fault(f) for f in faults), **{**BASE, **options})
    )
    return job, read_truth(job)


def _events(job: Path, truth: dict[str, Any], rank: int) -> list[dict[str, Any]]:
    raw = (job / truth["files"][str(rank)]).read_bytes()
    return json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)["traceEvents"]


def _kernels(events: list[dict[str, Any]], collective: str | None = None) -> list[dict[str, Any]]:
    return [e for e in events if e.get("cat") == "kernel" and e["args"].get("Collective name") == collective]


def test_host_stall_delays_the_step_everywhere(tmp_path: Path) -> None:
    job, truth = _run(tmp_path, "stall", ("host_stall:ranks=1,steps=1,ms=30",), dp=4)
    loader = [e for e in _events(job, truth, 1) if e.get("name", "").startswith("enumerate(DataLoader)")]
    assert loader[1]["dur"] > loader[0]["dur"] + 29_000
    for rank in range(4):  # the other ranks wait for rank 1 in the gradient all-reduce
        step0, step1 = truth["step_time_us"][str(rank)]
        assert step1 > step0 + 25_000
    assert truth["faults"] == [{"kind": "host_stall", "ranks": [1], "steps": [1], "ms": 30.0}]


def test_slow_link_slows_the_pair_only(tmp_path: Path) -> None:
    job, truth = _run(
        tmp_path,
        "link",
        ("slow_link:ranks=0-2,factor=5",),
        pp=2,
        dp=2,
        microbatches=2,
        hidden=4096,
        seq_len=2048,
    )
    # ranks 0 -> 2 is a pipeline pair (stage 0 -> 1); ranks 1 -> 3 the other pipeline
    slow = [e["dur"] for e in _kernels(_events(job, truth, 0), "send")]
    fast = [e["dur"] for e in _kernels(_events(job, truth, 1), "send")]
    assert len(slow) == len(fast) > 0
    assert min(slow) > 3 * max(fast)


def test_stage_imbalance_moves_layers_and_compute(tmp_path: Path) -> None:
    job, truth = _run(tmp_path, "imb", ("stage_imbalance:layers=3/1",), pp=2, microbatches=2)
    assert truth["layout"]["layers_per_stage"] == [3, 1]
    assert truth["faults"][0]["stage"] == 0 and truth["faults"][0]["ranks"] == [0]
    _, even = _run(tmp_path, "even", (), pp=2, microbatches=2)
    assert even["layout"]["layers_per_stage"] == [2, 2]
    # stage 0 runs 3 layers instead of 2 (embedding and optimizer unchanged), stage 1 one instead of 2
    flash = [e for e in _kernels(_events(job, truth, 0)) if e["name"].startswith("void flash_fwd")]
    assert len(flash) == 3 * 2 * 2  # layers x micro-batches x steps
    assert truth["compute_us"]["0"][0] > 1.25 * even["compute_us"]["0"][0]
    assert truth["compute_us"]["1"][0] < even["compute_us"]["1"][0]


def test_operator_hotspot_slows_one_operator_on_one_rank(tmp_path: Path) -> None:
    job, truth = _run(tmp_path, "hot", ("operator_hotspot:ranks=1,operator=flash_attention,factor=4",), dp=2)

    def durations(rank: int) -> dict[str, list[float]]:
        out: dict[str, list[float]] = defaultdict(list)
        for e in _kernels(_events(job, truth, rank)):
            out[e["name"]].append(e["dur"])
        return out

    hot, cold = durations(1), durations(0)
    flash = [n for n in hot if n.startswith("void flash_")]
    assert len(flash) == 2
    for name in hot:
        ratio = sum(hot[name]) / sum(cold[name])
        assert ratio == pytest.approx(4.0 if name in flash else 1.0, rel=1e-3)


def test_clock_skew_shifts_one_node(tmp_path: Path) -> None:
    job, truth = _run(tmp_path, "skew", ("clock_skew:nodes=1,ms=7",), dp=2, tp=8)

    def first_step_ts(rank: int) -> float:
        return next(e["ts"] for e in _events(job, truth, rank) if e.get("name") == "ProfilerStep#0")

    # ranks 0 and 8 start their step within a fraction of a millisecond on the true clock
    assert first_step_ts(8) - first_step_ts(0) == pytest.approx(7000, abs=400)
    assert truth["faults"][0]["offset_us"] == 7000 and truth["faults"][0]["ranks"] == list(range(8, 16))


def test_expert_imbalance_loads_the_hot_expert_rank(tmp_path: Path) -> None:
    job, truth = _run(tmp_path, "moe", ("expert_imbalance:ep_rank=1,factor=3",), dp=2, ep=2, microbatches=1)
    assert truth["faults"][0]["ranks"] == [1]

    def received(rank: int) -> list[int]:
        return [e["args"]["Out msg nelems"] for e in _kernels(_events(job, truth, rank), "alltoall_base")]

    hot, cold = received(1), received(0)
    assert hot and hot[0] == 3 * cold[0]
    assert truth["compute_us"]["1"][0] > truth["compute_us"]["0"][0] + 30

    # the cold rank finishes its experts first and waits in the combine all-to-all
    def waited(rank: int) -> float:
        return sum(e["dur"] for e in _kernels(_events(job, truth, rank), "alltoall_base"))

    assert waited(0) > waited(1) + 30


def test_fault_free_run_has_empty_fault_list(tmp_path: Path) -> None:
    _, truth = _run(tmp_path, "clean", (), dp=2)
    assert truth["faults"] == []


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        ({"pp": 4, "schedule": "gpipe", "microbatches": 3}, "gpipe"),
        ({"pp": 4, "microbatches": 6}, "1f1b"),
        (
            {
                "pp": 2,
                "tp": 2,
                "schedule": "interleaved",
                "virtual_stages": 2,
                "microbatches": 4,
                "layers": 8,
            },
            "interleaved",
        ),
    ],
)
def test_schedules_run_and_each_stage_does_all_micro_batches(
    tmp_path: Path, options: dict[str, Any], expected: str
) -> None:
    job, truth = _run(tmp_path, expected, (), steps=1, **options)
    assert truth["schedule"]["kind"] == expected
    m, v = truth["schedule"]["microbatches"], truth["schedule"]["virtual_stages"]
    pp = truth["layout"]["pp"]
    for rank in range(truth["layout"]["world_size"]):
        stage = truth["layout"]["stages"][rank]
        recvs = _kernels(_events(job, truth, rank), "recv")
        sends = _kernels(_events(job, truth, rank), "send")
        first, last = stage == 0, stage == pp - 1
        # every chunk receives activations unless it is the model's first, gradients unless the model's last
        assert len(recvs) == m * (2 * v - (1 if first else 0) - (1 if last else 0))
        assert len(sends) == len(recvs)
