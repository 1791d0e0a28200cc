"""Unit tests of the analysis functions on small hand-built tables, with exact expected values."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from paradiag import align, schema
from paradiag.analysis import comm, findings, stages
from paradiag.analysis.cluster_csv import read_cluster_step_trace_time, slow_rank
from paradiag.analysis.frame import concat, device_frame, find_rows, robust_z, table_frame, weighted_median
from paradiag.analysis.layout import parallel_layout, role_from_description
from paradiag.analysis.operators import concentration, operator_imbalance, short_name


def events(rows: list[dict[str, Any]]) -> pa.Table:
    """An events table from a few rows; unspecified columns take neutral values."""
    defaults = {
        "device": 0,
        "track": 7,
        "kind": "compute",
        "category": "kernel",
        "step": 0,
        "correlation": -1,
        "external_id": -1,
    }
    full = [{**defaults, **r} for r in rows]
    names = [f.name for f in schema.EVENTS]
    return schema.build(schema.EVENTS, {n: [r.get(n) for r in full] for n in names})


def coll(
    rank: int, start: int, end: int, group: str = "g", seq: int = 0, kind: str = "all_reduce", **kw: Any
) -> dict[str, Any]:
    return {
        "rank": rank,
        "kind": "communication",
        "name": kind,
        "start_ns": start,
        "dur_ns": end - start,
        "collective": kind,
        "group": group,
        "seq": seq,
        "bytes": 1000,
        **kw,
    }


def kernel(rank: int, name: str, start: int, end: int, step: int = 0) -> dict[str, Any]:
    return {"rank": rank, "name": name, "start_ns": start, "dur_ns": end - start, "step": step}


def ranks_table(n: int, hosts: list[str] | None = None, **coords: list[int | None]) -> pa.Table:
    cols: dict[str, Any] = {
        "rank": list(range(n)),
        "host": hosts or ["h0"] * n,
        "device": list(range(n)),
        "device_type": ["gpu"] * n,
        "clock_offset_ns": [0] * n,
        "format": ["kineto"] * n,
        "source": [f"r{i}" for i in range(n)],
        "num_events": [0] * n,
    }
    cols.update(coords)
    return schema.build(schema.RANKS, cols)


def groups_table(groups: dict[str, tuple[str | None, list[int]]]) -> pa.Table:
    return schema.build(
        schema.GROUPS,
        {
            "group": list(groups),
            "description": [d for d, _ in groups.values()],
            "ranks": [m for _, m in groups.values()],
        },
    )


# ---- layout ----


def test_layout_from_rank_coordinates() -> None:
    ranks = ranks_table(4, dp=[0, 1, 0, 1], tp=[0, 0, 0, 0], pp=[0, 0, 1, 1])
    layout = parallel_layout(ranks, groups_table({}))
    assert layout.found_by == "metadata:coordinates"
    assert layout.stages == [[0, 1], [2, 3]]
    assert layout.size == {"dp": 2, "tp": 1, "pp": 2, "ep": 1}


def test_layout_from_group_names() -> None:
    groups = groups_table(
        {
            "0": ("default_pg", [0, 1, 2, 3]),
            "1": ("TENSOR_MODEL_PARALLEL_GROUP", [0, 1]),
            "2": ("TENSOR_MODEL_PARALLEL_GROUP", [2, 3]),
            "3": ("PIPELINE_MODEL_PARALLEL_GROUP", [0, 2]),
            "4": ("PIPELINE_MODEL_PARALLEL_GROUP", [1, 3]),
        }
    )
    layout = parallel_layout(ranks_table(4), groups)
    assert layout.found_by == "metadata:group_names"
    assert layout.stages == [[0, 1], [2, 3]]
    assert layout.coords[3] == {"dp": 0, "tp": 1, "pp": 1, "ep": 0}
    assert layout.roles == {"0": "world", "1": "tp", "2": "tp", "3": "pp", "4": "pp"}


def test_role_from_description() -> None:
    assert role_from_description("EXPERT_MODEL_PARALLEL_GROUP", 4, 8) == "ep"
    assert role_from_description("dp", 2, 8) == "dp"
    # dp x cp's gradient group (torchtitan's flattened mesh_dp_cp, Ascend's dp_cp): a dp group spanning cp too,
    # which the dp axis takes whole (it holds the dp and cp groups' members).
    assert role_from_description("dp_cp", 2, 8) == "dp"
    for name, role in (
        ("mesh_dp", "dp"),
        ("mesh_dp_shard", "dp"),
        ("mesh_dp_replicate", "dp"),
        ("mesh_pp", "pp"),
        ("mesh_tp", "tp"),
        ("mesh_cp", "cp"),
        ("mesh_ep", "ep"),
    ):
        assert role_from_description(name, 2, 8) == role
    assert role_from_description("undefined", 2, 8) is None
    assert role_from_description("hccl_world_group", 8, 8) == "world"


def test_layout_inferred_from_traffic() -> None:
    """No coordinates, no names: stage 1 = {2, 3} because ranks 0 and 1 send to them first; the busy group is TP."""
    rows = [
        {**coll(0, 0, 10, group="p0", kind="send"), "peer": 2},
        {**coll(2, 0, 10, group="p0", kind="recv"), "peer": 0},
        {**coll(1, 0, 10, group="p1", kind="send"), "peer": 3},
        {**coll(3, 0, 10, group="p1", kind="recv"), "peer": 1},
    ]
    for seq in range(6):
        for r, g in ((0, "t0"), (1, "t0"), (2, "t1"), (3, "t1")):
            rows.append(coll(r, 20 + seq, 21 + seq, group=g, seq=seq, kind="all_gather"))
    groups = groups_table(
        {"p0": (None, [2, 0]), "p1": (None, [1, 3]), "t0": (None, [0, 1]), "t1": (None, [2, 3])}
    )
    layout = parallel_layout(ranks_table(4), groups, device_frame(events(rows)))
    assert layout.found_by == "inferred:communication"
    assert layout.roles == {"p0": "pp", "p1": "pp", "t0": "tp", "t1": "tp"}
    assert layout.stages == [[0, 1], [2, 3]]


# ---- communication ----


def test_collective_instance_wait_skew_transfer() -> None:
    frame = device_frame(events([coll(0, 0, 50), coll(1, 10, 50), coll(2, 30, 52)]))
    part = comm.collective_participation(frame)
    assert part.column("wait_ns").to_pylist() == [30, 20, 0]
    inst = comm.collective_instances(part).to_pylist()[0]
    assert (inst["skew_ns"], inst["late_rank"], inst["transfer_ns"], inst["total_wait_ns"]) == (30, 2, 22, 50)
    assert inst["busbw_gbps"] == pytest.approx(1000 * (2 * 2 / 3) / 22)


def test_bus_bandwidth_uses_the_group_size_and_is_nan_when_unknown() -> None:
    """Two profiled members of an 8-rank group move 8 ranks' data; one member or unknown bytes: no figure."""
    two = comm.collective_participation(device_frame(events([coll(0, 0, 50), coll(1, 10, 50)])))
    assert comm.collective_instances(two, {"g": 8}).column("busbw_gbps")[0].as_py() == pytest.approx(
        1000 * (2 * 7 / 8) / 40
    )
    one = comm.collective_instances(
        comm.collective_participation(device_frame(events([coll(0, 0, 50)])))
    ).to_pylist()[0]
    unknown = comm.collective_instances(
        comm.collective_participation(
            device_frame(events([coll(0, 0, 50, bytes=None), coll(1, 0, 50, bytes=None)]))
        )
    )
    assert np.isnan(one["busbw_gbps"]) and np.isnan(unknown.column("busbw_gbps")[0].as_py())


