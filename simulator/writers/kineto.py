"""PyTorch profiler (Kineto) Chrome-trace JSON, one file per rank, streamed step by step.

Each rank's events are appended to a part file as each step is simulated; ``finish`` wraps them into the
final ``rank{R}.{host}_{pid}.pt.trace.json`` (gzipped on request), one rank at a time.
"""

from __future__ import annotations

import itertools
import os
from pathlib import Path
from typing import Any

from paradiag.simulator import collectives, kernels
from paradiag.simulator.engine import COMPUTE, DTYPE_BYTES, Record
from paradiag.simulator.job import Job
from paradiag.simulator.writers.common import EPOCH_NS, STREAM_IDS, escape, fmt, gzip_file, host_name, pid

CBID = {
    "cudaLaunchKernel": 211,
    "cudaMemcpyAsync": 41,
    "cudaDeviceSynchronize": 165,
    "cudaStreamSynchronize": 131,
    "cudaStreamWaitEvent": 147,
}
KERNEL_EXTRA = '"registers per thread": 128, "shared memory": 0, "blocks per SM": 1.0, "warps per SM": 4.0, "grid": [132, 1, 1], "block": [128, 1, 1], "est. achieved occupancy %": 12'


def _ranks_text(ranks: tuple[int, ...]) -> str:
    return "[" + ", ".join(map(str, ranks)) + "]"


def device_lines(
    cat: str,
    quoted_name: str,
    rec: Record,
    shift: float,
    where: tuple[int, int, int],
    ext: int,
    corr: int,
    args: str,
) -> list[str]:
    """A device event (kernel, memcpy) and its launch flow (``ac2g`` start on the launching host thread, end on
    the stream), as the profiler writes them; ``where`` is (host pid, launching thread, device)."""
    host_pid, host_tid, dev = where
    stream = STREAM_IDS[rec[8]]
    ts = fmt(rec[6] + shift)
    return [
        f'{{"ph": "X", "cat": "{cat}", "name": {quoted_name}, "pid": {dev}, "tid": {stream}, "ts": {ts}, '
        f'"dur": {fmt(rec[7])}, "args": {{"External id": {ext}, "queued": 0, "device": {dev}, "context": 1, '
        f'"stream": {stream}, "correlation": {corr}{args}}}}}',
        f'{{"ph": "s", "id": {corr}, "pid": {host_pid}, "tid": {host_tid}, "ts": {fmt(rec[4] + shift)}, "cat": "ac2g", "name": "ac2g"}}',
        f'{{"ph": "f", "id": {corr}, "pid": {dev}, "tid": {stream}, "ts": {ts}, "cat": "ac2g", "name": "ac2g", "bp": "e"}}',
    ]


