"""Ascend PyTorch profiler (torch_npu) text export: one ``{host}_{pid}_{timestamp}_ascend_pt`` folder per rank.

Shaped like ../shared/traces/npu/msinsight_alexnet_dp8_text_level1: profiler_info_{rank}.json,
profiler_metadata.json, and ASCEND_PROFILER_OUTPUT/ with trace_view.json (string ts, epoch us),
kernel_details.csv, op_statistic.csv, step_trace_time.csv, communication.json, communication_matrix.json.
Big files are appended step by step; the summaries are written at ``finish``.
"""

from __future__ import annotations

import csv
import json
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from paradiag.simulator.engine import Record
from paradiag.simulator.job import Job
from paradiag.simulator.writers import ascend_trace
from paradiag.simulator.writers.common import EPOCH_NS, host_name, pid

OUTPUT = "ASCEND_PROFILER_OUTPUT"
STEP_HEADER = [
    "Step",
    "Computing",
    "Communication(Not Overlapped)",
    "Overlapped",
    "Communication",
    "Free",
    "Stage",
    "Bubble",
    "Communication(Not Overlapped and Exclude Receive)",
    "Preparing",
]
OP_STAT_HEADER = [
    "OP Type",
    "Core Type",
    "Count",
    "Total Time(us)",
    "Min Time(us)",
    "Avg Time(us)",
    "Max Time(us)",
    "Ratio(%)",
]
ROLE_NAMES = {"world": "default_group", "dp": "dp", "tp": "tp", "pp": "pp", "ep": "ep"}


def group_hash(name: str) -> str:
    """HCCL's group id in communication*.json: two 32-bit polynomial hashes (x29, x131) of the group name."""
    high = low = 0
    for ch in name:
        high = (high * 29 + ord(ch)) & 0xFFFFFFFF
        low = (low * 131 + ord(ch)) & 0xFFFFFFFF
    return str(high << 32 | low)