def test_comm_matrix_from_measured_links() -> None:
    """Ascend per-link traffic, group-local ranks of a world-spanning group, LOCAL copies left out."""
    links = pa.table(
        {
            "group": ["w"] * 3, "src_rank": [0, 0, 0], "dst_rank": [1, 0, 3], "src_global": pa.nulls(3, pa.int32()),
            "dst_global": pa.nulls(3, pa.int32()), "transport": ["HCCS", "LOCAL", "RDMA"], "bytes": [4000, 10, 2000],
            "transit_ns": [2000, 1, 4000], "op_type": ["allreduce"] * 3,
        }
    )  # fmt: skip
    empty = comm.collective_instances(comm.collective_participation(device_frame(events([]))))
    matrix = comm.comm_matrix(empty, comm.p2p_transfers(device_frame(events([]))), {}, {}, links, world=4)
    assert [(m["src"], m["dst"], m["link_type"], m["bytes"], m["bandwidth_gbps"]) for m in matrix] == [
        (0, 1, "intra", 4000, 2.0),
        (0, 3, "inter", 2000, 0.5),
    ]
    assert comm.comm_matrix(empty, comm.p2p_transfers(device_frame(events([]))), {}, {}, links, world=8) == []


def test_p2p_matching_and_wait() -> None:
    rows = [
        {**coll(0, 100, 105, group="p", kind="send"), "peer": 1},
        {**coll(1, 50, 130, group="p", kind="recv"), "peer": 0},
        {**coll(0, 200, 205, group="p", kind="send", seq=1), "peer": 1},
        {**coll(1, 210, 212, group="p", kind="recv", seq=1), "peer": 0},
    ]
    p2p = comm.p2p_transfers(device_frame(events(rows))).to_pylist()
    # The transfer is the shorter kernel (no clock involved); only the first receive was posted before its data.
    assert [(r["src"], r["dst"], r["wait_ns"], r["transfer_ns"], r["receiver_waited"]) for r in p2p] == [
        (0, 1, 50, 5, True),
        (0, 1, 0, 2, False),
    ]
    waits = comm.rank_waits(
        comm.collective_participation(device_frame(events(rows))), pa.Table.from_pylist(p2p)
    )
    assert waits == {(1, 0): {"wait_ns": 50, "caused_ns": 0}, (0, 0): {"wait_ns": 0, "caused_ns": 50}}