class KinetoWriter:
    """Writes each rank's ``*.pt.trace.json`` under the job folder."""

    def __init__(self, job: Job, out: Path) -> None:
        self.job, self.out = job, out
        self.state: dict[int, list[Any]] = {}  # rank -> [next id, first ts, last ts]
        self.names: dict[str, str] = {}

    def _q(self, text: str) -> str:
        quoted = self.names.get(text)
        if quoted is None:
            quoted = self.names[text] = escape(text)
        return quoted

    def path(self, rank: int) -> Path:
        return self.out / f"rank{rank}.{host_name(self.job, rank)}_{pid(self.job, rank)}.pt.trace.json"

    def _part(self, rank: int) -> Path:
        return self.out / f".rank{rank}.kineto.part"

    def begin(self, rank: int) -> None:
        self.state[rank] = [1, None, 0.0]
        with open(self._part(rank), "w") as f:
            f.write(self._header(rank))

    def _header(self, rank: int) -> str:
        job, spec = self.job, self.job.spec
        props = [
            f'{{"id": {i}, "name": "{spec.name}", "totalGlobalMem": {spec.memory_bytes}, "computeMajor": {spec.compute_capability[0]}, '
            f'"computeMinor": {spec.compute_capability[1]}, "maxThreadsPerBlock": 1024, "maxThreadsPerMultiprocessor": 2048, '
            f'"regsPerBlock": 65536, "warpSize": 32, "sharedMemPerBlock": 49152, "numSms": {spec.sms}, '
            f'"regsPerMultiprocessor": 65536, "sharedMemPerBlockOptin": 232448, "sharedMemPerMultiprocessor": 233472}}'
            for i in range(job.mesh.devices_per_node)
        ]
        groups = job.mesh.groups_of(rank)
        pgs = [
            f'{{"pg_name": "{g.name}", "pg_desc": "{g.description}", "backend_config": "cuda:nccl", "pg_size": {g.size}, "ranks": {_ranks_text(g.ranks)}}}'
            for g in groups
        ]
        dist = (
            f'{{"backend": "nccl", "rank": {rank}, "world_size": {job.mesh.world}, "pg_count": {len(groups)}, '
            f'"pg_config": [{", ".join(pgs)}], "nccl_version": "2.21.5"}}'
        )
        head = (
            f'{{\n  "schemaVersion": 1,\n  "deviceProperties": [\n    {", ".join(props)}\n  ],\n'
            f'  "distributedInfo": {dist},\n  "cupti_version": 24, "cuda_runtime_version": 12040, "cuda_driver_version": 12040,\n'
            f'  "host_name": "{host_name(job, rank)}",\n  "record_shapes": 1, "with_stack": 0,\n  "traceEvents": [\n'
        )
        return head + ",\n".join(self._metadata(rank))

    def _metadata(self, rank: int) -> list[str]:
        p, dev = pid(self.job, rank), self.job.mesh.local_device(rank)
        streams = sorted(
            {STREAM_IDS[g.role] for g in self.job.mesh.groups_of(rank) if g.role != "world"}
            | {STREAM_IDS[COMPUTE]}
        )
        out = [
            f'{{"name": "process_name", "ph": "M", "ts": 0.000, "pid": {p}, "tid": 0, "args": {{"name": "python3"}}}}',
            f'{{"name": "process_labels", "ph": "M", "ts": 0.000, "pid": {p}, "tid": 0, "args": {{"labels": "CPU"}}}}',
            f'{{"name": "process_sort_index", "ph": "M", "ts": 0.000, "pid": {p}, "tid": 0, "args": {{"sort_index": {p}}}}}',
            f'{{"name": "process_name", "ph": "M", "ts": 0.000, "pid": {dev}, "tid": 0, "args": {{"name": "python3"}}}}',
            f'{{"name": "process_labels", "ph": "M", "ts": 0.000, "pid": {dev}, "tid": 0, "args": {{"labels": "GPU {dev}"}}}}',
            f'{{"name": "process_sort_index", "ph": "M", "ts": 0.000, "pid": {dev}, "tid": 0, "args": {{"sort_index": {16777216 + dev}}}}}',
            f'{{"name": "thread_name", "ph": "M", "ts": 0.000, "pid": {p}, "tid": {p}, "args": {{"name": "thread {p} (python3)"}}}}',
            f'{{"name": "thread_sort_index", "ph": "M", "ts": 0.000, "pid": {p}, "tid": {p}, "args": {{"sort_index": {p}}}}}',
        ]
        for s in streams:
            out.append(
                f'{{"name": "thread_name", "ph": "M", "ts": 0.000, "pid": {dev}, "tid": {s}, "args": {{"name": "stream {s}"}}}}'
            )
            out.append(
                f'{{"name": "thread_sort_index", "ph": "M", "ts": 0.000, "pid": {dev}, "tid": {s}, "args": {{"sort_index": {s}}}}}'
            )
        return out

    def write_step(self, rank: int, step: int, records: list[Record]) -> None:
        state = self.state[rank]
        shift = self.job.clock_offset_us(rank)
        lines = self._render(rank, records, state, shift)
        first = records[0]
        if state[1] is None:
            state[1] = first[2] + shift
        state[2] = max(state[2], first[2] + first[3] + shift)
        with open(self._part(rank), "a") as f:
            f.write(",\n")
            f.write(",\n".join(lines))

    def finish(self, rank: int) -> Path:
        state = self.state.pop(rank)
        start, end = state[1] or 0.0, state[2]
        p = pid(self.job, rank)
        tail = (
            f',\n{{"ph": "X", "cat": "Trace", "ts": {fmt(start - 50)}, "dur": {fmt(end - start + 100)}, "pid": "Spans", '
            f'"tid": "PyTorch Profiler", "name": "PyTorch Profiler (0)", "args": {{"Op count": 0}}}},\n'
            f'{{"name": "process_sort_index", "ph": "M", "ts": {fmt(start - 50)}, "pid": "Spans", "tid": 0, "args": {{"sort_index": 536870912}}}}\n'
            f'  ],\n  "traceName": "{self.path(rank).name}",\n  "displayTimeUnit": "ms",\n  "baseTimeNanoseconds": {EPOCH_NS},\n'
            f'  "trace_id": "{p:032X}"\n}}\n'
        )
        part = self._part(rank)
        with open(part, "a") as f:
            f.write(tail)
        target = self.path(rank)
        if self.job.cfg.gzip:
            gzip_file(part, target.with_name(target.name + ".gz"))
            return target.with_name(target.name + ".gz")
        os.replace(part, target)
        return target

    def _render(self, rank: int, records: list[Record], state: list[Any], shift: float) -> list[str]:
        r = _Rank(self, rank, state, shift)
        for rec in records:
            r.handlers[rec[0]](rec)
        state[0] = r.next_id
        return r.lines


