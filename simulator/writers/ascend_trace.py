"""One rank's Ascend output, step by step: trace_view.json events, kernel_details.csv rows, and the per-step
summaries (overlap, step trace, communication) the writer assembles at the end."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

from paradiag.simulator import kernels
from paradiag.simulator.engine import DTYPE_BYTES, Record
from paradiag.simulator.writers import ascend_tables as tables
from paradiag.simulator.writers.common import EPOCH_NS, escape, pid

if TYPE_CHECKING:
    from paradiag.simulator.writers.ascend import AscendWriter

HARDWARE, CANN, HCCL, OVERLAP = 3170820512, 3170820320, 3170820576, 3170820832
STREAMS = {"compute": 2, "tp": 4, "dp": 5, "pp": 6, "ep": 7, "world": 8}
HOST_COMM = {
    "allreduce": "HcclAllreduce",
    "_allgather_base": "HcclAllgather",
    "_reduce_scatter_base": "HcclReduceScatter",
    "alltoall_base": "HcclAlltoAllV",
    "broadcast": "HcclBroadcast",
    "send": "HcclSend",
    "recv": "HcclRecv",
}
MATRIX_TYPE = {
    "allreduce": "allreduce",
    "_allgather_base": "allgather",
    "_reduce_scatter_base": "reducescatter",
    "alltoall_base": "alltoallv",
    "broadcast": "broadcast",
    "send": "send",
    "recv": "receive",
}
KERNEL_HEADER = [
    "Step Id",
    "Model ID",
    "Task ID",
    "Stream ID",
    "Name",
    "Type",
    "OP State",
    "Accelerator Core",
    "Start Time(us)",
    "Duration(us)",
    "Wait Time(us)",
    "Block Dim",
    "Mix Block Dim",
    "HF32 Eligible",
    "Input Shapes",
    "Input Data Types",
    "Input Formats",
    "Output Shapes",
    "Output Data Types",
    "Output Formats",
    "Context ID",
    "aicore_time(us)",
    "aic_total_cycles",
    "aic_mac_time(us)",
    "aic_mac_ratio",
    "aic_scalar_time(us)",
    "aic_scalar_ratio",
    "aic_mte1_time(us)",
    "aic_mte1_ratio",
    "aic_mte2_time(us)",
    "aic_mte2_ratio",
    "aic_fixpipe_time(us)",
    "aic_fixpipe_ratio",
    "aic_icache_miss_rate",
    "aiv_time(us)",
    "aiv_total_cycles",
    "aiv_vec_time(us)",
    "aiv_vec_ratio",
    "aiv_scalar_time(us)",
    "aiv_scalar_ratio",
    "aiv_mte2_time(us)",
    "aiv_mte2_ratio",
    "aiv_mte3_time(us)",
    "aiv_mte3_ratio",
    "aiv_icache_miss_rate",
    "cube_utilization(%)",
]
NA_METRICS = ["N/A"] * 25


class RankState:
    """Counters and open parts of one rank's folder."""

    def __init__(self, writer: AscendWriter, rank: int, output: Path) -> None:
        self.w, self.job, self.rank, self.output = writer, writer.job, rank, output
        self.pid = pid(self.job, rank)
        self.cann_tid = self.pid + 3
        self.shift_ns = round(self.job.clock_offset_us(rank) * 1000)
        self.conn = 1000
        self.task_ids: dict[int, int] = {}
        self.stream_last: dict[int, float] = {}
        self.op_counter: dict[tuple[int, str], int] = {}
        self.group_tid = {g.index: 100 + k for k, g in enumerate(self.job.mesh.groups_of(rank))}
        self.op_stats: dict[tuple[str, str], list[float]] = {}
        self.step_rows: list[list[Any]] = []
        self.comm_parts: list[Path] = []
        self.matrix_parts: list[Path] = []
        self.last_us = 0.0
        self.names: dict[str, str] = {}

    # ---- files -----------------------------------------------------------------------------------------------
    def start_files(self) -> None:
        with open(self.output / "trace_view.json", "w") as f:
            f.write("[\n" + ",\n".join(self._metadata()))
        with open(self.output / "kernel_details.csv", "w", newline="") as f:
            csv.writer(f, lineterminator="\n").writerow(KERNEL_HEADER)
        with open(self.output / "npu_module_mem.csv", "w", newline="") as f:
            f.write("Component,Timestamp(us),Total Reserved(MB),Device\n")

    def close_files(self) -> None:
        with open(self.output / "trace_view.json", "a") as f:
            f.write("\n]\n")

    def _metadata(self) -> list[str]:
        m = []
        for p, name, label, index in (
            (self.pid, "Python", "CPU", 0),
            (CANN, "CANN", "CPU", 6),
            (HARDWARE, "Ascend Hardware", "NPU", 13),
            (HCCL, "HCCL", "NPU", 15),
            (OVERLAP, "Overlap Analysis", "NPU", 27),
        ):
            m.append(
                f'{{"ph": "M", "name": "process_name", "pid": {p}, "tid": 0, "args": {{"name": "{name}"}}}}'
            )
            m.append(
                f'{{"ph": "M", "name": "process_labels", "pid": {p}, "tid": 0, "args": {{"labels": "{label}"}}}}'
            )
            m.append(
                f'{{"ph": "M", "name": "process_sort_index", "pid": {p}, "tid": 0, "args": {{"sort_index": {index}}}}}'
            )
        threads = [
            (self.pid, self.pid, f"Thread {self.pid}"),
            (CANN, self.cann_tid, f"Thread {self.cann_tid}"),
        ]
        threads += [(HARDWARE, s, f"Stream {s}") for s in sorted(set(STREAMS.values()))]
        threads += [(HCCL, tid, f"Group {k} Communication") for k, tid in enumerate(self.group_tid.values())]
        threads += [(HCCL, 1, "Plane 0")]
        threads += [
            (OVERLAP, i, n)
            for i, n in enumerate(("Computing", "Communication", "Communication(Not Overlapped)", "Free"))
        ]
        for p, tid, name in threads:
            m.append(
                f'{{"ph": "M", "name": "thread_name", "pid": {p}, "tid": {tid}, "args": {{"name": "{name}"}}}}'
            )
            m.append(
                f'{{"ph": "M", "name": "thread_sort_index", "pid": {p}, "tid": {tid}, "args": {{"sort_index": {tid}}}}}'
            )
        return m

    def ts(self, us: float) -> str:
        ns = EPOCH_NS + round(us * 1000) + self.shift_ns
        return f'"{ns // 1000}.{ns % 1000:03d}"'

    def epoch_us(self, us: float) -> float:
        return (EPOCH_NS + self.shift_ns) / 1000 + us

    def _q(self, text: str) -> str:
        q = self.names.get(text)
        if q is None:
            q = self.names[text] = escape(text)
        return q

    # ---- one step --------------------------------------------------------------------------------------------
    def write_step(self, step: int, records: list[Record]) -> None:
        r = StepRender(self, step)
        for rec in records:
            r.render(rec)
        r.summaries(records[0])
        self.last_us = max(self.last_us, records[0][2] + records[0][3])
        with open(self.output / "trace_view.json", "a") as f:
            f.write(",\n" + ",\n".join(r.events))
        with open(self.output / "kernel_details.csv", "a", newline="") as f:
            csv.writer(f, lineterminator="\n").writerows(r.kernel_rows)
        with open(self.output / "npu_module_mem.csv", "a") as f:  # where readers find the NPU id ("NPU:3")
            f.write(
                f"APP,{self.ts(records[0][2])[1:-1]}\t,{18432.0 + 64 * step:.1f},NPU:{self.job.mesh.local_device(self.rank)}\n"
            )
        for parts, name, data in (
            (self.comm_parts, "communication", r.comm),
            (self.matrix_parts, "communication_matrix", r.matrix),
        ):
            part = self.output / f".{name}.step{step}.part"
            part.write_bytes(
                f'"step{step}": '.encode() + msgspec.json.format(msgspec.json.encode(data), indent=1)
            )
            parts.append(part)


