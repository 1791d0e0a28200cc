"""PyTorch 2.x profiler traces as a real ``torch.distributed`` job records them (``--shape torch2``).

What differs from the megatron shape (:mod:`kineto`), as PyTorch 2.13 records it (see docs/simulator.md):

* ``distributedInfo.pg_config`` lists the rank's own groups with DeviceMesh names (``mesh_pp``, ``mesh_dp``, ...,
  pg_name numbered in creation order); ``pg_count`` counts every group of the job.
* gloo: no ``record_param_comms`` and no collective args: a collective is its ``c10d::`` host op (``c10d::allreduce_``,
  ``c10d::_allgather_base_``, ...) whose sizes are only in ``Input Dims`` / ``Input type``; send/recv
  (``c10d::send`` / ``c10d::recv_``) carry the peer's group-local rank in ``Concrete Inputs`` and autograd's
  ``Sequence number``, which pairs nothing.
* CPU (gloo): no device rows. Compute is ``cpu_op``s on the main thread; a collective's host op only enqueues and
  a ``gloo:<op>`` ``user_annotation`` on one of the group's two ``pt_gloo_runloop`` threads lasts as long as the
  slowest member makes it (a reduce-scatter runs as ``gloo:all_reduce``); send/recv's ``gloo:send`` /
  ``gloo:recv`` are on the main thread; a wait is a gap.
* GPU (NCCL): kernels on streams named ``ncclDevKernel_*``, the host op holding ProcessGroupNCCL's
  ``record_param_comms`` (collective args, copied onto the kernel less the rank fields, as PyTorch >= 2.2 records
  them; ``collective_args=False``: none, as older PyTorch), a ``nccl:<op>`` annotation and the launch, a
  ``gpu_user_annotation`` on the stream; the backward pass on the autograd engine's thread.
* Timestamps as the profiler writes them: ``ts`` in us since the machine's boot, ``baseTimeNanoseconds`` its epoch.
* One file per rank and profiler window (``{host}_{pid}.{time_ns}``, ``rank{R}.{time_ns}`` or ``rank{R}.window{W}``).
"""

from __future__ import annotations

import bisect
import math
import os
from pathlib import Path
from typing import Any, ClassVar

from paradiag.simulator import collectives, kernels
from paradiag.simulator.engine import COMPUTE, DTYPE_BYTES, Record, mix
from paradiag.simulator.job import Job
from paradiag.simulator.writers.common import EPOCH_NS, STREAM_IDS, escape, fmt, gzip_file, host_name, pid
from paradiag.simulator.writers.kineto import CBID, KERNEL_EXTRA, comm_args, device_lines

BOOT_US = 5_286_360_000_000.0  # the profiler's clock: microseconds since the machine booted
RERUN_EARLIER_US = 3_600e6  # an older run's files: one hour before this run
# gloo passes a synchronous send's data on inside c10d::send and records gloo:send at its very end: on a busy host
# c10d::send runs long (1.35 ms for 8 KB; up to 19 ms on the real jobs' 2 cores) and the receive ends before the
# send's annotation begins. Real traces always start gloo:send inside its c10d::send (1,872 of 1,872 sends, 8 us
# to 19 ms of c10d::send). This share of a CPU job's sends is written so (c10d::send over the transfer, gloo:send
# from just before its end), the rest as on a quiet host.
HANDED_ON_SHARE = 0.25
HANDED_ON_US = 20.0  # gloo:send's start before c10d::send's return
TORCH_VERSION = "2.13.0"
INPUT_TYPE = {"BFloat16": "c10::BFloat16", "Float": "float", "Long": "long int"}
C10D = {
    "allreduce": "c10d::allreduce_",
    "_allgather_base": "c10d::_allgather_base_",
    "_reduce_scatter_base": "c10d::_reduce_scatter_base_",
    "broadcast": "c10d::broadcast_",
    "alltoall_base": "c10d::alltoall_base_",
    "send": "c10d::send",
    "recv": "c10d::recv_",
}
# gloo runs a reduce-scatter as an all-reduce; an all-to-all keeps its name
GLOO = {
    "allreduce": "all_reduce",
    "_allgather_base": "all_gather",
    "_reduce_scatter_base": "all_reduce",
    "broadcast": "broadcast",
    "alltoall_base": "all_to_all",
}
NCCL = {
    "allreduce": "all_reduce",
    "_allgather_base": "_all_gather_base",
    "_reduce_scatter_base": "_reduce_scatter_base",
    "broadcast": "broadcast",
    "alltoall_base": "all_to_all",
}
GLOO_THREADS = 2  # ProcessGroupGloo's worker threads per group
COMM_ROLES = (
    "tp",
    "dp",
    "ep",
)  # groups whose collectives run on gloo's threads (the pipeline group only sends)