def test_comm_matrix_ring_links() -> None:
    part = comm.collective_participation(device_frame(events([coll(0, 0, 10), coll(1, 0, 10)])))
    matrix = comm.comm_matrix(
        comm.collective_instances(part),
        comm.p2p_transfers(device_frame(events([]))),
        {"g": [0, 1]},
        {0: "a", 1: "b"},
    )
    assert matrix == [
        {
            "src": 0,
            "dst": 1,
            "link_type": "inter",
            "bytes": 1000,
            "time_ns": 10,
            "instances": 1,
            "bandwidth_gbps": 100.0,
        },
        {
            "src": 1,
            "dst": 0,
            "link_type": "inter",
            "bytes": 1000,
            "time_ns": 10,
            "instances": 1,
            "bandwidth_gbps": 100.0,
        },
    ]


def test_comm_matrix_send_recv_rate_from_receives_that_waited() -> None:
    # 0 -> 1: the receive waits, the 5 ns send is the transfer; 0 -> 1 again: the receive comes late and lasts a
    # 2 ns copy. 1 -> 0: every receive waits, 10 ns transfers. Same bytes per transfer everywhere.
    rows = [
        {**coll(0, 100, 105, group="p", kind="send"), "peer": 1},
        {**coll(1, 50, 130, group="p", kind="recv"), "peer": 0},
        {**coll(0, 200, 205, group="p", kind="send", seq=1), "peer": 1},
        {**coll(1, 210, 212, group="p", kind="recv", seq=1), "peer": 0},
        {**coll(1, 300, 310, group="p", kind="send", seq=2), "peer": 0},
        {**coll(0, 250, 320, group="p", kind="recv", seq=2), "peer": 1},
    ]
    p2p = comm.p2p_transfers(device_frame(events(rows)))
    empty = comm.collective_instances(comm.collective_participation(device_frame(events([]))))
    cells = {(c["src"], c["dst"]): c for c in comm.comm_matrix(empty, p2p, {}, {0: "a", 1: "b"})}
    # Both transfers of 0 -> 1 are priced at the measured 5 ns (not 5 + 2): the late receive does not make it fast.
    assert cells[(0, 1)]["time_ns"] == 10 and cells[(0, 1)]["instances"] == 2
    assert cells[(1, 0)]["time_ns"] == 10
    assert (cells[(0, 1)]["bandwidth_gbps"], cells[(1, 0)]["bandwidth_gbps"]) == (200.0, 100.0)


# ---- stages ----


def test_split_passes_cuts_at_last_forward_kernel() -> None:
    # classes: -1 forward-only, 0 either (GEMM), 1 backward; one p2p-bounded segment then another
    classes = np.array([-1, 0, -1, 0, 1, 0, -1, 0])
    segment = np.array([0, 0, 0, 0, 0, 0, 1, 1])
    pass_id, backward = stages.split_passes(classes, segment)
    assert pass_id.tolist() == [0, 0, 0, 1, 1, 1, 2, 2]
    assert backward.tolist() == [False, True, False]


