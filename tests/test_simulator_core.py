"""The simulator's engine and Kineto output: dependencies, faults, determinism, and the parser reading it."""

from __future__ import annotations

import gzip
import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from paradiag.parsers import kineto
from paradiag.simulator import SimConfig, parse_fault, simulate
from paradiag.simulator.groundtruth import read as read_truth

SMALL = {
    "dp": 2,
    "tp": 2,
    "pp": 2,
    "microbatches": 4,
    "steps": 2,
    "layers": 4,
    "hidden": 1024,
    "seq_len": 1024,
}


def _job(tmp: Path, name: str, faults: tuple[str, ...] = (), **options: Any) -> Path:
    cfg = SimConfig(output=tmp / name, faults=tuple(parse_fault(f) for f in faults), **{**SMALL, **options})
    return simulate(cfg)


def _trace_files(job: Path) -> dict[int, Path]:
    truth = read_truth(job)
    return {int(r): job / f for r, f in truth["files"].items()}


def _load(path: Path) -> dict[str, Any]:
    raw = path.read_bytes()
    return json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)


def _raw_events(path: Path) -> list[dict[str, Any]]:
    return _load(path)["traceEvents"]


@pytest.fixture(scope="module")
def slow_job(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _job(tmp_path_factory.mktemp("sim"), "slow", ("slow_device:ranks=5,factor=1.5",), jitter=0.0)


def test_parser_reads_every_rank(slow_job: Path) -> None:
    files = _trace_files(slow_job)
    assert sorted(files) == list(range(8))
    for rank, path in files.items():
        parsed = kineto.parse(path)
        assert parsed.rank == rank and parsed.world_size == 8 and parsed.device == rank % 8
        assert parsed.warnings == []
        assert parsed.steps.column("step").to_pylist() == [0, 1]
        events = parsed.events
        comm = events.filter(pc.equal(events.column("kind").cast(pa.string()), "communication"))
        collectives = set(comm.column("collective").cast(pa.string()).to_pylist())
        assert {"all_gather", "reduce_scatter", "all_reduce", "broadcast"} <= collectives
        assert ("send" in collectives) and ("recv" in collectives)
        assert pc.all(pc.is_valid(comm.column("group"))).as_py()
        described = {g.description for g in parsed.groups}
        assert {
            "default_pg",
            "DATA_PARALLEL_GROUP",
            "TENSOR_MODEL_PARALLEL_GROUP",
            "PIPELINE_MODEL_PARALLEL_GROUP",
        } <= described


def _kernel_durations(path: Path) -> dict[str, list[float]]:
    out: dict[str, list[float]] = defaultdict(list)
    for e in _raw_events(path):
        if e.get("cat") == "kernel" and not e["name"].startswith("nccl"):
            out[e["name"]].append(e["dur"])
    return out


def test_slow_device_kernels_are_factor_longer(slow_job: Path) -> None:
    files = _trace_files(slow_job)
    slow, peer = _kernel_durations(files[5]), _kernel_durations(files[4])  # same stage, same work
    assert slow.keys() == peer.keys()
    for name in slow:
        for a, b in zip(slow[name], peer[name], strict=True):
            assert a == pytest.approx(1.5 * b, rel=2e-3, abs=2e-3)


def _collective_ends(path: Path) -> dict[tuple[str, int], float]:
    """End time (us after the shared base time) of each collective kernel, by (process group, order in it)."""
    counters: dict[str, int] = defaultdict(int)
    out = {}
    data = _load(path)
    for e in sorted(
        (e for e in data["traceEvents"] if e.get("cat") == "kernel" and "Collective name" in e["args"]),
        key=lambda e: e["ts"],
    ):
        if e["args"]["Collective name"] in ("send", "recv"):
            continue
        group = e["args"]["Process Group Name"]
        out[(group, counters[group])] = e["ts"] + e["dur"]
        counters[group] += 1
    return out


def test_collective_ends_together_on_culprit_and_victims(slow_job: Path) -> None:
    files = _trace_files(slow_job)
    ends = {r: _collective_ends(p) for r, p in files.items()}
    truth = read_truth(slow_job)
    waited = 0
    for group in truth["layout"]["groups"]:
        if group["role"] not in ("tp", "dp") or 5 not in group["ranks"]:
            continue
        mine = {k: v for k, v in ends[5].items() if k[0] == group["name"]}
        assert mine
        for other in group["ranks"]:
            for key, end in mine.items():
                assert ends[other][key] == pytest.approx(end, abs=2e-3)
        waited += 1
    assert waited == 2


def test_victims_wait_for_the_slow_rank(slow_job: Path) -> None:
    """The peer in rank 5's tensor-parallel group spends longer in collectives than an unaffected pair does."""
    files = _trace_files(slow_job)

    def comm_time(rank: int) -> float:
        return sum(
            e["dur"]
            for e in _raw_events(files[rank])
            if e.get("cat") == "kernel"
            and e["args"].get("Collective name") in ("_allgather_base", "_reduce_scatter_base")
        )

    assert comm_time(4) > 1.5 * comm_time(6)


def test_recv_ends_after_matching_send_starts(slow_job: Path) -> None:
    files = _trace_files(slow_job)
    sends: dict[tuple[int, int], list[float]] = defaultdict(list)
    recvs: dict[tuple[int, int], list[float]] = defaultdict(list)
    for rank, path in files.items():
        for e in _raw_events(path):
            if e.get("cat") == "kernel" and e["args"].get("Collective name") in ("send", "recv"):
                ranks = json.loads(e["args"]["Process Group Ranks"])
                peer = ranks[e["args"]["Rank"]]
                if e["args"]["Collective name"] == "send":
                    sends[(rank, peer)].append(e["ts"])
                else:
                    recvs[(peer, rank)].append(e["ts"] + e["dur"])
    assert sends and sends.keys() == recvs.keys()
    for pair, starts in sends.items():
        ends = recvs[pair]
        assert len(starts) == len(ends)
        # every receive completes after some send of that pair started (the data came from somewhere)
        assert min(ends) > min(starts)
        assert all(any(s <= end for s in starts) for end in ends)


def test_same_seed_same_bytes_other_seed_differs(tmp_path: Path) -> None:
    a = _job(tmp_path, "a", ("host_stall:ranks=1,steps=1,ms=5",), seed=3, gzip=True)
    b = _job(tmp_path, "b", ("host_stall:ranks=1,steps=1,ms=5",), seed=3, gzip=True)
    c = _job(tmp_path, "c", ("host_stall:ranks=1,steps=1,ms=5",), seed=4, gzip=True)
    names = sorted(p.name for p in a.iterdir())
    assert names == sorted(p.name for p in b.iterdir())
    for name in names:
        assert (a / name).read_bytes() == (b / name).read_bytes(), name
    trace_a = sorted(a.glob("rank0.*"))[0].read_bytes()
    trace_c = sorted(c.glob("rank0.*"))[0].read_bytes()
    assert trace_a != trace_c


def test_ground_truth_records_layout_and_faults(slow_job: Path) -> None:
    truth = read_truth(slow_job)
    assert truth["layout"]["world_size"] == 8 and truth["layout"]["stages"] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert truth["schedule"] == {"kind": "1f1b", "microbatches": 4, "virtual_stages": 1, "steps": [0, 1]}
    assert truth["faults"] == [{"kind": "slow_device", "ranks": [5], "factor": 1.5}]
    assert set(truth["step_time_us"]) == {str(r) for r in range(8)}