def _dims(shape: str) -> list[list[int]]:
    return [[int(v) for v in part.split(",")] for part in shape.split(";")] if shape else []


def _strides(dims: list[int]) -> list[int]:
    out, acc = [], 1
    for n in reversed(dims):
        out.append(acc)
        acc *= n
    return out[::-1]


def _backward_node(aten: str) -> str:
    base = aten.split("::")[-1].lstrip("_").removesuffix("_backward").removesuffix("_forward")
    return "".join(part.capitalize() for part in base.split("_")) + "Backward0"


def _is_backward(family: str) -> bool:
    return family.endswith(("_bwd", "_dgrad", "_wgrad"))


def _js(value: Any) -> str:
    """JSON the way the profiler prints args: lists with ", " separators."""
    if isinstance(value, list):
        return "[" + ", ".join(_js(v) for v in value) + "]"
    if isinstance(value, str):
        return escape(value)
    return str(value)


class Torch2Writer:
    """Writes one ``*.pt.trace.json`` per rank and profiler window; ``origin_us`` places the run on the clock."""

    def __init__(self, job: Job, out: Path, origin_us: float = BOOT_US) -> None:
        self.job, self.out, self.origin = job, out, origin_us
        self.cpu = job.spec.kind == "cpu"
        self.names = job.mesh.torch2_names(job.cfg.dp_dim)
        self.state: dict[int, _RankFile] = {}
        self.window: dict[int, int] = {}

    @property
    def base_ns(self) -> int:
        return EPOCH_NS - int(BOOT_US) * 1000

    def begin(self, rank: int) -> None:
        window = self.window.get(rank, -1) + 1
        self.window[rank] = window
        self.state[rank] = _RankFile(self, rank, window)

    def write_step(self, rank: int, step: int, records: list[Record]) -> None:
        state = self.state[rank]
        state.inputs = self.job.input_factor(rank, step)
        state.step(records)

    def finish(self, rank: int) -> Path:
        return self.state.pop(rank).finish()

    def file_name(self, rank: int, window: int, end_us: float) -> str:
        style = self.job.cfg.trace_names
        if style == "window":
            return f"rank{rank}.window{window}.pt.trace.json"
        # tensorboard_trace_handler: {worker_name}.{time.time_ns() when the window's trace was saved}
        written_ns = self.base_ns + int((end_us + 40_000.0 + 300.0 * (rank % 97)) * 1000) + rank * 7919 % 1000
        worker = f"rank{rank}" if style == "rank" else f"{host_name(self.job, rank)}_{pid(self.job, rank)}"
        return f"{worker}.{written_ns}.pt.trace.json"