def test_split_passes_cuts_a_backward_pass_running_into_the_next_forward() -> None:
    """Stage 0 of 1F1B: a backward pass, then the next micro-batch's forward with no p2p between them; a stray
    unnamed kernel or two at the end of a backward pass stays in it."""
    classes = np.array([1, 0, 1, 0, -1, 0, -1, -1, 0, 1, 0, -1])
    segment = np.array([0] * 9 + [1] * 3)
    pass_id, backward = stages.split_passes(classes, segment)
    assert pass_id.tolist() == [0, 0, 0, 0, 1, 1, 1, 1, 1, 2, 2, 2]
    assert backward.tolist() == [True, False, True]


def test_theoretical_bubble_and_interleaved_order() -> None:
    assert stages.theoretical_bubble(4, 8) == pytest.approx(3 / 11)
    assert stages.theoretical_bubble(4, 8, 2) == pytest.approx(3 / 19)
    assert stages.theoretical_bubble(1, 8) == 0.0
    # p=2, v=2: forward passes go mb 0,1 on chunk 0, then mb 0,1 on chunk 1, then mb 2,3 on chunk 0 ...
    assert [stages.chunk_and_micro_batch(k, 2, 2, False) for k in range(6)] == [
        (0, 0),
        (0, 1),
        (1, 0),
        (1, 1),
        (0, 2),
        (0, 3),
    ]
    assert stages.chunk_and_micro_batch(0, 2, 2, True) == (1, 0)


def test_pipeline_passes_and_stage_metrics() -> None:
    """Two stages, two micro-batches: stage 1 computes twice as long per micro-batch."""
    rows = []
    for mb in range(2):
        t = mb * 100
        rows += [
            kernel(0, "layer_norm_fwd", t, t + 10),
            {**coll(0, t + 10, t + 11, group="p", kind="send", seq=mb), "peer": 1},
        ]
        rows += [
            {**coll(1, t + 10, t + 12, group="p", kind="recv", seq=mb), "peer": 0},
            kernel(1, "layer_norm_fwd", t + 12, t + 32),
        ]
    rows += [kernel(0, "layer_norm_grad", 300, 310), kernel(1, "layer_norm_grad", 250, 270)]
    per_rank = [stages.rank_pass_table(f) for f in device_frame(events(rows)).by_rank().values()]
    ranked = [t.add_column(0, "rank", pa.array([r] * t.num_rows, pa.int32())) for r, t in enumerate(per_rank)]
    assert [
        stages.virtual_stages(pa.concat_tables(ranked), [0], 2),
        ranked[0].column("chunks")[0].as_py(),
    ] == [1, 1]
    passes = stages.number_passes(pa.concat_tables(ranked), {0: 0, 1: 1}, 1, 2)
    rank1 = [
        (p["direction"], p["micro_batch"], p["start_ns"], p["end_ns"])
        for p in passes.to_pylist()
        if p["rank"] == 1
    ]
    assert rank1 == [("forward", 0, 12, 32), ("forward", 1, 112, 132), ("backward", 0, 250, 270)]
    metrics = stages.stage_metrics(passes, [[0], [1]], 1, 1000)
    assert [s["compute_per_micro_batch_ns"] for s in metrics["stages"]] == [15, 30]
    assert metrics["imbalance"] == pytest.approx(30 / 22.5, abs=1e-4)
    assert metrics["bottleneck_stage"] == 1
    assert metrics["balanced_step_time_ns"] == int(1000 - (2 + 1) * (30 - 22.5))
    assert stages.schedule_kind(passes, 2, 1) == "gpipe"
    assert (
        stages.stage_metrics(passes.filter(pc.equal(passes.column("rank"), 0)), [[0]], 1, 1000) == {}
    )  # no pipeline


def test_impact_is_capped_by_the_waits_caused() -> None:
    """Rank 2 computes 100 more than its peers; where waits are seen but nobody waited for it, nothing is lost."""
    figures = {
        (r, 0): {"compute_ns": c, "launch_delay_ns": 10, "idle_ns": 0, "step_ns": 1000}
        for r, c in enumerate([500, 500, 600])
    }
    frame = device_frame(events([kernel(r, "gemm_fwd", 0, c) for r, c in enumerate([500, 500, 600])]))
    waited = {(0, 0): {"wait_ns": 40, "caused_ns": 0}, (2, 0): {"wait_ns": 0, "caused_ns": 30}}
    (f,) = findings.rank_findings(frame, figures, [[0, 1, 2]], {}, waited, 1000)
    assert f.culprit.ranks == [2] and f.impact_pct == pytest.approx(3.0)
    absorbed = {(0, 0): {"wait_ns": 40, "caused_ns": 0}, (1, 0): {"wait_ns": 0, "caused_ns": 40}}
    assert findings.rank_findings(frame, figures, [[0, 1, 2]], {}, absorbed, 1000) == []