class AscendWriter:
    """Writes each rank's ``*_ascend_pt`` folder under the job folder."""

    def __init__(self, job: Job, out: Path) -> None:
        self.job, self.out = job, out
        self.state: dict[int, ascend_trace.RankState] = {}
        self.group_names = {
            g.index: f"{host_name(job, g.ranks[0])}%eth0_{60000 + g.index}_0_{EPOCH_NS // 1000}"
            for g in job.mesh.groups
        }
        self.group_ids = {i: group_hash(n) for i, n in self.group_names.items()}
        self.op_tags = _unique_tags(self.group_ids)

    def folder(self, rank: int) -> Path:
        stamp = datetime.fromtimestamp(EPOCH_NS / 1e9 + rank * 0.001, UTC).strftime("%Y%m%d%H%M%S%f")[:17]
        return self.out / f"{host_name(self.job, rank)}_{pid(self.job, rank)}_{stamp}_ascend_pt"

    def begin(self, rank: int) -> None:
        folder = self.folder(rank)
        (folder / OUTPUT).mkdir(parents=True, exist_ok=True)
        (folder / "profiler_metadata.json").write_text(json.dumps(self._metadata(rank), indent=4) + "\n")
        state = ascend_trace.RankState(self, rank, folder / OUTPUT)
        self.state[rank] = state
        state.start_files()

    def _metadata(self, rank: int) -> dict[str, Any]:
        cfg, mesh = self.job.cfg, self.job.mesh
        groups = {
            self.group_names[g.index]: {
                "group_name": ROLE_NAMES[g.role],
                "group_rank": g.ranks.index(rank),
                "global_ranks": list(g.ranks),
            }
            for g in mesh.groups_of(rank)
        }
        return {
            "ENV_VARIABLES": {
                "ASCEND_GLOBAL_LOG_LEVEL": "",
                "HCCL_RDMA_TC": "",
                "HCCL_RDMA_SL": "",
                "ACLNN_CACHE_LIMIT": "",
                "HOST_CACHE_CAPACITY": "",
                "ASCEND_ENHANCE_ENABLE": "",
                "PYTORCH_NPU_ALLOC_CONF": "",
                "ASCEND_LAUNCH_BLOCKING": "",
            },
            "distributed_args": {
                "tensor_model_parallel_size": cfg.tp,
                "pipeline_model_parallel_size": cfg.pp,
                "data_parallel_size": cfg.dp,
                "context_parallel_size": 1,
                "expert_model_parallel_size": cfg.ep,
                "sequence_parallel": cfg.tp > 1,
                "rank": rank,
                "world_size": mesh.world,
            },
            "parallel_group_info": groups,
        }

    def write_step(self, rank: int, step: int, records: list[Record]) -> None:
        self.state[rank].write_step(step, records)

    def finish(self, rank: int) -> Path:
        state = self.state.pop(rank)
        out = state.output
        state.close_files()
        with open(out / "step_trace_time.csv", "w", newline="") as f:
            writer = csv.writer(f, lineterminator="\n")
            writer.writerow(STEP_HEADER)
            writer.writerows(state.step_rows)
        _write_op_statistic(out / "op_statistic.csv", state.op_stats)
        _assemble(out / "communication.json", state.comm_parts)
        _assemble(out / "communication_matrix.json", state.matrix_parts)
        folder = out.parent
        (folder / f"profiler_info_{rank}.json").write_text(
            json.dumps(self._info(rank, state), indent=4) + "\n"
        )
        return folder

    def _info(self, rank: int, state: ascend_trace.RankState) -> dict[str, Any]:
        end_ns = EPOCH_NS + round((state.last_us + self.job.clock_offset_us(rank)) * 1000)
        start_cnt = 17238197612056 + rank * 1000
        return {
            "config": {
                "common_config": {
                    "activities": ["ProfilerActivity.CPU", "ProfilerActivity.NPU"],
                    "schedule": {
                        "wait": 0,
                        "active": self.job.cfg.steps,
                        "warmup": 1,
                        "repeat": 1,
                        "skip_first": 5,
                    },
                    "record_shapes": True,
                    "profile_memory": False,
                    "with_stack": False,
                    "with_flops": False,
                    "with_modules": False,
                },
                "experimental_config": {
                    "_profiler_level": "Level1",
                    "_aic_metrics": "ACL_AICORE_PIPE_UTILIZATION",
                    "_l2_cache": False,
                    "_msprof_tx": False,
                    "_data_simplification": True,
                    "record_op_args": False,
                    "_export_type": "text",
                    "_op_attr": False,
                    "_gc_detect_threshold": None,
                },
            },
            "start_info": {
                "syscnt_enable": True,
                "freq": 100,
                "start_cnt": start_cnt,
                "start_monotonic": 172163581670080 + rank * 1000,
            },
            "end_info": {
                "collectionTimeEnd": end_ns,
                "MonotonicTimeEnd": 172163581670080 + rank * 1000 + round(state.last_us * 1000),
            },
            "rank_id": rank,
        }


def _unique_tags(group_ids: dict[int, str]) -> dict[int, str]:
    """The group tag in HCCL op names (``hcom_allReduce__586_0_1``: the id's last digits), unique per job."""
    tags: dict[int, str] = {}
    used: set[str] = set()
    for index, gid in sorted(group_ids.items()):
        width = 3
        while gid[-width:] in used and width < len(gid):
            width += 1
        tags[index] = gid[-width:]
        used.add(tags[index])
    return tags


def _write_op_statistic(path: Path, stats: dict[tuple[str, str], list[float]]) -> None:
    grand = sum(s[1] for s in stats.values()) or 1.0
    rows = sorted(stats.items(), key=lambda kv: -kv[1][1])
    with open(path, "w", newline="") as f:
        writer = csv.writer(f, lineterminator="\n")
        writer.writerow(OP_STAT_HEADER)
        for (op_type, core), (count, total, lo, hi) in rows:
            writer.writerow(
                [
                    op_type,
                    core,
                    int(count),
                    round(total, 3),
                    round(lo, 3),
                    round(total / count, 3),
                    round(hi, 3),
                    round(100 * total / grand, 3),
                ]
            )


def _assemble(path: Path, parts: list[Path]) -> None:
    """``{"step0": {...}, "step1": {...}}`` from the per-step fragments, streamed."""
    with open(path, "w") as out:
        out.write("{")
        for i, part in enumerate(parts):
            out.write("," if i else "")
            out.write(part.read_text())
            os.remove(part)
        out.write("}\n")
