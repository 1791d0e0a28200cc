"""One HCCL op of one rank in the Ascend text export: host call, device tasks, HCCL op and plane tasks,
kernel_details row, communication.json entry and communication_matrix.json links."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from paradiag.simulator import kernels
from paradiag.simulator.engine import Record
from paradiag.simulator.writers import ascend_tables as tables
from paradiag.simulator.writers.ascend_trace import HCCL, HOST_COMM, MATRIX_TYPE, STREAMS, nbytes

if TYPE_CHECKING:
    from paradiag.simulator.writers.ascend_trace import StepRender

MOVED = {
    "allreduce": lambda n: 2 * (n - 1) / n,
    "_allgather_base": lambda n: (n - 1) / n,
    "_reduce_scatter_base": lambda n: (n - 1) / n,
    "alltoall_base": lambda n: (n - 1) / n,
}


def _describe(rec: Record) -> tuple[str, Any, int, str, float, int | None]:
    """(collective, group, payload bytes, HCCL dtype, transfer us, peer) of a C, S or R record."""
    if rec[0] == "C":
        coll, group, _, transfer = rec[9]
        return (
            coll.collective,
            group,
            nbytes(max(coll.in_nelems, coll.out_nelems), coll.dtype),
            kernels.HCCL_TYPES.get(coll.dtype, "FP32"),
            transfer,
            None,
        )
    peer, nelems, group, transfer = rec[9]
    return rec[1], group, nbytes(nelems, "BFloat16"), "BF16", transfer, peer


def render_comm(r: StepRender, rec: Record) -> None:
    s = r.s
    collective, group, size, dtype, transfer, peer = _describe(rec)
    hcom = kernels.HCCL_COLL[collective]
    counter_key = (group.index, hcom)
    index = s.op_counter.get(counter_key, 0)
    s.op_counter[counter_key] = index + 1
    name = f"{hcom}_{s.w.op_tags[group.index]}_{index}_1"
    gid = s.w.group_ids[group.index]
    start, dur = rec[6], rec[7]
    transfer = min(max(transfer, 0.0), dur)
    wait = dur - transfer
    inter = len({s.job.mesh.node(x) for x in group.ranks}) > 1
    link, transport = ("RDMA", "RDMA") if inter else ("HCCS", "SDMA")

    me = group.ranks.index(s.rank)
    dst = group.ranks.index(peer) if peer is not None else (me + 1) % group.size
    src, dst = (dst, me) if collective == "recv" else (me, dst)
    moved = size * MOVED.get(collective, lambda n: 1.0)(group.size)
    if collective not in ("send", "recv"):
        # this rank's own link carries its share at that link's speed; the rest of the ring time is waiting
        bw, lat = s.job.link(group.ranks[src], group.ranks[dst], r.step)
        transfer = min(transfer, moved / (bw * 1e3) + lat)
        wait = dur - transfer

    r.cpu(HOST_COMM[collective], rec[2], rec[3])
    cid = r.launch(rec, f"HCCL@{hcom}")
    stream = STREAMS[rec[8]]
    if wait > 0.001:
        r.task(rec, "Notify Wait", "Notify Wait", cid, start, wait, stream)
    r.task(
        rec, "RDMASend" if inter else "SDMA", "RDMA" if inter else "SDMA", cid, start + wait, transfer, stream
    )
    count = size // (2 if dtype == "BF16" else 4 if dtype == "FP32" else 8)
    r.event(
        name,
        HCCL,
        s.group_tid[group.index],
        start,
        dur,
        f'"connection_id": {cid}, "model id": 4294967295, "data_type": "{dtype}", "alg_type": "{"MESH-RING" if not inter else "RING-HD"}", "count": {count}',
    )
    plane = f'"stream id": {stream}, "task id": {s.task_ids.get(stream, 0)}, "context id": 0, "model id": 4294967295'
    if wait > 0.001:
        r.event(
            "Notify_Wait",
            HCCL,
            1,
            start,
            wait,
            f'"notify_id": "0", "duration estimated(us)": 1, {plane}, "task type": "Notify_Wait", "src rank": {src}, "dst rank": {dst}, "transport type": "{transport}", "size(Byte)": 0, "data type": "INVALID_TYPE", "link type": "INVALID_TYPE", "bandwidth(GB/s)": 0.0',
        )
    bw = moved / 1e3 / transfer if transfer > 0 else 0.0
    r.event(
        "RDMASend" if inter else "Memcpy",
        HCCL,
        1,
        start + wait,
        transfer,
        f'"notify_id": "18446744073709551615", "duration estimated(us)": {transfer:.3f}, {plane}, "task type": "{"RDMASend" if inter else "Memcpy"}", "src rank": {src}, "dst rank": {dst}, "transport type": "{transport}", "size(Byte)": {int(moved)}, "data type": "{dtype}", "link type": "{"ROCE" if inter else "HCCS"}", "bandwidth(GB/s)": {bw:.4f}',
    )

    r.comm_spans.append((start, start + dur))
    if collective == "recv":
        r.bubble += dur
    r.kernel_row(name, hcom, "HCCL", "N/A", "N/A", start, dur, "")
    kind = "p2p" if collective in ("send", "recv") else "collective"
    r.comm[kind][f"{name}@{gid}"] = tables.op_entry(
        s.epoch_us(start), dur, transfer, link, moved / 1e6, max(1, int(moved // (8 << 20)) or 1)
    )
    r.matrix_instances.setdefault((kind, MATRIX_TYPE[collective], gid), []).append(
        (name, _links(collective, group.size, me, src, dst, moved, transfer, link))
    )


def _links(
    collective: str, n: int, me: int, src: int, dst: int, moved: float, transfer_us: float, link: str
) -> dict[str, Any]:
    """This rank's links of one op, group-local ranks ``src-dst``."""
    ms = max(transfer_us, 1e-3) / 1e3

    def entry(size: float, transport: str) -> dict[str, Any]:
        mb = size / 1e6
        return {
            "Transport Type": transport,
            "Transit Size(MB)": mb,
            "Transit Time(ms)": ms,
            "Bandwidth(GB/s)": round(mb / ms, 4),
        }

    if collective == "alltoall_base":
        return {f"{me}-{j}": entry(moved / max(n - 1, 1), link if j != me else "LOCAL") for j in range(n)}
    # the self link ("LOCAL") is how msprof-analyze maps a group's local ranks to global ranks
    local = moved / n if collective not in ("send", "recv") else moved / 64
    return {
        f"{src}-{dst}": entry(moved, link),
        f"{me}-{me}": {
            **entry(local, "LOCAL"),
            "Transit Time(ms)": ms / 20,
            "Bandwidth(GB/s)": round(local / 1e6 / (ms / 20), 4),
        },
    }