@pytest.mark.parametrize(
    ("schedule", "pp", "virtual"), [("1f1b", 4, 1), ("gpipe", 3, 1), ("interleaved", 2, 2), ("1f1b", 2, 1)]
)
def test_send_recv_peers_inferred_without_rank(tmp_path: Any, schedule: str, pp: int, virtual: int) -> None:
    """Simulated traces without the send/recv "Rank": every inferred peer is the one the full trace names."""
    import paradiag
    from paradiag.analysis.frame import job_frame
    from paradiag.simulator import SimConfig, simulate

    peers = []
    for named in (True, False):
        out = tmp_path / f"job{named}"
        settings = {
            "pp": pp,
            "dp": 2,
            "microbatches": 2 * pp,
            "steps": 2,
            "layers": 2 * pp * virtual,
            "schedule": schedule,
            "virtual_stages": virtual,
        }
        simulate(
            SimConfig(
                output=out, hidden=256, heads=4, seq_len=128, vocab=1024, p2p_peer=named, seed=2, **settings
            )
        )
        job = paradiag.open(out, cache_dir=tmp_path / f"cache{named}")
        frame = job_frame(job)
        members = {
            g: list(m)
            for g, m in zip(
                job.groups.column("group").to_pylist(), job.groups.column("ranks").to_pylist(), strict=True
            )
        }
        comm.infer_peers(frame, members, parallel_layout(job.ranks, job.groups, frame).stage_of)
        peers.append(frame.peer[np.isin(frame.collective, frame.codes("collectives", ("send", "recv")))])
    assert len(peers[0]) > 0 and (peers[1] == peers[0]).all()


# ---- operators ----


def test_weighted_median_counts_each_value_by_its_weight() -> None:
    # eight passes of 1.8 ms and a lump of 10.2 ms: by their own compute the typical pass is 1.8 ms, while four
    # beside it hold less than half the compute
    passes = [1.8] * 8 + [10.2]
    assert weighted_median(passes, passes) == 1.8
    assert weighted_median(passes[4:], passes[4:]) == 10.2
    assert weighted_median([1.0, 3.0, 2.0], [1.0, 1.0, 5.0]) == 2.0
    assert weighted_median([], []) is None


def test_robust_z_and_short_name() -> None:
    z = robust_z(np.array([10.0, 10.0, 11.0, 9.0, 20.0]))
    assert z[-1] == pytest.approx(10 / 1.4826)
    assert short_name("void flash_fwd_kernel<Traits<128>>(Params)") == "flash_fwd_kernel"


def test_operator_imbalance_names_rank_and_excess() -> None:
    rows = [kernel(r, "gemm", 0, 100) for r in range(3)] + [
        kernel(r, "attn", 100, 150 if r != 2 else 250) for r in range(3)
    ]
    top = operator_imbalance(device_frame(events(rows)), [[0, 1, 2]])[0]
    assert (
        top["operator"],
        top["rank"],
        top["time_ns"],
        top["peer_median_ns"],
        top["excess_ns"],
        top["ratio"],
    ) == ("attn", 2, 150, 50, 100, 3.0)


def test_concentration() -> None:
    hot, rest = concentration({1: 90.0, 2: 5.0, 3: 5.0}, {1: 180.0, 2: 100.0, 3: 100.0})
    assert hot == [1]
    assert rest == pytest.approx(200 / 190)


# ---- findings ----


def test_rank_excess_leave_one_out() -> None:
    figures = {
        (r, 0): {"compute_ns": c, "launch_delay_ns": 10, "idle_ns": 0, "step_ns": 1000}
        for r, c in enumerate([500, 510, 600])
    }
    rows = findings.rank_excess(figures, [[0, 1, 2]], 1000)
    assert rows == [
        {
            "rank": 2,
            "step": 0,
            "part": "compute_ns",
            "excess_ns": 95,
            "value_ns": 600,
            "peer_ns": 505,
            "clear": True,
        }
    ]  # 19x further from its peers than they stray from each other: beyond doubt


