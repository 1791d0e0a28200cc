"""Discrete-event execution of every rank's program, with the dependencies real jobs have.

Each rank has a host thread that launches work in program order and device streams (compute, and one per
process group, as ProcessGroupNCCL has) that run it in order. A collective starts on a rank when that rank
arrives and ends, on every member, once the last member has arrived and the transfer is done; a receive ends
after its send. A rank whose next instruction needs a time not known yet (the end of a collective others have
not reached) is parked until that collective resolves, so the order of processing never changes the result.
"""

from __future__ import annotations

from collections import defaultdict, deque
from collections.abc import Callable
from typing import Any

import numpy as np

from paradiag.simulator import collectives, devices, program
from paradiag.simulator.job import Job
from paradiag.simulator.model import Op

# Record fields: [code, name, host_ts, host_dur, launch_ts, launch_dur, dev_ts, dev_dur, stream, info].
# info: K -> Op; C -> (Coll, group, algorithm, transfer us); S/R -> (peer, nelems, group, transfer us);
# M -> bytes; P -> step; H -> category; T -> None (the host thread that runs what follows: main or autograd).
# Times in us on the job's true clock (no clock skew). On a CPU device (``cpu``) the host thread is the device:
# a kernel runs on it (host span = device span), a stream sync or wait leaves a gap on it, and nothing is launched.
CODE, NAME, HTS, HDUR, LTS, LDUR, DTS, DDUR, STREAM, INFO = range(10)
COMPUTE = "compute"
HOST_OP_US = {"K": 9.0, "C": 16.0, "S": 14.0, "R": 14.0, "M": 12.0}
DTYPE_BYTES = {"BFloat16": 2, "Float": 4, "Long": 8}
PCIE_BYTES_PER_US = 22e3

Record = list[Any]


class DeadlockError(RuntimeError):
    """No rank can progress: the programs wait on each other (a bug in a schedule)."""


def mix(*values: int) -> float:
    """A deterministic value in [-1, 1) from integers (splitmix64), independent of processing order."""
    x = 0x9E3779B97F4A7C15
    for v in values:
        x = (x ^ (v & 0xFFFFFFFFFFFFFFFF)) * 0xBF58476D1CE4E5B9 & 0xFFFFFFFFFFFFFFFF
        x = (x ^ (x >> 31)) * 0x94D049BB133111EB & 0xFFFFFFFFFFFFFFFF
    return (x >> 11) / float(1 << 52) - 1.0


class RankState:
    """One rank's host clock, stream tails and program position."""

    def __init__(self, rank: int, seed: int) -> None:
        self.rank = rank
        self.host = 1000.0 + 150.0 * (mix(seed, rank) + 1.0)
        self.tail: dict[str, float] = defaultdict(float)
        self.gate: dict[str, tuple[int, ...]] = {}
        self.seq: dict[int, int] = defaultdict(int)
        self.rng = np.random.default_rng([seed, rank])
        self.prog: list[program.Instr] = []
        self.pc = 0
        self.noise: list[float] = []
        self.ni = 0
        self.records: list[Record] = []
        self.stack: list[Record] = []
        self.factors: dict[Op, float] = {}
        self.done = False

    def n(self) -> float:
        self.ni += 1
        return self.noise[self.ni - 1]


