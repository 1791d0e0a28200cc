"""Small synthetic Kineto traces for tests that need exact control over the input."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any


def kineto_trace(rank: int, steps: int = 2, world: int = 2, shift_us: float = 0.0, kernels_per_step: int = 3) -> dict[str, Any]:
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
            events.append({"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 100 + rank, "tid": 1, "ts": t, "dur": 10, "args": {"External id": corr}})
            events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 100 + rank, "tid": 1, "ts": t + 1, "dur": 5, "args": {"correlation": corr, "External id": corr}})
            events.append({"ph": "X", "cat": "kernel", "name": f"gemm_{k}", "pid": rank, "tid": 7, "ts": t + 20, "dur": 100, "args": {"device": rank, "stream": 7, "correlation": corr, "External id": corr}})
            corr += 1
            t += 120
        comm_args = {
            "Collective name": "allreduce", "In msg nelems": 1024, "Out msg nelems": 1024, "dtype": "Float",
            "Group size": world, "Process Group Name": "0", "Process Group Description": "default_pg",
            "Process Group Ranks": str(list(range(world))),
        }
        events.append({"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "pid": 100 + rank, "tid": 1, "ts": t, "dur": 3, "args": {"External id": corr, **comm_args}})
        events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 100 + rank, "tid": 1, "ts": t + 1, "dur": 2, "args": {"correlation": corr, "External id": corr}})
        events.append({"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "pid": rank, "tid": 20, "ts": t + 10, "dur": 50, "args": {"device": rank, "stream": 20, "correlation": corr, "External id": corr, **comm_args}})
        corr += 1
        t += 80
        events.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{step}", "pid": 100 + rank, "tid": 1, "ts": step_start - 1, "dur": t - step_start + 1, "args": {}})
    return {
        "schemaVersion": 1,
        "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": world, "pg_config": [{"pg_name": "0", "pg_desc": "default_pg", "backend_config": "cuda:nccl", "pg_size": world, "ranks": list(range(world))}]},
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
