"""The Kineto parser on every real trace in ../shared/traces/gpu."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from paradiag.parsers import kineto
from tests.conftest import shared_path

pytestmark = pytest.mark.real


def kind_counts(events: pa.Table) -> dict[str, int]:
    rows = events.group_by("kind").aggregate([("dur_ns", "count")]).to_pylist()
    return {str(r["kind"]): r["dur_ns_count"] for r in rows}


def device_comm(events: pa.Table) -> pa.Table:
    is_comm = pc.equal(events.column("kind").cast(pa.string()), "communication")
    return events.filter(pc.and_(is_comm, pc.greater_equal(events.column("device"), 0)))


def test_sampled_128_rank_job_pair() -> None:
    folder = shared_path("gpu", "hta_sampled_128rank_job")
    r0 = kineto.parse(folder / "sampled_rank-0.json.gz", folder)
    r1 = kineto.parse(folder / "sampled_rank-1.json.gz", folder)
    assert (r0.rank, r1.rank) == (0, 1)
    assert r0.world_size == r1.world_size == 128
    assert r0.steps.column("step").to_pylist() == [551, 552]  # the last step is kept
    assert kind_counts(r0.events) == {
        "host": 3533,
        "annotation": 73,
        "compute": 1144,
        "memory": 50,
        "communication": 10,
    }
    comm = device_comm(r0.events)
    # SendRecv/AllReduce kernels without record_param_comms: the host operator they were launched in names the
    # collective (nccl:all_to_all runs as SendRecv kernels; it is not a pipeline send/recv).
    collectives = comm.column("collective").cast(pa.string()).to_pylist()
    assert {c: collectives.count(c) for c in set(collectives)} == {
        "all_to_all": 4,
        "all_reduce": 4,
        "all_gather": 2,
    }
    # No process-group metadata in this 2023 trace: the NCCL stream stands in for the group.
    assert set(comm.column("group").cast(pa.string()).to_pylist()) == {"stream:84", "stream:203"}
    assert r0.source == "sampled_rank-0.json.gz"


def test_nccl_job_collective_metadata_from_kernel_args() -> None:
    folder = shared_path("gpu", "hta_nccl_2rank_job")
    r = kineto.parse(folder / "nccl_data.json.gz", folder)
    assert (r.rank, r.world_size, r.device) == (0, 2, 0)
    assert r.steps.column("step").to_pylist() == [4, 5, 6]
    comm = device_comm(r.events)
    assert comm.num_rows == 21
    rows = comm.to_pylist()
    allreduce = [x for x in rows if x["collective"] == "all_reduce"]
    assert len(allreduce) == 15
    assert {x["group"] for x in allreduce} == {"0"}
    assert {x["group_ranks"] for x in allreduce} == {"0,1"}
    # Float32 all-reduce of 6,637,568 elements (read from the kernel's own args).
    assert 6637568 * 4 in {x["bytes"] for x in allreduce}
    # Instances are numbered per group within each step, so ranks can be matched.
    step5 = sorted((x["seq"], x["collective"]) for x in rows if x["step"] == 5)
    assert [s for s, _ in step5] == list(range(7))
    assert [c for _, c in step5] == ["broadcast"] * 2 + ["all_reduce"] * 5
    assert [(g.group, g.ranks, g.description) for g in r.groups] == [("0", [0, 1], "default_pg")]
    # Relative float timestamps are placed on the epoch with baseTimeNanoseconds (2024).
    assert 1_700_000_000 < r.steps.column("start_ns")[0].as_py() / 1e9 < 1_800_000_000


def test_16_rank_job_rank0() -> None:
    folder = shared_path("gpu", "hta_16rank_job_rank0")
    r = kineto.parse(folder / "rank0.json.gz", folder)
    assert (r.rank, r.world_size) == (0, 16)
    assert r.steps.column("step").to_pylist() == [550, 551, 552, 553, 554]
    counts = kind_counts(r.events)
    assert counts["communication"] == 80
    assert counts["compute"] == 6000
    assert counts["memory"] == 1390 + 277


def test_b200_trace_with_nccl_dev_kernels_and_pg_config() -> None:
    folder = shared_path("gpu", "tracelens_b200")
    r = kineto.parse(folder / "eager_trace.json.gz", folder)
    assert (r.rank, r.world_size) == (0, 8)
    comm = device_comm(r.events).to_pylist()
    assert len(comm) == 1
    assert comm[0]["collective"] == "all_gather"
    assert comm[0]["group"] == "3"
    assert comm[0]["group_ranks"] == "0,1,2,3,4,5,6,7"
    assert comm[0]["bytes"] == 201088 * 2  # BFloat16 output
    assert comm[0]["seq"] == 0  # no ProfilerStep in this trace: instances still numbered
    assert {g.group for g in r.groups} >= {"0", "1", "3", "69", "70"}
    assert r.steps.num_rows == 0


def test_legacy_category_names() -> None:
    folder = shared_path("gpu", "kineto_legacy_resnet50")
    r = kineto.parse(next(folder.glob("*.json.gz")), folder)
    assert r.rank is None and r.rank_from == "assigned"
    assert any("rank assigned" in w for w in r.warnings)
    counts = kind_counts(r.events)
    assert counts["compute"] == 8772  # 'Kernel'
    assert counts["memory"] == 312 + 12  # 'Memset' + 'Memcpy'
    assert r.steps.column("step").to_pylist() == [5, 6, 7, 8, 9, 10]
    # GPU work is attributed to the step of its launch ('Runtime' events in legacy traces).
    steps = r.events.filter(pc.equal(r.events.column("kind").cast(pa.string()), "compute")).column("step")
    assert pc.min(steps).as_py() >= 5


@pytest.mark.parametrize(
    ("name", "rank", "world", "device_type"),
    [
        ("rank_non_gpu.json.gz", 0, None, "cpu"),
        ("distributed_info_not_found.json.gz", None, None, "cpu"),
        ("rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz", 34, 300, "cpu"),
    ],
)
def test_edge_cases(name: str, rank: int | None, world: int | None, device_type: str) -> None:
    folder = shared_path("gpu", "edge_cases")
    r = kineto.parse(folder / name, folder)
    assert (r.rank, r.world_size, r.device_type) == (rank, world, device_type)
    assert r.events.num_rows > 0


def test_event_table_stays_narrow() -> None:
    """The in-memory table costs at most 64 bytes per event on a real 109k-event trace (HTA: ~200)."""
    folder = shared_path("gpu", "hta_16rank_job_rank0")
    r = kineto.parse(folder / "rank0.json.gz", folder)
    assert r.events.nbytes / r.events.num_rows <= 64
