"""Small synthetic Kineto traces for tests that need exact control over the input, and cache comparisons."""

from __future__ import annotations

import csv
import gzip
import json
from pathlib import Path
from typing import Any

import pyarrow as pa

import paradiag
from paradiag import schema
from paradiag.analysis.report import build_report
from paradiag.cache import MANIFEST
from paradiag.parsers import msprof


def kineto_trace(
    rank: int, steps: int = 2, world: int = 2, shift_us: float = 0.0, kernels_per_step: int = 3
) -> dict[str, Any]:
    """A minimal but well-formed PyTorch profiler trace: ProfilerStep annotations, cpu ops, launches,
    compute kernels and one all-reduce per step with its record_param_comms call."""
    events: list[dict[str, Any]] = [
        {"ph": "M", "name": "process_name", "pid": 100 + rank, "tid": 0, "args": {"name": "python3"}},
        {"ph": "M", "name": "process_name", "pid": rank, "tid": 0, "args": {"name": f"GPU {rank}"}},
    ]
    t = 1000.0 + shift_us
    corr = 1
    for step in range(steps):
        step_start = t
        for k in range(kernels_per_step):
            events.append(
                {
                    "ph": "X",
                    "cat": "cpu_op",
                    "name": "aten::mm",
                    "pid": 100 + rank,
                    "tid": 1,
                    "ts": t,
                    "dur": 10,
                    "args": {"External id": corr},
                }
            )
            events.append(
                {
                    "ph": "X",
                    "cat": "cuda_runtime",
                    "name": "cudaLaunchKernel",
                    "pid": 100 + rank,
                    "tid": 1,
                    "ts": t + 1,
                    "dur": 5,
                    "args": {"correlation": corr, "External id": corr},
                }
            )
            events.append(
                {
                    "ph": "X",
                    "cat": "kernel",
                    "name": f"gemm_{k}",
                    "pid": rank,
                    "tid": 7,
                    "ts": t + 20,
                    "dur": 100,
                    "args": {"device": rank, "stream": 7, "correlation": corr, "External id": corr},
                }
            )
            corr += 1
            t += 120
        comm_args = {
            "Collective name": "allreduce",
            "In msg nelems": 1024,
            "Out msg nelems": 1024,
            "dtype": "Float",
            "Group size": world,
            "Process Group Name": "0",
            "Process Group Description": "default_pg",
            "Process Group Ranks": str(list(range(world))),
        }
        events.append(
            {
                "ph": "X",
                "cat": "cpu_op",
                "name": "record_param_comms",
                "pid": 100 + rank,
                "tid": 1,
                "ts": t,
                "dur": 3,
                "args": {"External id": corr, **comm_args},
            }
        )
        events.append(
            {
                "ph": "X",
                "cat": "cuda_runtime",
                "name": "cudaLaunchKernel",
                "pid": 100 + rank,
                "tid": 1,
                "ts": t + 1,
                "dur": 2,
                "args": {"correlation": corr, "External id": corr},
            }
        )
        events.append(
            {
                "ph": "X",
                "cat": "kernel",
                "name": "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
                "pid": rank,
                "tid": 20,
                "ts": t + 10,
                "dur": 50,
                "args": {"device": rank, "stream": 20, "correlation": corr, "External id": corr, **comm_args},
            }
        )
        corr += 1
        t += 80
        events.append(
            {
                "ph": "X",
                "cat": "user_annotation",
                "name": f"ProfilerStep#{step}",
                "pid": 100 + rank,
                "tid": 1,
                "ts": step_start - 1,
                "dur": t - step_start + 1,
                "args": {},
            }
        )
    return {
        "schemaVersion": 1,
        "distributedInfo": {
            "backend": "nccl",
            "rank": rank,
            "world_size": world,
            "pg_config": [
                {
                    "pg_name": "0",
                    "pg_desc": "default_pg",
                    "backend_config": "cuda:nccl",
                    "pg_size": world,
                    "ranks": list(range(world)),
                }
            ],
        },
        "traceEvents": events,
    }


def write_trace(path: Path, doc: dict[str, Any]) -> Path:
    data = json.dumps(doc).encode()
    path.write_bytes(gzip.compress(data) if path.name.endswith(".gz") else data)
    return path


def write_job(folder: Path, ranks: int = 2, **options: Any) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for r in range(ranks):
        write_trace(folder / f"rank{r}.pt.trace.json.gz", kineto_trace(r, world=ranks, **options))
    return folder