def test_stage_and_clock_findings() -> None:
    metrics = {
        "num_stages": 2,
        "imbalance": 1.5,
        "step_time_ns": 1000,
        "balanced_step_time_ns": 800,
        "bottleneck_stage": 1,
        "stages": [
            {"stage": 0, "ranks": [0], "compute_per_micro_batch_ns": 50},
            {"stage": 1, "ranks": [1], "compute_per_micro_batch_ns": 150},
        ],
    }
    (f,) = findings.stage_findings(metrics)
    assert (f.kind, f.culprit.as_json(), f.impact_pct, f.severity) == (
        "stage_imbalance",
        {"stage": 1, "ranks": [1]},
        20.0,
        "high",
    )
    ranks = ranks_table(2, hosts=["a", "b"]).set_column(9, "clock_offset_ns", pa.array([0, -3_000_000]))
    (c,) = findings.clock_findings(ranks)
    assert (c.kind, c.culprit.as_json(), c.impact_pct) == ("clock_skew", {"ranks": [1], "hosts": ["b"]}, 0.0)


def test_slow_link_from_collective_groups() -> None:
    """Four TP pairs run the same all-gather; pair (2, 3) takes 4x longer once both have arrived."""
    rows = []
    for g, (a, b) in enumerate([(0, 1), (2, 3), (4, 5), (6, 7)]):
        for seq in range(3):
            t = seq * 1000
            dur = 400 if g == 1 else 100
            rows += [
                coll(a, t, t + dur, group=str(g), seq=seq, kind="all_gather"),
                coll(b, t, t + dur, group=str(g), seq=seq, kind="all_gather"),
            ]
    frame = device_frame(events(rows))
    inst = comm.collective_instances(comm.collective_participation(frame))
    members = {str(g): [2 * g, 2 * g + 1] for g in range(4)}
    (f,) = findings.link_findings(
        inst, comm.p2p_transfers(frame), members, dict.fromkeys(range(8), "h"), 10_000, 1
    )
    assert f.kind == "slow_link"
    assert f.culprit.link == [2, 3]
    assert f.impact_pct == pytest.approx(100 * 3 * 300 / 10_000)


def test_a_slow_group_link_names_every_rank_of_it() -> None:
    """Four DP groups of four ranks run the same all-reduce; group (4, 5, 6, 7) takes 4x longer: the evidence
    names the group's ranks, not two of them and an ellipsis."""
    rows = []
    for g in range(4):
        for seq in range(3):
            t = seq * 1000
            dur = 400 if g == 1 else 100
            rows += [coll(4 * g + i, t, t + dur, group=str(g), seq=seq, kind="all_reduce") for i in range(4)]
    frame = device_frame(events(rows))
    inst = comm.collective_instances(comm.collective_participation(frame))
    members = {str(g): [4 * g + i for i in range(4)] for g in range(4)}
    (f,) = findings.link_findings(
        inst, comm.p2p_transfers(frame), members, dict.fromkeys(range(16), "h"), 10_000, 1
    )
    assert f.culprit.ranks == [4, 5, 6, 7]
    assert f.evidence.startswith("link of ranks 4, 5, 6, 7 (intra-node)")


# ---- aggregated Ascend cluster step times ----


def test_cluster_csv_slow_rank(tmp_path: Any) -> None:
    header = "Step,Type,Index,Computing,Communication(Not Overlapped),Overlapped,Communication,Free,Stage,Bubble,Communication(Not Overlapped and Exclude Receive)\n"
    lines = [f"1,rank,{r},100,{50 if r != 2 else 30},0,0,{10 if r != 2 else 30},0,0,0\n" for r in range(4)]
    lines.append('1,stage,"(0, 1, 2, 3)",100,50,0,0,30,0,0,0\n')
    (tmp_path / "cluster_step_trace_time.csv").write_text(header + "".join(lines))
    table, stages_listed = read_cluster_step_trace_time(tmp_path)
    assert stages_listed == [[0, 1, 2, 3]]
    assert table.column("free_ns").to_pylist() == [10_000, 10_000, 30_000, 10_000]
    found = slow_rank(table, stages_listed)
    assert found is not None and (found["rank"], found["kind"], found["own_ns"]) == (2, "host_stall", 130_000)


# ---- clock alignment through transfers ----