class Engine:
    """Runs all ranks step by step; ``run`` yields each step's records per rank."""

    def __init__(self, job: Job) -> None:
        self.job = job
        self.cfg = job.cfg
        self.states = [RankState(r, job.cfg.seed) for r in range(job.mesh.world)]
        self.op_us: dict[Op, float] = {}
        self.coll_us: dict[tuple[Any, ...], tuple[float, str]] = {}
        self.cpu = job.spec.kind == "cpu"
        self._handlers: dict[str, Callable[[RankState, program.Instr, int], tuple[int, ...] | None]] = {
            "K": self._kernel,
            "C": self._collective,
            "S": self._send,
            "R": self._recv,
            "H": self._host,
            "M": self._memcpy,
            "Y": self._sync,
            "W": self._wait,
            "A": self._open,
            "Z": self._close,
            "T": self._thread,
        }
        if self.cpu:
            self._handlers.update(
                {"K": self._cpu_kernel, "M": self._cpu_memcpy, "Y": self._cpu_sync, "W": self._cpu_wait}
            )

    # ---- driving -------------------------------------------------------------------------------------------
    def run_step(self, step: int) -> list[list[Record]]:
        """Simulate ``step`` on every rank; return the records of each rank, in rank order."""
        self.pending: dict[tuple[int, ...], list[Any]] = {}
        self.sends: dict[tuple[int, ...], tuple[float, float]] = {}
        self.recvs: dict[tuple[int, ...], tuple[RankState, Record]] = {}
        self.resolved: dict[tuple[int, ...], float] = {}
        self.waiting: dict[tuple[int, ...], list[RankState]] = defaultdict(list)
        self.runnable: deque[RankState] = deque()
        for st in self.states:
            self._begin(st, step)
            self.runnable.append(st)
        while self.runnable:
            st = self.runnable.popleft()
            key = self._advance(st, step)
            if key is not None:
                self.waiting[key].append(st)
        stuck = [st for st in self.states if not st.done]
        if stuck:
            where = ", ".join(f"rank {st.rank} at {st.prog[st.pc][:2]}" for st in stuck[:4])
            raise DeadlockError(f"step {step}: {len(stuck)} ranks cannot progress ({where})")
        return [st.records for st in self.states]

    def idle(self, us: float) -> None:
        """Let ``us`` pass on every rank alike (steps run but not profiled between two profiler windows)."""
        for st in self.states:
            st.host += us
            for stream in st.tail:
                st.tail[stream] += us

    def _begin(self, st: RankState, step: int) -> None:
        st.prog = program.build(self.job, st.rank, step)
        st.pc, st.done, st.ni, st.records, st.factors = 0, False, 0, [], {}
        st.noise = np.clip(st.rng.standard_normal(3 * len(st.prog) + 8), -3.0, 3.0).tolist()
        st.host += 20.0 + 5.0 * abs(st.n())
        st.records.append(["P", f"ProfilerStep#{step}", st.host, 0.0, 0.0, 0.0, 0.0, 0.0, None, step])

    def _advance(self, st: RankState, step: int) -> tuple[int, ...] | None:
        prog, handlers = st.prog, self._handlers
        while st.pc < len(prog):
            ins = prog[st.pc]
            key = handlers[ins[0]](st, ins, step)
            if key is not None:
                return key
            st.pc += 1
        st.host += 15.0
        step_record = st.records[0]
        step_record[HDUR] = st.host - step_record[HTS]
        st.done = True
        return None

    def _wake(self, key: tuple[int, ...]) -> None:
        self.runnable.extend(self.waiting.pop(key, ()))

    def _blocked_on(self, st: RankState, streams: list[str]) -> tuple[int, ...] | None:
        """The first of ``streams`` still waiting on an unresolved event, or None when all are free."""
        for stream in streams:
            key = self._blocked(st, stream)
            if key is not None:
                return key
        return None

    def _blocked(self, st: RankState, stream: str) -> tuple[int, ...] | None:
        key = st.gate.get(stream)
        if key is None:
            return None
        end = self.resolved.get(key)
        if end is None:
            return key
        del st.gate[stream]
        if end > st.tail[stream]:
            st.tail[stream] = end
        return None

    def _launch(self, st: RankState, host_us: float) -> tuple[float, float, float, float]:
        """Host span of an operator and of the launch call inside it."""
        hts = st.host
        hdur = host_us * (1.0 + 0.12 * st.n())
        ldur = self.job.spec.launch_us * (1.0 + 0.1 * st.n())
        lts = hts + (hdur - ldur) * 0.7
        st.host = hts + hdur + 1.5
        return hts, hdur, lts, ldur

    def _comm_launch(self, st: RankState, code: str) -> tuple[float, float, float, float]:
        """Host span of a c10d op: a kernel launch on a GPU; on a CPU, enqueueing the gloo work (no launch)."""
        if not self.cpu:
            return self._launch(st, HOST_OP_US[code])
        hts = st.host
        hdur = self.job.spec.host_comm_us * (1.0 + 0.25 * st.n())
        st.host = hts + hdur + 1.5
        return hts, hdur, hts + hdur * 0.5, 0.0

    def _jitter(self, st: RankState) -> float:
        return max(0.5, 1.0 + self.cfg.jitter * st.n())

    # ---- compute ---------------------------------------------------------------------------------------------
    def _factor(self, st: RankState, op: Op, step: int) -> float:
        factor = st.factors.get(op)
        if factor is None:
            factor = self.job.compute_factor(st.rank, step)
            for operator, f in self.job.hotspots(st.rank, step):
                if operator in op.aten or operator in op.family:
                    factor *= f
            st.factors[op] = factor
        return factor

    def _op_us(self, op: Op) -> float:
        """The operator's time on this job's device before faults and jitter (computed once per operator)."""
        base = self.op_us.get(op)
        if base is None:
            base = self.op_us[op] = devices.op_time_us(self.job.spec, op.flops, op.nbytes, op.dense)
        return base

    def _kernel(self, st: RankState, ins: program.Instr, step: int) -> tuple[int, ...] | None:
        key = self._blocked(st, COMPUTE)
        if key is not None:
            return key
        op: Op = ins[1]
        base = self._op_us(op)
        hts, hdur, lts, ldur = self._launch(st, HOST_OP_US["K"])
        start = max(lts + ldur * 0.6, st.tail[COMPUTE])
        dur = base * self._factor(st, op, step) * self._jitter(st)
        st.tail[COMPUTE] = start + dur
        st.records.append(["K", op.aten, hts, hdur, lts, ldur, start, dur, COMPUTE, op])
        return None

    def _cpu_kernel(self, st: RankState, ins: program.Instr, step: int) -> tuple[int, ...] | None:
        key = self._blocked(st, COMPUTE)
        if key is not None:
            return key
        op: Op = ins[1]
        base = self._op_us(op)
        start = max(
            st.host, st.tail[COMPUTE]
        )  # a blocking collective or receive ends first: a gap on the thread
        dur = base * self._factor(st, op, step) * self._jitter(st)
        st.host = st.tail[COMPUTE] = start + dur + 1.0
        st.records.append(["K", op.aten, start, dur, start, 0.0, start, dur, COMPUTE, op])
        return None

    def _cpu_memcpy(self, st: RankState, ins: program.Instr, step: int) -> tuple[int, ...] | None:
        start = max(st.host, st.tail[COMPUTE])
        dur = (ins[1] / (self.job.spec.hbm_gbps * 1e3) + 2.0) * self._jitter(st)
        st.host = st.tail[COMPUTE] = start + dur + 1.0
        st.records.append(["M", "aten::copy_", start, dur, start, 0.0, start, dur, COMPUTE, ins[1]])
        return None

    def _cpu_sync(self, st: RankState, ins: program.Instr, step: int) -> tuple[int, ...] | None:
        """work.wait() on the main thread: no event, a gap until the stream(s) are done."""
        streams = [ins[1]] if ins[1] else [COMPUTE, *st.gate, *st.tail]
        key = self._blocked_on(st, streams)
        if key is not None:
            return key
        st.host = max(st.host, *(st.tail[s] for s in streams)) + 2.0 + abs(st.n())
        return None

    def _cpu_wait(self, st: RankState, ins: program.Instr, step: int) -> tuple[int, ...] | None:
        """DDP waiting for its gradient buckets: the main thread has no event until they are reduced."""
        key = self._blocked(st, ins[1])
        if key is not None:
            return key
        st.host = st.tail[COMPUTE] = max(st.host, st.tail[ins[1]]) + 3.0
        return None

    def _thread(self, st: RankState, ins: program.Instr, step: int) -> tuple[int, ...] | None:
        st.records.append(["T", ins[1], st.host, 0.0, 0.0, 0.0, 0.0, 0.0, None, None])
        return None

    def _memcpy(self, st: RankState, ins: program.Instr, step: int) -> tuple[int, ...] | None:
        key = self._blocked(st, COMPUTE)
        if key is not None:
            return key
        hts, hdur, lts, ldur = self._launch(st, HOST_OP_US["M"])
        start = max(lts + ldur * 0.6, st.tail[COMPUTE])
        dur = (ins[1] / PCIE_BYTES_PER_US + 2.0) * self._jitter(st)
        st.tail[COMPUTE] = start + dur
        st.records.append(["M", "aten::copy_", hts, hdur, lts, ldur, start, dur, COMPUTE, ins[1]])
        return None

    # ---- host ------------------------------------------------------------------------------------------------
    def _host(self, st: RankState, ins: program.Instr, step: int) -> tuple[int, ...] | None:
        dur = ins[3] * (1.0 + 0.1 * st.n())
        if ins[1] == program.DATA_LOADER:
            dur += self.job.host_stall_us(st.rank, step)
        st.records.append(["H", ins[1], st.host, dur, 0.0, 0.0, 0.0, 0.0, None, ins[2]])
        st.host += dur + 2.0
        return None

    def _sync(self, st: RankState, ins: program.Instr, step: int) -> tuple[int, ...] | None:
        streams = [ins[1]] if ins[1] else [COMPUTE, *st.gate, *st.tail]
        key = self._blocked_on(st, streams)
        if key is not None:
            return key
        end = max((st.tail[s] for s in streams), default=0.0)
        hts = st.host
        hdur = max(end - hts, 0.0) + 3.0 + abs(st.n())
        name = "cudaStreamSynchronize" if ins[1] else "cudaDeviceSynchronize"
        st.records.append(["Y", name, hts, hdur, 0.0, 0.0, 0.0, 0.0, ins[1], None])
        st.host = hts + hdur + 1.0
        return None

    def _wait(self, st: RankState, ins: program.Instr, step: int) -> tuple[int, ...] | None:
        key = self._blocked(st, ins[1])
        if key is not None:
            return key
        st.tail[COMPUTE] = max(st.tail[COMPUTE], st.tail[ins[1]])
        st.records.append(["W", "cudaStreamWaitEvent", st.host, 2.5, 0.0, 0.0, 0.0, 0.0, ins[1], None])
        st.host += 4.0
        return None

    def _open(self, st: RankState, ins: program.Instr, step: int) -> tuple[int, ...] | None:
        record = ["A", ins[1], st.host, 0.0, 0.0, 0.0, 0.0, 0.0, None, None]
        st.records.append(record)
        st.stack.append(record)
        st.host += 3.0
        return None

    def _close(self, st: RankState, ins: program.Instr, step: int) -> tuple[int, ...] | None:
        record = st.stack.pop()
        st.host += 2.0
        record[HDUR] = st.host - record[HTS]
        return None

    # ---- communication ---------------------------------------------------------------------------------------
    def _collective(self, st: RankState, ins: program.Instr, step: int) -> tuple[int, ...] | None:
        coll = ins[1]
        group = self.job.mesh.group(st.rank, coll.role)
        if group is None:
            return None  # a one-rank group: nothing to communicate
        role = coll.role
        for stream in (role, COMPUTE):
            key = self._blocked(st, stream)
            if key is not None:
                return key
        hts, hdur, lts, ldur = self._comm_launch(st, "C")
        arrival = max(lts + ldur * 0.6, st.tail[role], st.tail[COMPUTE])
        st.seq[group.index] += 1
        key = (0, step, group.index, st.seq[group.index])
        record = ["C", coll.collective, hts, hdur, lts, ldur, arrival, None, role, (coll, group, "RING", 0.0)]
        st.records.append(record)
        st.gate[role] = key
        if ins[2]:
            st.gate[COMPUTE] = key
        entry = self.pending.get(key)
        if entry is None:
            entry = self.pending[key] = [0, 0.0, 0, []]
        entry[0] += 1
        entry[1] = max(entry[1], arrival)
        entry[2] = max(entry[2], max(coll.in_nelems, coll.out_nelems) * DTYPE_BYTES.get(coll.dtype, 4))
        entry[3].append(record)
        if entry[0] == group.size:
            self._resolve(key, step)
        return None

    def _coll_time(self, group: Any, collective: str, nbytes: int, step: int) -> tuple[float, str]:
        cache_key = (group.index, collective, nbytes, step if self.job.faults("slow_link") else -1)
        found = self.coll_us.get(cache_key)
        if found is None:
            factor = self.job.group_link_factor(group.ranks, step)

            def link(a: int, b: int) -> tuple[float, float]:
                bw, lat = self.job.link(a, b, -1)
                return bw / factor, lat

            nodes = {self.job.mesh.node(r) for r in group.ranks}
            found = self.coll_us[cache_key] = collectives.duration(
                collective, nbytes, group.ranks, link, len(nodes) > 1
            )
        return found

    def _resolve(self, key: tuple[int, ...], step: int) -> None:
        _count, last_arrival, nbytes, records = self.pending.pop(key)
        coll, group = records[0][INFO][:2]
        base, algorithm = self._coll_time(group, coll.collective, nbytes, step)
        transfer = base * max(0.5, 1.0 + self.cfg.jitter * mix(self.cfg.seed, *key))
        end = last_arrival + transfer
        for record in records:
            record[DDUR] = end - record[DTS]
            record[INFO] = (record[INFO][0], group, algorithm, transfer)
        self.resolved[key] = end
        self._wake(key)

    def _pp_group(self, rank: int) -> Any:
        group = self.job.mesh.group(rank, "pp")
        if group is None:  # pragma: no cover - programs only send and receive with a pipeline
            raise DeadlockError(f"rank {rank} sends or receives without a pipeline group")
        return group

    def _p2p_us(self, a: int, b: int, nbytes: int, step: int) -> float:
        bw, lat = self.job.link(a, b, step)
        return collectives.STARTUP_US + nbytes / (bw * 1e3) + lat

    def _send(self, st: RankState, ins: program.Instr, step: int) -> tuple[int, ...] | None:
        for stream in ("pp", COMPUTE):
            key = self._blocked(st, stream)
            if key is not None:
                return key
        _, peer, nelems, tag = ins
        group = self._pp_group(st.rank)
        hts, hdur, lts, ldur = self._comm_launch(st, "S")
        arrival = max(lts + ldur * 0.6, st.tail["pp"], st.tail[COMPUTE])
        dur = self._p2p_us(st.rank, peer, nelems * 2, step) * self._jitter(st)
        st.tail["pp"] = arrival + dur
        st.records.append(["S", "send", hts, hdur, lts, ldur, arrival, dur, "pp", (peer, nelems, group, dur)])
        key = (1, step, group.index, *tag)
        self.sends[key] = (arrival, dur)
        waiting = self.recvs.pop(key, None)
        if waiting is not None:
            self._finish_recv(key, waiting[1])
        return None

    def _recv(self, st: RankState, ins: program.Instr, step: int) -> tuple[int, ...] | None:
        key = self._blocked(st, "pp")
        if key is not None:
            return key
        _, peer, nelems, tag = ins
        group = self._pp_group(st.rank)
        hts, hdur, lts, ldur = self._comm_launch(st, "R")
        arrival = max(lts + ldur * 0.6, st.tail["pp"])
        record = ["R", "recv", hts, hdur, lts, ldur, arrival, None, "pp", (peer, nelems, group, 0.0)]
        st.records.append(record)
        key = (1, step, group.index, *tag)
        st.gate["pp"] = key
        st.gate[COMPUTE] = key
        if key in self.sends:
            self._finish_recv(key, record)
        else:
            self.recvs[key] = (st, record)
        return None

    def _finish_recv(self, key: tuple[int, ...], record: Record) -> None:
        send_arrival, transfer = self.sends[key]
        end = max(record[DTS] + collectives.STARTUP_US, send_arrival + transfer)
        record[DDUR] = end - record[DTS]
        record[INFO] = (*record[INFO][:3], min(transfer, end - record[DTS]))
        self.resolved[key] = end
        self._wake(key)