def make_prof(job: Path, rank: Path, name: str = "PROF_000001_20250109155803704_ABCDEFGH") -> Path:
    """A CANN msprof PROF_ folder made from a torch_npu ``rank`` folder (no real one is shared): the timeline without
    the Python process (msprof has no framework layer), op_summary with msprof's column names, one step_trace
    iteration."""
    prof = job / name
    out = rank / "ASCEND_PROFILER_OUTPUT"
    output = prof / msprof.OUTPUT
    output.mkdir(parents=True)
    (prof / "device_0").mkdir()
    events = json.loads((out / "trace_view.json").read_bytes())
    python = {e["pid"] for e in events if e.get("ph") == "M" and e.get("args", {}).get("name") == "Python"}
    events = [e for e in events if e.get("pid") not in python]
    half = len(events) // 2  # sliced timeline: msprof_slice_0_*, msprof_slice_1_*
    (output / "msprof_slice_0_20250109160000.json").write_text(json.dumps(events[:half]))
    (output / "msprof_slice_1_20250109160000.json").write_text(json.dumps(events[half:]))
    with (
        open(out / "kernel_details.csv", newline="") as src,
        open(output / "op_summary_20250109160000.csv", "w", newline="") as dst,
    ):
        rename = {"Name": "Op Name", "Type": "OP Type", "Accelerator Core": "Task Type", "Start Time(us)": "Task Start Time(us)",
                  "Duration(us)": "Task Duration(us)", "Wait Time(us)": "Task Wait Time(us)", "Block Dim": "Block Num"}  # fmt: skip
        rows = list(csv.reader(src))
        writer = csv.writer(dst)
        writer.writerow(["Device_id", *(rename.get(h, h) for h in rows[0])])
        writer.writerows([["0", *r] for r in rows[1:]])
    end_us = "1736408883842726.510"
    (output / "step_trace_20250109160000.csv").write_text(
        "Device_id,Iteration ID,FP Start(us),BP End(us),Iteration End(us),Iteration Time(us)\n"
        f"0,50,N/A,N/A,{end_us},155985.8\n"
    )
    return prof


def two_host_job(out: Path, **options: Any) -> Path:
    """A small pipelined job on two hosts whose clocks differ, with a slow rank (so that the findings say
    something): the job the Dask and the remote-cache tests compare caches on."""
    from paradiag.simulator import faults
    from paradiag.simulator.config import SimConfig
    from paradiag.simulator.run import simulate

    injected = tuple(
        faults.parse(f) for f in ("slow_device:ranks=2,factor=1.4", "clock_skew:nodes=1,ms=3.0417")
    )
    config = SimConfig(
        output=out,
        dp=2,
        pp=2,
        layers=2,
        hidden=256,
        heads=4,
        seq_len=128,
        vocab=1024,
        steps=2,
        faults=injected,
        devices_per_node=2,
        **options,
    )
    simulate(config)
    return out


def assert_same_cache(cache: Path, expected: Path) -> None:
    """Every file byte for byte, the manifest but for its creation time; then the same report."""
    files = sorted(p.relative_to(expected) for p in expected.rglob("*") if p.is_file())
    assert sorted(p.relative_to(cache) for p in cache.rglob("*") if p.is_file()) == files
    for rel in files:
        if rel.name != MANIFEST:
            assert (cache / rel).read_bytes() == (expected / rel).read_bytes(), rel
    manifests = [json.loads((c / MANIFEST).read_text()) for c in (cache, expected)]
    for m in manifests:
        m.pop("created")
    assert manifests[0] == manifests[1]
    assert build_report(paradiag.open(cache)) == build_report(paradiag.open(expected))


def host_events(rows: list[dict[str, Any]]) -> pa.Table:
    """An events table of CPU operators (host lanes: ``cpu_op`` compute on rank 0, step 0, no ids) from ``rows``,
    each giving the columns it sets (name, start_ns, dur_ns and any others)."""
    defaults = {
        "rank": 0,
        "device": 0,
        "track": 1,
        "kind": "compute",
        "category": "cpu_op",
        "step": 0,
        "correlation": -1,
        "external_id": -1,
    }
    full = [{**defaults, **r} for r in rows]
    return schema.build(schema.EVENTS, {f.name: [r.get(f.name) for r in full] for f in schema.EVENTS})