def p2p_table(rows: list[tuple[str, int, int, int, int]]) -> pa.Table:
    """(collective, peer, seq, start, dur) rows of one rank's send/recv kernels in one pipeline group."""
    return pa.table(
        {
            "collective": [r[0] for r in rows],
            "group": ["pp"] * len(rows),
            "group_ranks": ["0,1"] * len(rows),
            "peer": pa.array([r[1] for r in rows], pa.int32()),
            "step": [0] * len(rows),
            "seq": [r[2] for r in rows],
            "start_ns": [r[3] for r in rows],
            "dur_ns": [r[4] for r in rows],
        }
    )


def test_alignment_ignores_receives_that_found_their_data_waiting() -> None:
    """Rank 1 (another host, same clock) is the busy last stage: its receives are posted long after rank 0's
    sends ended and last 6 us; only rank 0's receives, posted before rank 1 sent, time the clocks."""
    send_us, late_us = 100_000, 700_000
    r0, r1 = [], []
    for k in range(8):
        t = 10**9 + k * 5_000_000
        r0.append(("send", 1, k, t, send_us))
        r1.append(("recv", 0, k, t + send_us + late_us, 6_000))
        r1.append(("send", 0, k, t + 2_000_000, send_us))
        r0.append(("recv", 1, k, t + 1_000_000, 1_000_000 + send_us + 2_000))
    result = align.estimate({0: p2p_table(r0), 1: p2p_table(r1)}, {0: "hostA", 1: "hostB"})
    assert abs(result.offset_ns[1]) < 5_000


def test_frames_merge_onto_shared_lists_and_give_their_arrays_up() -> None:
    """concat maps each rank's string codes onto one list (in order of first use) and empties the parts as it
    merges them, so that a job's events are never held twice."""
    a = table_frame(
        pa.table(
            {
                "rank": pa.array([0, 0], pa.int32()),
                "name": pa.array(["mm", "ar"]).dictionary_encode(),
                "start": pa.array([1, 2]),
            }
        )
    )
    b = table_frame(
        pa.table(
            {
                "rank": pa.array([1], pa.int32()),
                "name": pa.array(["zz"]).dictionary_encode(),
                "start": pa.array([3]),
            }
        )
    )
    merged = concat([a, b])
    assert merged.names == ["ar", "mm", "zz"]
    assert [merged.names[c] for c in merged.name] == ["mm", "ar", "zz"]
    assert (
        merged.rank.tolist() == [0, 0, 1]
        and merged.start.tolist() == [1, 2, 3]
        and merged.op.tolist() == [-1, -1, -1]
    )
    assert len(a.rank) == len(a.name) == len(b.start) == 0
    kept = merged.take(slice(None))
    merged.keep(np.array([2, 0]))
    assert [merged.names[c] for c in merged.name] == ["zz", "mm"] and len(kept) == 3


def test_find_rows_joins_on_every_column() -> None:
    keys = np.array([[1, 2, 3], [1, 2, 4], [0, 9, 9], [5, 5, 5]])
    query = np.array([[1, 2, 4], [1, 2, 5], [5, 5, 5], [0, 9, 9], [1, 2, 3], [-1, -1, -1], [5, 5, 5]])
    assert find_rows(keys, query).tolist() == [1, -1, 3, 2, 0, -1, 3]
    assert find_rows(keys[:0], query).tolist() == [-1] * len(query)
    assert find_rows(keys, query[:0]).tolist() == []


def test_strays_are_each_ranks_others_leave_one_out_excesses() -> None:
    """findings._strays (every rank at once, medians without two values read off the sorted ones) gives what
    _excess of the peers without that rank gives, ties, missing figures and peer sets of 1 to 9 included."""
    rng = np.random.default_rng(7)
    for trial in range(200):
        n = int(rng.integers(1, 10))
        peers = list(range(n))
        steps = [0, 1, 2]
        figures = {
            (r, s): {
                "compute_ns": int(rng.choice([100, 200, 300]) if trial % 3 == 0 else rng.integers(0, 10**9))
            }
            for r in peers
            for s in steps
            if rng.random() > 0.15
        }
        got = findings._strays(figures, peers, steps, "compute_ns")
        for r in peers:
            others = [p for p in peers if p != r]
            want = [
                e
                for per in findings._excess(figures, others, steps, "compute_ns").values()
                for e in per.values()
            ]
            assert sorted(got[r]) == sorted(float(e) for e in want), (trial, r)  # exact: ints and halves