class StepRender:
    """Renders one step of one rank and gathers what the summaries need."""

    def __init__(self, state: RankState, step: int) -> None:
        self.s, self.step = state, step
        self.events: list[str] = []
        self.kernel_rows: list[list[Any]] = []
        self.compute: list[tuple[float, float]] = []
        self.comm_spans: list[tuple[float, float]] = []
        self.bubble = 0.0
        self.comm: dict[str, dict[str, Any]] = {"p2p": {}, "collective": {}}
        self.matrix_instances: dict[tuple[str, str, str], list[tuple[str, dict[str, Any]]]] = {}
        self.matrix: dict[str, dict[str, Any]] = {"p2p": {}, "collective": {}}

    def event(self, name: str, p: int, tid: int, ts: float, dur: float, args: str, cat: str = "") -> None:
        c = f'"cat": "{cat}", ' if cat else ""
        self.events.append(
            f'{{"ph": "X", "name": {self.s._q(name)}, "pid": {p}, "tid": {tid}, "ts": {self.s.ts(ts)}, "dur": {dur:.3f}, {c}"args": {{{args}}}}}'
        )

    def cpu(self, name: str, ts: float, dur: float) -> None:
        self.event(
            name, self.s.pid, self.s.pid, ts, dur, '"Sequence number": -1, "Fwd thread id": 0', "cpu_op"
        )

    def render(self, rec: Record) -> None:
        code = rec[0]
        if code in ("P", "H", "A"):
            self.cpu(rec[1], rec[2], rec[3])
        elif code == "K":
            self._kernel(rec)
        elif code == "M":
            self.cpu("aten::copy_", rec[2], rec[3])
            cid = self.launch(rec, "AscendCL@aclrtMemcpyAsync")
            self.task(rec, "MEMCPY_ASYNC", "PCIE_DMA_SQE", cid)
        elif code in ("C", "S", "R"):
            from paradiag.simulator.writers.ascend_comm import render_comm

            render_comm(self, rec)

    def launch(self, rec: Record, api: str) -> int:
        s = self.s
        s.conn += 1
        cid = s.conn
        self.event(
            api,
            CANN,
            s.cann_tid,
            rec[4],
            rec[5],
            f'"Thread Id": {s.cann_tid}, "Mode": "launch", "level": "node", "id": "0", "item_id": "0", "connection_id": {cid}',
        )
        self.events.append(
            f'{{"ph": "s", "name": "HostToDevice{cid}", "cat": "HostToDevice", "id": "{cid}", "pid": {CANN}, "tid": {s.cann_tid}, "ts": {s.ts(rec[4])}}}'
        )
        return cid

    def task(
        self,
        rec: Record,
        name: str,
        task_type: str,
        cid: int,
        start: float | None = None,
        dur: float | None = None,
        stream: int | None = None,
    ) -> int:
        s = self.s
        stream = STREAMS[rec[8]] if stream is None else stream
        start = rec[6] if start is None else start
        dur = rec[7] if dur is None else dur
        task = s.task_ids[stream] = s.task_ids.get(stream, 100 * stream) + 1
        self.event(
            name,
            HARDWARE,
            stream,
            start,
            dur,
            f'"Model Id": 4294967295, "Task Type": "{task_type}", "Physic Stream Id": {stream}, "Task Id": {task}, "Batch Id": 0, "Subtask Id": 4294967295, "connection_id": {cid}',
        )
        self.events.append(
            f'{{"ph": "f", "name": "HostToDevice{cid}", "cat": "HostToDevice", "id": "{cid}", "pid": {HARDWARE}, "tid": {stream}, "ts": {s.ts(start)}, "bp": "e"}}'
        )
        return task

    def _kernel(self, rec: Record) -> None:
        op = rec[9]
        npu = kernels.NPU[op.family]
        self.cpu(op.aten, rec[2], rec[3])
        cid = self.launch(rec, "Node@launch")
        flow = EPOCH_NS // 1000 + int(rec[6] * 1000)
        self.events.append(
            f'{{"ph": "s", "bp": "e", "name": "torch_to_npu", "id": {flow}, "pid": {self.s.pid}, "tid": {self.s.pid}, "ts": {self.s.ts(rec[2])}, "cat": "async_npu"}}'
        )
        self.events.append(
            f'{{"ph": "f", "bp": "e", "name": "torch_to_npu", "id": {flow}, "pid": {HARDWARE}, "tid": {STREAMS["compute"]}, "ts": {self.s.ts(rec[6])}, "cat": "async_npu"}}'
        )
        task = self.task(rec, npu.name, npu.task_type, cid)
        self.compute.append((rec[6], rec[6] + rec[7]))
        self.kernel_row(npu.name, npu.op_type, npu.core, task, STREAMS["compute"], rec[6], rec[7], op.shape)
        stat = self.s.op_stats.setdefault((npu.op_type, npu.core), [0, 0.0, float("inf"), 0.0])
        stat[0] += 1
        stat[1] += rec[7]
        stat[2] = min(stat[2], rec[7])
        stat[3] = max(stat[3], rec[7])

    def kernel_row(
        self,
        name: str,
        op_type: str,
        core: str,
        task: int | str,
        stream: int | str,
        start: float,
        dur: float,
        shape: str,
    ) -> None:
        key = stream if isinstance(stream, int) else -1
        wait = max(start - self.s.stream_last.get(key, start), 0.0)
        self.s.stream_last[key] = start + dur
        start_text = self.s.ts(start)[1:-1] + "\t"
        if core == "HCCL":
            self.kernel_rows.append(
                [
                    self.step,
                    4294967295,
                    "N/A",
                    "N/A",
                    name,
                    op_type,
                    "N/A",
                    "HCCL",
                    start_text,
                    round(dur, 3),
                    round(wait, 3),
                    0,
                    *(["N/A"] * 9),
                    *NA_METRICS,
                ]
            )
            return
        shapes = f'"{shape}"' if shape else ""
        cube = core in ("AI_CORE", "MIX_AIC")
        metrics = [
            round(dur * 0.93, 3),
            int(dur * 1800),
            round(dur * 0.7, 3),
            0.75,
            round(dur * 0.05, 3),
            0.05,
            round(dur * 0.1, 3),
            0.1,
            round(dur * 0.3, 3),
            0.32,
            round(dur * 0.05, 3),
            0.05,
            0.0,
        ]
        vector = [
            round(dur * 0.9, 3),
            int(dur * 1800),
            round(dur * 0.4, 3),
            0.44,
            round(dur * 0.1, 3),
            0.11,
            round(dur * 0.5, 3),
            0.55,
            round(dur * 0.3, 3),
            0.33,
            0.01,
            62.5 if cube else 0,
        ]
        if not cube:
            metrics = [0.0] * 13
        self.kernel_rows.append(
            [
                self.step,
                4294967295,
                task,
                stream,
                name,
                op_type,
                "dynamic",
                core,
                start_text,
                round(dur, 3),
                round(wait, 3),
                24 if cube else 48,
                0,
                "NO",
                shapes,
                "DT_BF16",
                "ND",
                shapes,
                "DT_BF16",
                "ND",
                "N/A",
                *metrics,
                *vector,
            ]
        )

    def summaries(self, step_record: Record) -> None:
        ov = tables.overlap(self.compute, self.comm_spans)
        for tid, name, segments in (
            (0, "Computing", ov.computing),
            (1, "Communication", ov.communication),
            (2, "Communication(Not Overlapped)", ov.not_overlapped),
            (3, "Free", ov.free),
        ):
            for a, b in segments:
                self.events.append(
                    f'{{"ph": "X", "name": "{name}", "pid": {OVERLAP}, "tid": {tid}, "ts": {self.s.ts(a)}, "dur": {b - a:.3f}}}'
                )
        self.s.step_rows.append(
            [
                round(v, 3) if isinstance(v, float) else v
                for v in tables.step_row(self.step, ov, self.bubble, step_record[2])
            ]
        )
        for kind in ("collective", "p2p"):
            ops = list(self.comm[kind].values())
            if ops:
                self.comm[kind]["Total Op Info"] = tables.total_entry(ops)
        for (kind, op_type, group), instances in self.matrix_instances.items():
            for label, links in tables.matrix_entries(instances).items():
                self.matrix[kind][f"{op_type}-{label}@{group}"] = links


def nbytes(n: int, dtype: str) -> int:
    return n * DTYPE_BYTES.get(dtype, 4)