class _RankFile:
    """One rank's trace file of one window, appended step by step."""

    def __init__(self, writer: Torch2Writer, rank: int, window: int) -> None:
        self.w, self.rank, self.window = writer, rank, window
        self.job = writer.job
        self.cpu = writer.cpu
        self.pid = pid(self.job, rank)
        self.dev = self.job.mesh.local_device(rank)
        self.shift = writer.origin + self.job.clock_offset_us(rank)
        self.part = writer.out / f".rank{rank}.window{window}.torch2.part"
        self.next_id = 1
        self.ev_idx = 0
        self.seq = 1000 * window + 17  # autograd's sequence numbers
        self.start: float | None = None
        self.end = 0.0
        self.thread = self.pid
        self.inputs = (
            1.0  # the step's input factor (Job.input_factor): the leading dim of each op's first input
        )
        self.autograd = self.pid + 11
        groups = [g for g in self.job.mesh.groups_of(rank) if g.role in COMM_ROLES]
        self.gloo = {
            g.index: [self.pid + 40 + GLOO_THREADS * i + k for k in range(GLOO_THREADS)]
            for i, g in enumerate(groups)
        }
        self.gloo_count: dict[int, int] = {}
        self.lines: list[str] = []
        self.written = False
        with open(self.part, "w") as f:
            f.write(self._header())

    # ---- file --------------------------------------------------------------------------------------------------
    def _header(self) -> str:
        job, rank = self.job, self.rank
        groups = sorted(job.mesh.groups_of(rank), key=lambda g: int(self.w.names[g.index][0]))
        backend, config = ("gloo", "cpu:gloo,cuda:gloo") if self.cpu else ("nccl", "cuda:nccl")
        pgs = []
        for g in groups:
            name, desc = self.w.names[g.index]
            pgs.append(
                f'{{"pg_name": "{name}", "pg_desc": "{desc}", "backend_config": "{config}", "pg_size": {g.size}, "ranks": {_js(list(g.ranks))}}}'
            )
        extra = "" if self.cpu else ', "nccl_version": "2.27.5"'
        dist = f'{{"backend": "{backend}", "rank": {rank}, "world_size": {job.mesh.world}, "pg_count": {len(job.mesh.groups)}, "pg_config": [{", ".join(pgs)}]{extra}}}'
        if self.cpu:
            props, cuda = "[]", ""
        else:
            spec = job.spec
            props = (
                "[\n    "
                + ", ".join(
                    f'{{"id": {i}, "name": "{spec.name}", "totalGlobalMem": {spec.memory_bytes}, "computeMajor": {spec.compute_capability[0]}, '
                    f'"computeMinor": {spec.compute_capability[1]}, "maxThreadsPerBlock": 1024, "maxThreadsPerMultiprocessor": 2048, '
                    f'"regsPerBlock": 65536, "warpSize": 32, "sharedMemPerBlock": 49152, "numSms": {spec.sms}, '
                    f'"regsPerMultiprocessor": 65536, "sharedMemPerBlockOptin": 232448, "sharedMemPerMultiprocessor": 233472}}'
                    for i in range(job.mesh.devices_per_node)
                )
                + "\n  ]"
            )
            cuda = '  "cupti_version": 24, "cuda_runtime_version": 12090, "cuda_driver_version": 12090,\n'
        trace_id = f"{(self.pid * 2654435761 + self.window * 40503) & ((1 << 128) - 1):032X}"
        return (
            f'{{\n  "schemaVersion": 1,\n  "deviceProperties": {props},\n{cuda}  "trace_id": "{trace_id}",\n  "record_shapes": 1,\n'
            f'  "distributedInfo": {dist},\n  "host_name": "{host_name(job, rank)}",\n  "displayTimeUnit": "ms",\n'
            f'  "baseTimeNanoseconds": {self.w.base_ns},\n  "traceEvents": [\n'
        )

    def _metadata(self, ts: str) -> list[str]:
        p = self.pid
        out = [
            f'{{"ph": "M", "name": "process_name", "ts": {ts}, "pid": {p}, "tid": 0, "args": {{"name": "python3"}}}}',
            f'{{"ph": "M", "name": "process_labels", "ts": {ts}, "pid": {p}, "tid": 0, "args": {{"labels": "CPU"}}}}',
            f'{{"ph": "M", "name": "process_sort_index", "ts": {ts}, "pid": {p}, "tid": 0, "args": {{"sort_index": {p}}}}}',
        ]
        threads: list[tuple[int, str]] = []
        for i, tids in enumerate(self.gloo.values()):
            for k, tid in enumerate(tids):
                threads.append((tid, "pt_gloo_runloop"))
                if (
                    i == 0 and k == 0
                ):  # as real traces do: the first runloop thread is also named after the process
                    threads.append((tid, "python3"))
        if not self.cpu:
            threads.append((self.autograd, "pt_autograd_0"))
        threads.append((p, "python3"))
        for tid, name in threads:
            out.append(
                f'{{"ph": "M", "name": "thread_name", "ts": {ts}, "pid": {p}, "tid": {tid}, "args": {{"name": "thread {tid} ({name})"}}}}'
            )
            out.append(
                f'{{"ph": "M", "name": "thread_sort_index", "ts": {ts}, "pid": {p}, "tid": {tid}, "args": {{"sort_index": {tid}}}}}'
            )
        if not self.cpu:
            dev = self.dev
            out += [
                f'{{"ph": "M", "name": "process_name", "ts": {ts}, "pid": {dev}, "tid": 0, "args": {{"name": "python3"}}}}',
                f'{{"ph": "M", "name": "process_labels", "ts": {ts}, "pid": {dev}, "tid": 0, "args": {{"labels": "GPU {dev}"}}}}',
                f'{{"ph": "M", "name": "process_sort_index", "ts": {ts}, "pid": {dev}, "tid": 0, "args": {{"sort_index": {16777216 + dev}}}}}',
            ]
            streams = sorted(
                {STREAM_IDS[g.role] for g in self.job.mesh.groups_of(self.rank) if g.role != "world"}
                | {STREAM_IDS[COMPUTE]}
            )
            for s in streams:
                out.append(
                    f'{{"ph": "M", "name": "thread_name", "ts": {ts}, "pid": {dev}, "tid": {s}, "args": {{"name": "stream {s}"}}}}'
                )
                out.append(
                    f'{{"ph": "M", "name": "thread_sort_index", "ts": {ts}, "pid": {dev}, "tid": {s}, "args": {{"sort_index": {s}}}}}'
                )
        return out

    def step(self, records: list[Record]) -> None:
        first = records[0]
        if self.start is None:
            self.start = first[2] + self.shift
        self.end = max(self.end, first[2] + first[3] + self.shift)
        self.lines = []
        # Where each host op on the main thread must have returned: the start of the next thing the thread does
        # (a CPU rank: every record but a thread switch), or the step's end.
        self.starts = sorted(rec[2] for rec in records if rec[0] != "T") if self.cpu else []
        self.step_end = max((rec[2] + rec[3] for rec in records if rec[0] == "P"), default=math.inf)
        for rec in records:
            self.handlers[rec[0]](self, rec)
        with open(self.part, "a") as f:
            if self.written:
                f.write(",\n")
            f.write(",\n".join(self.lines))
        self.written = True

    def finish(self) -> Path:
        start, end = self.start or self.shift, self.end
        ts0 = fmt(start - 280.0)
        meta = self._metadata(ts0)
        tail = [
            *meta,
            f'{{"ph": "X", "cat": "Trace", "name": "PyTorch Profiler (0)", "pid": "Spans", "tid": "PyTorch Profiler", "ts": {fmt(start - 280.0)}, "dur": {fmt(end - start + 560.0)}, "args": {{"Op count": 0}}}}',
            f'{{"ph": "M", "name": "process_sort_index", "ts": {fmt(start - 280.0)}, "pid": "Spans", "tid": 0, "args": {{"sort_index": 536870912}}}}',
            f'{{"ph": "i", "s": "g", "name": "Iteration Start: PyTorch Profiler", "pid": "Traces", "tid": "Trace PyTorch Profiler", "ts": {fmt(start - 280.0)}}}',
            f'{{"ph": "i", "s": "g", "name": "Record Window End", "pid": "", "tid": "", "ts": {fmt(end + 280.0)}}}',
        ]
        name = self.w.file_name(self.rank, self.window, end)
        with open(self.part, "a") as f:
            f.write((",\n" if self.written else "") + ",\n".join(tail))
            f.write(f'\n  ],\n  "traceName": "{name}"\n}}\n')
        target = self.w.out / name
        if self.job.cfg.gzip:
            target = target.with_name(target.name + ".gz")
            gzip_file(self.part, target)
        else:
            os.replace(self.part, target)
        return target

    # ---- events ------------------------------------------------------------------------------------------------
    def _id(self) -> int:
        self.next_id += 1
        return self.next_id - 1

    def _x(
        self, cat: str, name: str, tid: int | str, ts: float, dur: float, args: str, pid_: int | None = None
    ) -> None:
        self.lines.append(
            f'{{"ph": "X", "cat": "{cat}", "name": {escape(name)}, "pid": {self.pid if pid_ is None else pid_}, "tid": {tid}, '
            f'"ts": {fmt(ts + self.shift)}, "dur": {fmt(dur)}, "args": {{{args}}}}}'
        )

    def _host_args(self, ext: int, inputs: str = "", seq: bool = False, fwd_thread: int = 0) -> str:
        self.ev_idx += 1
        seq_args = f'"Sequence number": {self._seq()}, "Fwd thread id": {fwd_thread}, ' if seq else ""
        return f'"External id": {ext}, {seq_args}"Record function id": 0, {inputs}"Ev Idx": {self.ev_idx - 1}'

    def _seq(self) -> int:
        self.seq += 1
        return self.seq

    @staticmethod
    def _inputs(concrete: list[str], types: list[str], dims: list[Any], strides: list[Any]) -> str:
        return f'"Concrete Inputs": {_js(concrete)}, "Input type": {_js(types)}, "Input Strides": {_js(strides)}, "Input Dims": {_js(dims)}, '

    def _annotation(self, rec: Record) -> None:
        ext = self._id()
        self._x("user_annotation", rec[1], self.pid, rec[2], rec[3], self._host_args(ext))

    def _thread(self, rec: Record) -> None:
        self.thread = self.autograd if rec[1] == "autograd" and not self.cpu else self.pid

    def _op_inputs(self, op: Any) -> str:
        dims = _dims(op.shape)
        if self.inputs != 1.0 and dims and dims[0]:  # more data: the tokens (batch, elements) scaled
            dims[0][0] = max(1, round(dims[0][0] * self.inputs))
        dtype = INPUT_TYPE["BFloat16"]
        return self._inputs([""] * len(dims), [dtype] * len(dims), dims, [_strides(d) for d in dims])

    def _kernel(self, rec: Record) -> None:
        op = rec[9]
        backward = _is_backward(op.family)
        if backward:  # the autograd node around the backward op
            node = self._id()
            self._x(
                "cpu_op",
                f"autograd::engine::evaluate_function: {_backward_node(op.aten)}",
                self.thread,
                rec[2] - 0.4,
                rec[3] + 0.8,
                self._host_args(node, seq=True, fwd_thread=1),
            )
        ext = self._id()
        args = self._host_args(ext, self._op_inputs(op), seq=not backward and op.family != "optimizer")
        self._x("cpu_op", op.aten, self.thread, rec[2], rec[3], args)
        if not self.cpu:
            corr = self._launch(rec, ext)
            self._device(
                "kernel",
                kernels.gpu_kernel(op.family, self.job.cfg.device),
                rec,
                ext,
                corr,
                ", " + KERNEL_EXTRA,
            )

    def _launch(self, rec: Record, ext: int, api: str = "cudaLaunchKernel") -> int:
        corr = self._id()
        self._x(
            "cuda_runtime",
            api,
            self.thread,
            rec[4],
            rec[5],
            f'"External id": {ext}, "cbid": {CBID[api]}, "correlation": {corr}',
        )
        return corr

    def _device(self, cat: str, name: str, rec: Record, ext: int, corr: int, args: str) -> None:
        self.lines += device_lines(
            cat, escape(name), rec, self.shift, (self.pid, self.thread, self.dev), ext, corr, args
        )

    def _memcpy(self, rec: Record) -> None:
        ext = self._id()
        n = rec[9] // 8
        inputs = self._inputs(
            ["", "", "False"], ["long int", "long int", "Scalar"], [[n], [n], []], [[1], [1], []]
        )
        self._x("cpu_op", "aten::copy_", self.thread, rec[2], rec[3], self._host_args(ext, inputs))
        if not self.cpu:
            corr = self._launch(rec, ext, "cudaMemcpyAsync")
            gbps = rec[9] / max(rec[7], 1e-3) / 1e3
            self._device(
                "gpu_memcpy",
                "Memcpy HtoD (Pinned -> Device)",
                rec,
                ext,
                corr,
                f', "bytes": {rec[9]}, "memory bandwidth (GB/s)": {gbps:.3f}',
            )

    def _runtime(self, rec: Record) -> None:
        corr = self._id()
        self._x(
            "cuda_runtime",
            rec[1],
            self.thread,
            rec[2],
            rec[3],
            f'"cbid": {CBID[rec[1]]}, "correlation": {corr}',
        )

    # ---- communication -----------------------------------------------------------------------------------------
    def _comm(self, rec: Record) -> None:
        if rec[0] == "C":
            coll, group = rec[9][:2]
            name, n_in, n_out, dtype = coll.collective, coll.in_nelems, coll.out_nelems, coll.dtype
        else:
            _peer, n, group = rec[9][:3]
            name, n_in, n_out, dtype = rec[1], n, n, "BFloat16"
        t = INPUT_TYPE.get(dtype, "float")
        host_ext = self._id()
        if name in ("send", "recv"):
            local = group.ranks.index(rec[9][0])
            width = self.job.cfg.hidden // self.job.mesh.tp
            shape = [n_in // width, width] if n_in % width == 0 else [n_in]
            inputs = self._inputs(
                ["", "", str(local), "0"],
                ["TensorList", "", "Scalar", "Scalar"],
                [[shape], [], [], []],
                [[_strides(shape)], [], [], []],
            )
            host_dur = max(rec[3], rec[6] + rec[7] - rec[2]) if self._handed_on(rec, name) else rec[3]
            self._x(
                "cpu_op",
                C10D[name],
                self.thread,
                rec[2],
                host_dur,
                self._host_args(host_ext, inputs, seq=True),
            )
            label = (
                f"gloo:{name}"
                if self.cpu
                else (
                    f"nccl:send {group.ranks.index(self.rank)}->{local}"
                    if name == "send"
                    else f"nccl:recv {group.ranks.index(self.rank)}<-{local}"
                )
            )
            annotation = (label, t, shape)
        else:
            inputs = self._collective_inputs(name, n_in, n_out, t)
            self._x("cpu_op", C10D[name], self.thread, rec[2], rec[3], self._host_args(host_ext, inputs))
            label = f"gloo:{GLOO[name]}" if self.cpu else f"nccl:{NCCL[name]}"
            annotation = (label, t, [n_in if name != "_reduce_scatter_base" else n_out * group.size])
        label, t, shape = annotation
        ann_inputs = self._inputs([""], [t], [shape], [_strides(shape)])
        if self.cpu:
            self._gloo(rec, group, label, ann_inputs, name, n_in, n_out, dtype)
            return
        launcher, kernel_args = host_ext, ""
        if self.job.cfg.collective_args:
            launcher, kernel_args = self._param_comms(rec, group, t, shape)
        ann = self._id()
        self._x(
            "user_annotation",
            label,
            self.thread,
            rec[2] + rec[3] * 0.2,
            rec[3] * 0.75,
            self._host_args(ann, ann_inputs),
        )
        corr = self._launch(rec, launcher)
        nbytes = max(n_in, n_out) * DTYPE_BYTES.get(dtype, 4)
        algorithm = rec[9][2] if rec[0] == "C" else "RING"
        self._device(
            "kernel",
            kernels.nccl_kernel(name, dtype, algorithm, collectives.protocol(nbytes)),
            rec,
            launcher,
            corr,
            ", " + KERNEL_EXTRA + kernel_args,
        )
        self.lines.append(
            f'{{"ph": "X", "cat": "gpu_user_annotation", "name": {escape(label)}, "pid": {self.dev}, "tid": {STREAM_IDS[rec[8]]}, '
            f'"ts": {fmt(rec[6] + self.shift)}, "dur": {fmt(rec[7])}, "args": {{"External id": {ann}}}}}'
        )

    def _param_comms(self, rec: Record, group: Any, t: str, shape: list[int]) -> tuple[int, str]:
        """ProcessGroupNCCL's ``record_param_comms`` inside the c10d op (PyTorch >= 2.2): the collective args, which
        the kernel it launches (its External id) carries too, less the rank fields. Returns (External id, kernel
        args)."""
        args, _ = comm_args(rec, self.rank, self.job.cfg.p2p_peer, self.w.names[group.index])
        local = group.ranks.index(rec[9][0]) if rec[0] != "C" else group.ranks.index(self.rank)
        ranks = group.ranks
        stride = ranks[1] - ranks[0] if len(ranks) > 1 else 1
        inputs = self._inputs(
            ["", "", "", str(local), "", "[]", "[]", str(ranks[0]), str(stride), str(group.size)],
            [t, "", "", "Scalar", "", "ScalarList", "ScalarList", "Scalar", "Scalar", "Scalar"],
            [shape, [], [], [], [], [], [], [], [], []],
            [_strides(shape), [], [], [], [], [], [], [], [], []],
        )
        ext = self._id()
        self._x(
            "cpu_op",
            "record_param_comms",
            self.thread,
            rec[2] + rec[3] * 0.1,
            rec[3] * 0.85,
            self._host_args(ext, args + ", " + inputs),
        )
        on_kernel = args.split(', "Rank"')[0].split(', "Global rank start"')[0]
        return ext, ", " + on_kernel

    def _collective_inputs(self, name: str, n_in: int, n_out: int, t: str) -> str:
        if name == "allreduce":
            return self._inputs(
                ["", "", "", "", "True", "-1"],
                ["TensorList", "", "", "", "Scalar", "Scalar"],
                [[[n_in]], [], [], [], [], []],
                [[[1]], [], [], [], [], []],
            )
        if name == "_allgather_base":
            return self._inputs(
                ["", "", "", "False", "-1"],
                [t, t, "", "Scalar", "Scalar"],
                [[n_out], [n_in], [], [], []],
                [[1], [1], [], [], []],
            )
        if name == "_reduce_scatter_base":
            return self._inputs(
                ["", "", "", "", "False", "-1"],
                [t, t, "", "", "Scalar", "Scalar"],
                [[n_out], [n_in], [], [], [], []],
                [[1], [1], [], [], [], []],
            )
        if name == "broadcast":
            return self._inputs(
                ["", "", "0", "0", "False", "-1"],
                ["TensorList", "", "Scalar", "Scalar", "Scalar", "Scalar"],
                [[[n_in]], [], [], [], [], []],
                [[[1]], [], [], [], [], []],
            )
        return self._inputs(
            ["", "", "", "[]", "[]", "-1"],
            [t, t, "", "ScalarList", "ScalarList", "Scalar"],
            [[n_out], [n_in], [], [], [], []],
            [[1], [1], [], [], [], []],
        )

    def _gloo(
        self,
        rec: Record,
        group: Any,
        label: str,
        ann_inputs: str,
        name: str,
        n_in: int,
        n_out: int,
        dtype: str,
    ) -> None:
        """The gloo work: on the main thread for send/recv, else on one of the group's runloop threads, with the
        small copies gloo runs itself at the end (gathered slices copied out; a reduce-scatter's average)."""
        start, dur = rec[6], rec[7]
        if self._handed_on(rec, name):
            start, dur = start + dur - HANDED_ON_US, 2 * HANDED_ON_US + 0.05 * dur
        if name in ("send", "recv"):
            ann = self._id()
            self._x("user_annotation", label, self.pid, start, dur, self._host_args(ann, ann_inputs))
            return
        count = self.gloo_count.get(group.index, 0)
        self.gloo_count[group.index] = count + 1
        tid = self.gloo[group.index][count % GLOO_THREADS]
        ann = self._id()
        self._x("user_annotation", label, tid, start, dur, self._host_args(ann, ann_inputs))
        bpu = self.job.spec.hbm_gbps * 1e3
        t = INPUT_TYPE.get(dtype, "float")
        if name == "_allgather_base":
            pieces = min(group.size, 8)
            each = min(n_in * DTYPE_BYTES.get(dtype, 4) / bpu + 1.5, dur * 0.4 / pieces)
            at = start + dur - pieces * (each + 0.5)
            for _ in range(pieces):
                ext = self._id()
                inputs = self._inputs(
                    ["", "", "False"], [t, t, "Scalar"], [[n_in], [n_in], []], [[1], [1], []]
                )
                self._x("cpu_op", "aten::copy_", tid, at, each, self._host_args(ext, inputs))
                at += each + 0.5
        elif name == "_reduce_scatter_base":
            each = min(n_out * DTYPE_BYTES.get(dtype, 4) / bpu + 1.5, dur * 0.3)
            ext = self._id()
            inputs = self._inputs(["", ""], [t, "Scalar"], [[n_out], []], [[1], []])
            self._x("cpu_op", "aten::div_", tid, start + dur - each - 0.5, each, self._host_args(ext, inputs))

    def _handed_on(self, rec: Record, name: str) -> bool:
        """Whether this CPU send's gloo:send is recorded after c10d::send passed its data on (HANDED_ON_SHARE of
        them, drawn from the rank and the transfer's start: the same job is written the same way every time), where
        the transfer ends before the main thread's next op or annotation begins: c10d::send then holds the thread
        until it returns, and a thread's ops nest (one lengthened over the next op's start made the parser drop
        that op's call or give it another caller: a zero-bubble CPU job's weight-gradient matmuls)."""
        if not (
            self.cpu and name == "send" and mix(self.rank, round(rec[6] * 1000)) > 1 - 2 * HANDED_ON_SHARE
        ):
            return False
        later = bisect.bisect_right(self.starts, rec[2])
        nxt = self.starts[later] if later < len(self.starts) else math.inf
        return bool(rec[6] + rec[7] <= min(nxt, self.step_end))

    handlers: ClassVar[dict[str, Any]] = {
        "P": _annotation,
        "A": _annotation,
        "H": _annotation,
        "K": _kernel,
        "C": _comm,
        "S": _comm,
        "R": _comm,
        "M": _memcpy,
        "Y": _runtime,
        "W": _runtime,
        "T": _thread,
    }


def manifest(job: Job) -> dict[str, Any]:
    """``paradiag_run.json`` as ``paradiag.torch`` writes it (format ``paradiag.torch/1``): every group of the job
    with global ranks and its real name, the DeviceMesh, the profiler schedule."""
    cfg, mesh = job.cfg, job.mesh
    names = mesh.torch2_names(cfg.dp_dim)
    groups = sorted(
        ({"name": names[g.index][0], "desc": names[g.index][1], "ranks": list(g.ranks)} for g in mesh.groups),
        key=lambda g: (g["desc"], g["ranks"]),
    )
    return {
        "format": "paradiag.torch/1",
        "torch_version": TORCH_VERSION,
        "backend": "gloo" if job.spec.kind == "cpu" else "nccl",
        "device_type": "cpu" if job.spec.kind == "cpu" else "cuda",
        "world_size": mesh.world,
        "mesh": mesh.device_mesh(cfg.dp_dim),
        "groups": groups,
        "schedule": {
            "wait": max(cfg.window_gap - 1, 0),
            "warmup": min(cfg.window_gap, 1),
            "active": cfg.steps,
            "repeat": cfg.windows,
            "skip_first": max(cfg.first_step - cfg.window_gap, 0),
        },
        "started_ns": EPOCH_NS - 20_000_000_000,
    }
