"""NCCL work without record_param_comms args (parsers/kineto_nccl.py), on small hand-made GPU traces shaped as
PyTorch records them: a c10d op holding its nccl annotation and the kernel's launch, the kernel on its stream with
launch args only, the annotation's device copy spanning it. Each must give the collective, group, members, size
and peer a record_param_comms trace gives, and the job's clocks must align on them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import paradiag
from paradiag import align
from paradiag.parsers import kineto
from paradiag.simulator import SimConfig, parse_fault, simulate

HOST, DEVICE = 100, 0


class Trace:
    """One rank's trace, built event by event (ids counted as the profiler counts them)."""

    def __init__(self, rank: int, groups: list[tuple[str, str, list[int]]] | None, world: int = 16) -> None:
        self.rank, self.world, self.groups = rank, world, groups
        self.events: list[dict[str, Any]] = [self._x("user_annotation", "ProfilerStep#3", HOST, 0, 100_000)]
        self.next = 1

    def _id(self) -> int:
        self.next += 1
        return self.next

    @staticmethod
    def _x(
        cat: str, name: str, tid: int, ts: float, dur: float, args: dict[str, Any] | None = None, pid: int = 1
    ) -> dict[str, Any]:
        return {
            "ph": "X",
            "cat": cat,
            "name": name,
            "pid": pid,
            "tid": tid,
            "ts": ts,
            "dur": dur,
            "args": args or {},
        }

    def comm(
        self,
        op: str,
        op_inputs: dict[str, Any],
        annotation: str | None,
        ann_inputs: dict[str, Any] | None,
        kernel: str,
        stream: int,
        ts: float,
        *,
        launch: bool = True,
        kernel_external: bool = True,
        device_annotation: bool = True,
    ) -> None:
        """A c10d op at ``ts`` (20 us) holding ``annotation`` and the launch; the kernel 50 us later on ``stream``."""
        op_ext, ann_ext, corr = self._id(), self._id(), self._id()
        self.events.append(self._x("cpu_op", op, HOST, ts, 20, {"External id": op_ext, **op_inputs}))
        if annotation is not None:
            self.events.append(
                self._x(
                    "user_annotation",
                    annotation,
                    HOST,
                    ts + 2,
                    16,
                    {"External id": ann_ext, **(ann_inputs or {})},
                )
            )
            if device_annotation:
                self.events.append(
                    self._x(
                        "gpu_user_annotation",
                        annotation,
                        stream,
                        ts + 50,
                        30,
                        {"External id": ann_ext},
                        pid=DEVICE,
                    )
                )
        if launch:
            self.events.append(
                self._x(
                    "cuda_runtime",
                    "cudaLaunchKernel",
                    HOST,
                    ts + 10,
                    5,
                    {"External id": op_ext, "correlation": corr},
                )
            )
        kernel_args = {"device": DEVICE, "stream": stream, "correlation": corr if launch else 900_000 + corr}
        if kernel_external:
            kernel_args["External id"] = op_ext
        self.events.append(self._x("kernel", kernel, stream, ts + 50, 30, kernel_args, pid=DEVICE))

    def write(self, folder: Path) -> Path:
        info: dict[str, Any] = {"backend": "nccl", "rank": self.rank, "world_size": self.world}
        if self.groups is not None:
            info["pg_config"] = [
                {"pg_name": n, "pg_desc": d, "backend_config": "cuda:nccl", "pg_size": len(r), "ranks": r}
                for n, d, r in self.groups
            ]
        path = folder / f"rank{self.rank}.pt.trace.json"
        path.write_text(
            json.dumps({"distributedInfo": info, "host_name": "node0", "traceEvents": self.events})
        )
        return path