class _Rank:
    """Renders one rank's records of one step into Kineto events (ids continue across steps)."""

    def __init__(self, writer: KinetoWriter, rank: int, state: list[Any], shift: float) -> None:
        self.w, self.rank, self.shift = writer, rank, shift
        self.job = writer.job
        self.pid = pid(self.job, rank)
        self.dev = self.job.mesh.local_device(rank)
        self.next_id = state[0]
        self.lines: list[str] = []
        self.handlers = {
            "P": self._annotation,
            "A": self._annotation,
            "H": self._annotation,
            "K": self._kernel,
            "C": self._comm,
            "S": self._comm,
            "R": self._comm,
            "M": self._memcpy,
            "Y": self._runtime,
            "W": self._runtime,
        }

    def _id(self) -> int:
        self.next_id += 1
        return self.next_id - 1

    def _host(self, cat: str, name: str, ts: float, dur: float, args: str) -> None:
        self.lines.append(
            f'{{"ph": "X", "cat": "{cat}", "name": {self.w._q(name)}, "pid": {self.pid}, "tid": {self.pid}, '
            f'"ts": {fmt(ts + self.shift)}, "dur": {fmt(dur)}, "args": {{{args}}}}}'
        )

    def _annotation(self, rec: Record) -> None:
        ext = self._id()
        self._host(
            "user_annotation",
            rec[1],
            rec[2],
            rec[3],
            f'"External id": {ext}, "Record function id": 0, "Ev Idx": {ext - 1}',
        )

    def _runtime(self, rec: Record) -> None:
        corr = self._id()
        self._host("cuda_runtime", rec[1], rec[2], rec[3], f'"cbid": {CBID[rec[1]]}, "correlation": {corr}')

    def _launch(self, rec: Record, ext: int, api: str, host_name_: str, host_args: str) -> int:
        corr = self._id()
        self._host(
            "cpu_op", host_name_, rec[2], rec[3], f'"External id": {ext}, {host_args}"Ev Idx": {ext - 1}'
        )
        self._host(
            "cuda_runtime",
            api,
            rec[4],
            rec[5],
            f'"External id": {ext}, "cbid": {CBID[api]}, "correlation": {corr}',
        )
        return corr

    def _device(self, cat: str, name: str, rec: Record, ext: int, corr: int, args: str) -> None:
        self.lines += device_lines(
            cat, self.w._q(name), rec, self.shift, (self.pid, self.pid, self.dev), ext, corr, args
        )

    def _kernel(self, rec: Record) -> None:
        op = rec[9]
        ext = self._id()
        corr = self._launch(rec, ext, "cudaLaunchKernel", op.aten, "")
        self._device(
            "kernel", kernels.gpu_kernel(op.family, self.job.cfg.device), rec, ext, corr, ", " + KERNEL_EXTRA
        )

    def _memcpy(self, rec: Record) -> None:
        ext = self._id()
        corr = self._launch(rec, ext, "cudaMemcpyAsync", "aten::copy_", "")
        gbps = rec[9] / max(rec[7], 1e-3) / 1e3
        self._device(
            "gpu_memcpy",
            "Memcpy HtoD (Pinned -> Device)",
            rec,
            ext,
            corr,
            f', "bytes": {rec[9]}, "memory bandwidth (GB/s)": {gbps:.3f}',
        )

    def _comm(self, rec: Record) -> None:
        ext = self._id()
        args, kernel = comm_args(rec, self.rank, self.job.cfg.p2p_peer)
        corr = self._launch(rec, ext, "cudaLaunchKernel", "record_param_comms", args + ", ")
        self._device("kernel", kernel, rec, ext, corr, ", " + KERNEL_EXTRA + ", " + args)


def comm_args(
    rec: Record, rank: int, peer_rank: bool = True, names: tuple[str, str] | None = None
) -> tuple[str, str]:
    """The collective args PyTorch records (on ``record_param_comms`` and, NCCL >= 2.19, on the kernel)
    and the NCCL kernel name. Without ``peer_rank`` a send/recv carries no ``Rank`` (only its process group and
    the group's ranks), as older PyTorch versions record them. ``names``: the group's (pg_name, pg_desc) when they
    are not the Megatron ones."""
    if rec[0] == "C":
        coll, group, algorithm = rec[9][:3]
        name, n_in, n_out, dtype, index = (
            coll.collective,
            coll.in_nelems,
            coll.out_nelems,
            coll.dtype,
            group.ranks.index(rank),
        )
    else:
        peer, nelems, group = rec[9][:3]
        name, n_in, n_out, dtype, algorithm = rec[1], nelems, nelems, "BFloat16", "RING"
        index = group.ranks.index(peer)
    nbytes = max(n_in, n_out) * DTYPE_BYTES.get(dtype, 4)
    ranks = group.ranks
    pg_name, pg_desc = names or (group.name, group.description)
    stride = (
        ranks[1] - ranks[0]
        if len(ranks) > 1 and all(b - a == ranks[1] - ranks[0] for a, b in itertools.pairwise(ranks))
        else -1
    )
    args = (
        f'"Collective name": "{name}", "In msg nelems": {n_in}, "Out msg nelems": {n_out}, "Group size": {group.size}, '
        f'"dtype": "{dtype}", "In split size": "[]", "Out split size": "[]", "Process Group Name": "{pg_name}", '
        f'"Process Group Description": "{pg_desc}", "Process Group Ranks": "{_ranks_text(ranks)}", '
        + (f'"Rank": {index}, ' if peer_rank or rec[0] == "C" else "")
        + f'"Global rank start": {ranks[0]}, "Global rank stride": {stride}'
    )
    return args, kernels.nccl_kernel(name, dtype, algorithm, collectives.protocol(nbytes))