def allgather(n: int) -> dict[str, Any]:
    return {
        "Concrete Inputs": ["", "", "", "False", "-1"],
        "Input type": ["c10::BFloat16", "c10::BFloat16", "", "Scalar", "Scalar"],
        "Input Dims": [[n], [n // 2], [], [], []],
    }


def reducescatter(n: int, size: int) -> dict[str, Any]:
    return {
        "Concrete Inputs": ["", "", "", "", "False", "-1"],
        "Input type": ["float", "float", "", "", "Scalar", "Scalar"],
        "Input Dims": [[n // size], [n], [], [], [], []],
    }


ALLREDUCE = {
    "Concrete Inputs": ["", "", "", "", "True", "-1"],
    "Input type": ["TensorList", "", "", "", "Scalar", "Scalar"],
    "Input Dims": [[[4096]], [], [], [], [], []],
}
SEND = {
    "Concrete Inputs": ["", "", "1", "0"],
    "Input type": ["TensorList", "", "Scalar", "Scalar"],
    "Input Dims": [[[64, 32]], [], [], []],
}


def _comm(parsed: kineto.ParsedRank) -> list[dict[str, Any]]:
    ev = parsed.events
    comm = ev.filter(
        pc.and_(
            pc.equal(ev.column("kind").cast(pa.string()), "communication"),
            pc.greater_equal(ev.column("device"), 0),
        )
    )
    return (
        comm.sort_by("start_ns")
        .select(["collective", "group", "group_ranks", "peer", "bytes", "track", "step"])
        .to_pylist()
    )


# Rank 1 of a 16-rank job: tp [0, 1] (size 2), dp [1, 3, 5, 7] (size 4), pp [1, 9] (size 2), the default group.
RANK1_GROUPS = [
    ("0", "default_pg", list(range(16))),
    ("1", "mesh_pp", [1, 9]),
    ("5", "mesh_dp", [1, 3, 5, 7]),
    ("13", "mesh_tp", [0, 1]),
]


def test_collectives_get_kind_group_members_size_and_peer(tmp_path: Path) -> None:
    t = Trace(1, RANK1_GROUPS)
    # stream 13: a tensor-parallel all-gather (output twice its input: a group of 2; the pipeline group is one too,
    # but pipeline groups send and receive); stream 17: a dp reduce-scatter of 4; stream 21: a send to the next
    # stage (own index 0, the peer's 1); stream 25: an all-reduce with no size hint, the default group by elimination.
    t.comm(
        "c10d::_allgather_base_",
        allgather(8192),
        "nccl:_all_gather_base",
        {"Input type": ["c10::BFloat16"], "Input Dims": [[4096]]},
        "ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
        13,
        1000,
    )
    t.comm(
        "c10d::_reduce_scatter_base_",
        reducescatter(4096, 4),
        "nccl:_reduce_scatter_base",
        {"Input type": ["float"], "Input Dims": [[4096]]},
        "ncclDevKernel_ReduceScatter_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
        17,
        2000,
    )
    t.comm(
        "c10d::send",
        SEND,
        "nccl:send 0->1",
        {"Input type": ["c10::BFloat16"], "Input Dims": [[64, 32]]},
        "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)",
        21,
        3000,
    )
    t.comm(
        "c10d::allreduce_",
        ALLREDUCE,
        "nccl:all_reduce",
        {"Input type": ["float"], "Input Dims": [[4096]]},
        "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
        25,
        4000,
    )
    comm = _comm(kineto.parse(t.write(tmp_path)))
    assert [
        (c["collective"], c["group"], c["group_ranks"], c["peer"], c["bytes"], c["step"]) for c in comm
    ] == [
        ("all_gather", "13", "0,1", None, 8192 * 2, 3),  # the output, in the annotation's element type
        ("reduce_scatter", "5", "1,3,5,7", None, 4096 * 4, 3),  # the input
        ("send", "1", "1,9", 9, 64 * 32 * 2, 3),  # the peer's index 1 in the pipeline group is global rank 9
        (
            "all_reduce",
            "0",
            ",".join(map(str, range(16))),
            None,
            4096 * 4,
            3,
        ),  # the tensor list's type from the annotation
    ]


def test_links_without_launch_or_external_id(tmp_path: Path) -> None:
    """A kernel whose launch is not in the trace is its operator's by External id; one with neither is the
    collective whose annotation's device copy spans it on its stream."""
    t = Trace(1, RANK1_GROUPS)
    t.comm(
        "c10d::_reduce_scatter_base_",
        reducescatter(4096, 4),
        "nccl:_reduce_scatter_base",
        {"Input type": ["float"], "Input Dims": [[4096]]},
        "ncclDevKernel_ReduceScatter_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
        17,
        1000,
        launch=False,
        device_annotation=False,
    )
    t.comm(
        "c10d::alltoall_base_",
        {"Input type": ["float", "float"], "Input Dims": [[1024], [1024]]},
        "nccl:all_to_all",
        {"Input type": ["float"], "Input Dims": [[1024]]},
        "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)",
        17,
        2000,
        launch=False,
        kernel_external=False,
    )
    comm = _comm(kineto.parse(t.write(tmp_path)))
    # SendRecv kernels run all-to-all too: only the host side tells them apart.
    assert [(c["collective"], c["group"], c["bytes"]) for c in comm] == [
        ("reduce_scatter", "5", 4096 * 4),
        ("all_to_all", "5", 1024 * 4),
    ]


def test_groups_the_trace_cannot_tell_apart_are_not_shared(tmp_path: Path) -> None:
    """dp [0, 2] and tp [0, 1] both have two members: a stream of all-gathers of two may be either. It keeps both in
    its label, without members, and no rank of another group shares that label."""
    labels = []
    for rank, groups in (
        (0, [("0", "default_pg", [0, 1, 2, 3]), ("1", "mesh_dp", [0, 2]), ("3", "mesh_tp", [0, 1])]),
        (2, [("0", "default_pg", [0, 1, 2, 3]), ("1", "mesh_dp", [0, 2]), ("4", "mesh_tp", [2, 3])]),
    ):
        t = Trace(rank, groups, world=4)
        for i, stream in enumerate((13, 17)):
            t.comm(
                "c10d::_allgather_base_",
                allgather(8192),
                "nccl:_all_gather_base",
                {"Input type": ["c10::BFloat16"], "Input Dims": [[4096]]},
                "ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
                stream,
                1000 + 1000 * i,
            )
        folder = tmp_path / f"r{rank}"
        folder.mkdir()
        comm = _comm(kineto.parse(t.write(folder)))
        assert all(c["group_ranks"] is None and c["bytes"] == 8192 * 2 for c in comm)
        labels.append([c["group"] for c in comm])
    assert labels == [["stream:13?1|3", "stream:17?1|3"], ["stream:13?1|4", "stream:17?1|4"]]


def test_without_pg_config_the_stream_stands_for_the_group(tmp_path: Path) -> None:
    """An older trace (no pg_config): the stream is the group, and a send's peer index a global rank."""
    t = Trace(1, None)
    t.comm(
        "c10d::send",
        SEND,
        "nccl:send 1->0",
        {"Input type": ["float"], "Input Dims": [[64, 32]]},
        "ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)",
        84,
        1000,
    )
    t.comm(
        "c10d::allreduce_",
        ALLREDUCE,
        "nccl:all_reduce",
        None,
        "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)",
        84,
        2000,
    )
    comm = _comm(kineto.parse(t.write(tmp_path)))
    # No element type anywhere for the all-reduce's tensor list: no size rather than a guess.
    assert [(c["collective"], c["group"], c["group_ranks"], c["peer"], c["bytes"]) for c in comm] == [
        ("send", "stream:84", None, 0, 64 * 32 * 4),
        ("all_reduce", "stream:84", None, None, None),
    ]


def test_a_kernels_own_collective_args_are_completed_by_record_param_comms(tmp_path: Path) -> None:
    """PyTorch copies the collective args onto the kernel but not the rank fields: a send's peer is only on its
    record_param_comms."""
    args = {
        "Collective name": "send",
        "In msg nelems": 2048,
        "Out msg nelems": 2048,
        "Group size": 2,
        "dtype": "Float",
        "Process Group Name": "1",
        "Process Group Description": "mesh_pp",
        "Process Group Ranks": "[1, 9]",
    }
    t = Trace(1, RANK1_GROUPS)
    t.events += [
        t._x("cpu_op", "c10d::send", HOST, 1000, 20, {"External id": 7, **SEND}),
        t._x(
            "cpu_op",
            "record_param_comms",
            HOST,
            1002,
            16,
            {"External id": 8, **args, "Rank": 1, "Global rank start": 1, "Global rank stride": 8},
        ),
        t._x("cuda_runtime", "cudaLaunchKernel", HOST, 1010, 5, {"External id": 8, "correlation": 9}),
        t._x(
            "kernel",
            "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)",
            21,
            1050,
            30,
            {"External id": 8, "device": DEVICE, "stream": 21, "correlation": 9, **args},
            pid=DEVICE,
        ),
    ]
    comm = _comm(kineto.parse(t.write(tmp_path)))
    assert [(c["collective"], c["group"], c["group_ranks"], c["peer"], c["bytes"]) for c in comm] == [
        ("send", "1", "1,9", 9, 2048 * 4)
    ]


def test_alignment_ignores_a_rank_outside_a_groups_members() -> None:
    """Two groups under one label: a rank that is not a member of the group it names does not join its instances."""

    def table(rank: int, end: int, members: str) -> pa.Table:
        return pa.table(
            {
                "collective": ["all_reduce"],
                "group": ["g"],
                "group_ranks": [members],
                "step": [1],
                "seq": [0],
                "peer": pa.array([None], pa.int64()),
                "start_ns": [end - 100],
                "dur_ns": [100],
            }
        )

    comm = {0: table(0, 1_000, "0,1"), 1: table(1, 5_000, "0,1"), 2: table(2, 90_000, "0,1")}
    out = align.estimate(comm, {0: "a", 1: "b", 2: "c"})
    assert out.offset_ns[1] == -4_000 and out.offset_ns[2] == 0  # rank 2 left alone: not in 0,1


@pytest.mark.slow
def test_older_nccl_traces_of_a_job_align_and_find_its_slow_link(tmp_path: Path) -> None:
    """A 2 x 2 x 4 FSDP2 job on two hosts recorded without collective args (older PyTorch): the second host's clock
    is 30 ms ahead; the send/recv and the groups the traces tell apart bring it back, and the slow link is found."""
    out = tmp_path / "job"
    simulate(
        SimConfig(
            output=out,
            shape="torch2",
            dp=2,
            tp=2,
            pp=4,
            microbatches=4,
            schedule="gpipe",
            dp_mode="fsdp",
            dp_dim="dp_shard",
            layers=8,
            hidden=1024,
            seq_len=1024,
            vocab=4096,
            steps=2,
            collective_args=False,
            seed=5,
            trace_names="window",
            faults=(parse_fault("clock_skew:nodes=1,ms=30"), parse_fault("slow_link:ranks=5-9,factor=4")),
        )
    )
    job = paradiag.open(out, cache_dir=tmp_path / "cache")
    ranks = job.ranks.to_pydict()
    offsets = dict(zip(ranks["rank"], ranks["clock_offset_ns"], strict=True))
    assert all(abs(offsets[r] + 30_000_000) < 200_000 for r in range(8, 16)) and all(
        abs(offsets[r]) < 200_000 for r in range(8)
    )
    kinds = [(f.kind, f.as_json()["culprit"]) for f in job.diagnosis().findings]
    assert any(k == "slow_link" for k, _ in kinds), kinds
