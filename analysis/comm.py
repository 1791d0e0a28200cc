"""Communication imbalance: who waits for whom in each collective instance, and how fast each link moves data.

A collective instance is the same ``(group, step, seq)`` on every member. On each member the collective kernel
starts when that member arrives and ends when the data has moved, which cannot happen before the last member has
arrived. So, per instance:

* ``arrival skew`` = last arrival - first arrival;
* a member's ``wait`` = the time its kernel ran before the last member arrived: min(last arrival, its end) - its
  start;
* ``transfer`` = the latest end - the last arrival: the time the data took once everyone was there;
* ``bus bandwidth`` = bytes x factor / transfer, with nccl-tests' factors (all-reduce 2(n-1)/n, all-gather,
  reduce-scatter and all-to-all (n-1)/n, broadcast and reduce 1): on a ring every link carries that much.

Send/recv pairs match by order per (group, step, sender, receiver); a receive that started before its send waited for
the sender (``wait``). ``transfer`` is the shorter of the two kernels: the side that arrived last saw only the data
move (a send that waited for its receiver, or a receive that waited for its sender, lasted longer), and kernel
durations need no clock alignment, so a clock estimated a little off cannot make a link look slow.
``receiver_waited`` (the receive lasted at least as long as the send) marks the pairs whose receive was posted
before the data arrived: only those time the link. A shorter receive found the data already there (the receiver
was late or busy, the send completed eagerly into NCCL's buffer) and times a local copy.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from paradiag.analysis.frame import Frame, find_rows, frame_table, group_bounds

P2P = ("send", "recv", "send_recv")
BUS_FACTOR = {
    "all_reduce": lambda n: 2 * (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "all_to_all": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1.0,
    "reduce": lambda n: 1.0,
}


def _collectives(frame: Frame) -> Frame:
    comm = frame.of_kind("communication")
    p2p = np.isin(comm.collective, comm.codes("collectives", P2P))
    return comm.take(~p2p & (comm.group >= 0) & (comm.seq >= 0))


def collective_participation(frame: Frame) -> pa.Table:
    """One row per (rank, collective instance) with the instance's arrival figures and this rank's wait."""
    c = _collectives(frame)
    order, firsts = group_bounds(c.seq, c.step, c.group)
    instance = np.zeros(len(order), dtype=np.int64)
    if len(order):
        instance[firsts[1:]] = 1
        instance = np.cumsum(instance)
    start, end, rank = c.start[order], c.end[order], c.rank[order]
    last = np.maximum.reduceat(start, firsts) if len(order) else start
    first = np.minimum.reduceat(start, firsts) if len(order) else start
    latest_end = np.maximum.reduceat(end, firsts) if len(order) else end
    members = np.diff(np.append(firsts, len(order)))
    # The late rank: the member whose arrival is the last one (the first such member in rank order on a tie).
    is_last = start == last[instance]
    late = np.full(len(firsts), -1, dtype=np.int32)
    late[instance[is_last][::-1]] = rank[is_last][::-1]
    wait = np.clip(np.minimum(last[instance], end) - start, 0, None)
    return pa.table(
        {
            "rank": rank,
            "track": c.track[order],
            "step": c.step[order],
            "group": pa.array([c.groups[g] for g in c.group[order]], pa.string()),
            "seq": c.seq[order],
            "collective": pa.array([c.collectives[k] for k in c.collective[order]], pa.string()),
            "bytes": c.bytes[order],
            "start_ns": start,
            "end_ns": end,
            "instance": instance,
            "members": members[instance],
            "first_arrival_ns": first[instance],
            "last_arrival_ns": last[instance],
            "late_rank": late[instance],
            "wait_ns": wait,
            "transfer_ns": (latest_end - last)[instance],
        }
    )


def collective_instances(participation: pa.Table, group_size: Mapping[str, int] | None = None) -> pa.Table:
    """One row per collective instance: skew, the late rank, transfer time and bus bandwidth (GB/s). The bus factor
    uses the group's size (``group_size``, where the traces list its members; else the members present): a job
    profiled on a few of its ranks still moves the whole group's data. Bus bandwidth is NaN (null in the report)
    where it cannot be computed: size unknown, one member, or no transfer time."""
    strings = (
        "group",
        "collective",
    )  # read for the first row of each instance only: not a Python str per row
    p = {
        k: participation.column(k).to_numpy(zero_copy_only=False)
        for k in participation.column_names
        if k not in strings
    }
    _, firsts = np.unique(p["instance"], return_index=True)
    head = {
        k: participation.column(k).take(pa.array(firsts, pa.int64())).to_numpy(zero_copy_only=False)
        for k in strings
    }
    wait_sum = (
        np.bincount(p["instance"], weights=p["wait_ns"]).astype(np.int64)
        if len(firsts)
        else np.zeros(0, np.int64)
    )
    n = p["members"][firsts]
    sizes = group_size or {}
    size = np.array([max(sizes.get(g, 0), m) for g, m in zip(head["group"], n, strict=True)], dtype=np.int64)
    factor = np.array(
        [BUS_FACTOR.get(k, lambda m: 0.0)(m) for k, m in zip(head["collective"], size, strict=True)]
    )
    transfer, nbytes = p["transfer_ns"][firsts], p["bytes"][firsts]
    computable = (transfer > 0) & (nbytes > 0) & (factor > 0)
    busbw = np.where(computable, np.maximum(nbytes, 0) * factor / np.maximum(transfer, 1), np.nan)
    return pa.table(
        {
            "instance": p["instance"][firsts],
            "group": head["group"],
            "step": p["step"][firsts],
            "seq": p["seq"][firsts],
            "collective": head["collective"],
            "bytes": p["bytes"][firsts],
            "members": n,
            "skew_ns": (p["last_arrival_ns"] - p["first_arrival_ns"])[firsts],
            "late_rank": p["late_rank"][firsts],
            "total_wait_ns": wait_sum,
            "transfer_ns": transfer,
            "busbw_gbps": busbw,
        }
    )


RECORD_COLUMNS = ("track", "kind", "start", "end", "step", "collective", "group", "peer", "bytes", "seq")


def communication_records(frame: Frame) -> pa.Table:
    """The per-rank part of the communication analysis: one rank's communication kernels (``frame``: its events)
    in its frame's order, the columns participation, send/recv matching and the layout read (``frame_table``'s
    form: ``table_frame`` reads them back), and ``peer_direction`` (:func:`peer_directions`)."""
    is_comm = frame.kind == frame.code("kinds", "communication")
    directions = peer_directions(frame)[is_comm]
    return frame_table(frame.take(is_comm), RECORD_COLUMNS).append_column(
        "peer_direction", pa.array(directions, pa.int8())
    )


def infer_peers(frame: Frame, members: Mapping[str, list[int]], stage_of: Mapping[int, int]) -> None:
    """Fill in, in place, the peer of the sends and receives whose trace does not name it (older PyTorch records
    only the process group and its ranks): :func:`peer_directions` on each rank's events, then
    :func:`assign_peers` across the job."""
    assign_peers(frame, peer_directions(frame), members, stage_of)


def peer_directions(frame: Frame) -> np.ndarray:
    """Per event, which way a send or receive without a named peer goes, from its own rank's kernels alone: 1 to
    the next pipeline stage, -1 to the previous one, 0 when its passes do not tell (or it is no such event).

    In a pipeline, activations go forward and gradients back: a send after a forward pass goes to the next stage
    and one after a backward pass to the previous one; a receive before a forward pass comes from the previous
    stage, one before a backward pass from the next. Only kernels whose names say forward-only or backward count;
    where none is around, :func:`assign_peers` decides from the rank's place in its group."""
    from paradiag.analysis.stages import name_classes

    out = np.zeros(len(frame), dtype=np.int8)
    rows_all = np.flatnonzero(_unnamed_p2p(frame))
    if not len(rows_all):
        return out
    classes = name_classes(frame.names)
    send = frame.code("collectives", "send")
    compute = frame.code("kinds", "compute")
    _, firsts = np.unique(frame.rank, return_index=True)
    bounds = np.append(firsts, len(frame.rank))
    for lo, hi in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True):
        rows = rows_all[np.searchsorted(rows_all, lo) : np.searchsorted(rows_all, hi)]
        definite = lo + np.flatnonzero(
            (frame.kind[lo:hi] == compute) & np.isin(classes[frame.name[lo:hi]], (-1, 1))
        )
        marks, cls = frame.start[definite], classes[frame.name[definite]]
        for row in rows.tolist():
            is_send = frame.collective[row] == send
            if is_send:  # the pass it follows
                k = int(np.searchsorted(marks, frame.start[row], side="right")) - 1
            else:  # the pass it feeds
                k = int(np.searchsorted(marks, frame.end[row], side="left"))
            if 0 <= k < len(cls):
                out[row] = 1 if bool(cls[k] == -1) == is_send else -1
    return out


def assign_peers(
    frame: Frame, directions: np.ndarray, members: Mapping[str, list[int]], stage_of: Mapping[int, int]
) -> None:
    """The cross-rank part of :func:`infer_peers`: each unnamed send or receive gets the neighbour of its rank, in
    its pipeline group ordered by stage, that ``directions`` (:func:`peer_directions`) points to (and, interleaved,
    stage 0 and the last stage are neighbours). Without a direction, in a group of two the other member is the
    peer, the first and last stage have one neighbour, and a middle stage's peer stays unknown (a guessed peer
    would pair the wrong transfers). The k-th send then matches the k-th receive."""
    orders: dict[int, list[int]] = {}
    for row in np.flatnonzero(_unnamed_p2p(frame)).tolist():
        group, rank = int(frame.group[row]), int(frame.rank[row])
        if group not in orders:
            orders[group] = _stage_order(members.get(frame.groups[group], []), stage_of)
        order = orders[group]
        if rank not in order:
            continue
        i, direction = order.index(rank), int(directions[row])
        if direction:
            towards_next = direction > 0
        elif i in (0, len(order) - 1) or len(order) == 2:  # one neighbour
            towards_next = i == 0
        else:
            continue
        frame.peer[row] = order[(i + 1) % len(order)] if towards_next else order[i - 1]


def _unnamed_p2p(frame: Frame) -> np.ndarray:
    """Sends and receives of a process group whose peer the trace does not name."""
    return (
        np.isin(frame.collective, frame.codes("collectives", ("send", "recv")))
        & (frame.group >= 0)
        & (frame.peer < 0)
    )


def _stage_order(group: list[int], stage_of: Mapping[int, int]) -> list[int]:
    position = {r: (stage_of.get(r, 0), n) for n, r in enumerate(group)}
    return sorted(group, key=position.__getitem__) if len(group) >= 2 else []


def p2p_transfers(frame: Frame) -> pa.Table:
    """One row per matched send/recv pair: src, dst, bytes, the receiver's wait for the sender, transfer time.
    The k-th send from a to b in a step matches the k-th receive on b from a (NCCL keeps that order per pair;
    the combined per-peer ``seq`` does not, as the two sides interleave their sends and receives differently)."""
    comm = frame.of_kind("communication")
    send, recv = comm.code("collectives", "send"), comm.code("collectives", "recv")
    p = comm.take(np.isin(comm.collective, comm.codes("collectives", ("send", "recv"))) & (comm.peer >= 0))
    src = np.where(p.collective == send, p.rank, p.peer)
    dst = np.where(p.collective == send, p.peer, p.rank)
    order, firsts = group_bounds(p.collective, dst, src, p.step, p.group, within=p.start)
    run = np.zeros(len(order), dtype=np.int64)
    if len(order):
        run[firsts[1:]] = 1
        run = np.cumsum(run)
    # Rows are sorted by (group, step, src, dst, collective, start): the ordinal is the position in the run.
    ordinal = np.empty(len(order), dtype=np.int64)
    ordinal[order] = np.arange(len(order)) - firsts[run] if len(order) else 0
    s, r = _match(p, src, dst, ordinal, p.collective == send, p.collective == recv)
    return pa.table(
        {
            "src": p.rank[s],
            "dst": p.rank[r],
            "step": p.step[r],
            "ordinal": ordinal[r],
            "bytes": np.maximum(p.bytes[s], p.bytes[r]),
            "src_track": p.track[s],
            "dst_track": p.track[r],
            "send_start_ns": p.start[s],
            "send_end_ns": p.end[s],
            "recv_start_ns": p.start[r],
            "recv_end_ns": p.end[r],
            "wait_ns": np.clip(p.start[s] - p.start[r], 0, None),
            "transfer_ns": np.minimum(p.end[s] - p.start[s], p.end[r] - p.start[r]),
            "receiver_waited": p.end[r] - p.start[r] >= p.end[s] - p.start[s],
        }
    )


def _match(
    p: Frame, src: np.ndarray, dst: np.ndarray, ordinal: np.ndarray, is_send: np.ndarray, is_recv: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The rows of the sends and of the receives with the same (group, step, src, dst, ordinal), in the order of
    the receives (each key is one send and one receive at most: the ordinal numbers them)."""
    sends, recvs = np.flatnonzero(is_send), np.flatnonzero(is_recv)

    def keys(rows: np.ndarray) -> np.ndarray:
        return np.stack([p.group[rows], p.step[rows], src[rows], dst[rows], ordinal[rows]], axis=1).astype(
            np.int64
        )

    found = find_rows(keys(sends), keys(recvs))
    hit = found >= 0
    return sends[found[hit]].astype(np.int64), recvs[hit].astype(np.int64)


def rank_waits(participation: pa.Table, p2p: pa.Table) -> dict[tuple[int, int], dict[str, int]]:
    """Per (rank, step): ``wait_ns`` the rank spent waiting for others, ``caused_ns`` the waiting others did for it
    (the late rank of a collective, the sender of a receive that waited)."""

    def col(table: pa.Table, name: str) -> np.ndarray:
        return np.asarray(table.column(name).to_numpy(), dtype=np.int64)

    step = np.concatenate([col(participation, "step"), col(p2p, "step")])
    wait = np.concatenate([col(participation, "wait_ns"), col(p2p, "wait_ns")])
    waiter = np.concatenate([col(participation, "rank"), col(p2p, "dst")])
    blamed = np.concatenate([col(participation, "late_rank"), col(p2p, "src")])
    out: dict[tuple[int, int], dict[str, int]] = {}
    for who, key in ((waiter, "wait_ns"), (blamed, "caused_ns")):
        keep = wait > 0
        combined = who[keep] * (1 << 32) + step[keep]  # one integer per (rank, step): np.unique stays 1-D
        keys, inverse = np.unique(combined, return_inverse=True)
        sums = np.bincount(inverse, weights=wait[keep]) if keep.any() else np.zeros(0)
        for k, total in zip(keys.tolist(), sums.tolist(), strict=True):
            out.setdefault((k >> 32, k & 0xFFFFFFFF), {"wait_ns": 0, "caused_ns": 0})[key] = int(total)
    return out


def link_type(a: int, b: int, host_of: Mapping[int, str | None]) -> str:
    """``intra`` when both ranks are on one host (NVLink/HCCS), ``inter`` otherwise (IB/RoCE); unknown hosts count
    as separate."""
    ha, hb = host_of.get(a), host_of.get(b)
    return "intra" if ha is not None and ha == hb else "inter"


INTRA_TRANSPORTS = ("HCCS", "HCCS_SW", "SIO", "PCIE", "SDMA", "ON_CHIP")


def npu_links(links: pa.Table, world: int) -> dict[tuple[int, int], tuple[float, float, float, str]]:
    """Per directed link, (bytes, transit time, transfers, link type) from the per-link traffic that Ascend
    Level1/2 exports record (``communication_matrix.json`` / the db's matrix; the ``links`` extra table). A row
    names its ranks globally where the export knows the group's members; a group that spans the world (its
    group-local ranks run to ``world``) numbers them globally anyway. LOCAL rows are copies, not links."""
    keep = pc.and_(pc.not_equal(links.column("transport"), "LOCAL"), pc.greater(links.column("bytes"), 0))
    rows = links.filter(keep).to_pydict()
    span: dict[str, int] = {}
    for group, a, b in zip(rows["group"], rows["src_rank"], rows["dst_rank"], strict=True):
        span[group] = max(span.get(group, 0), (a or 0) + 1, (b or 0) + 1)
    out: dict[tuple[int, int], tuple[float, float, float, str]] = {}
    for i, group in enumerate(rows["group"]):
        src, dst = rows["src_global"][i], rows["dst_global"][i]
        if (src is None or dst is None) and span.get(group) == world:
            src, dst = rows["src_rank"][i], rows["dst_rank"][i]
        if src is None or dst is None or src == dst:
            continue
        size, time, count, _ = out.get((src, dst), (0.0, 0.0, 0.0, ""))
        kind = "intra" if rows["transport"][i] in INTRA_TRANSPORTS else "inter"
        out[(src, dst)] = (
            size + rows["bytes"][i],
            time + max(rows["transit_ns"][i] or 0, 0),
            count + 1,
            kind,
        )
    return out


def _p2p_links(p2p: pa.Table) -> dict[tuple[int, int], tuple[float, float, float]]:
    """Per directed link, (bytes, busy time, transfers) of its send/recv pairs. A pair's clock-free transfer time
    (the shorter kernel) is the transfer only when the receive was posted before the data: one that found the data
    waiting lasts a local copy, and counting it would make the links whose receivers run late look fast and the
    others slow. So a link's rate comes from its pairs whose receiver waited, when it has any; its busy time is
    all of its bytes at that rate."""
    cols = p2p.select(["src", "dst", "bytes", "transfer_ns", "receiver_waited"]).to_pydict()
    acc: dict[tuple[int, int], list[float]] = {}
    for src, dst, size, transfer, waited in zip(*cols.values(), strict=True):
        entry = acc.setdefault(
            (src, dst), [0.0, 0.0, 0.0, 0.0, 0.0]
        )  # bytes, time, count, measured bytes, time
        entry[0] += size
        entry[1] += max(transfer, 0)
        entry[2] += 1
        if waited and transfer > 0:
            entry[3] += size
            entry[4] += transfer
    return {
        link: (size, size * measured_time / measured if measured > 0 else time, count)
        for link, (size, time, count, measured, measured_time) in acc.items()
    }


def comm_matrix(
    instances: pa.Table,
    p2p: pa.Table,
    members: Mapping[str, list[int]],
    host_of: Mapping[int, str | None],
    links: pa.Table | None = None,
    world: int = 0,
) -> list[dict]:
    """The src x dst matrix: bytes, busy time and effective bandwidth per directed link. Where the traces record
    per-link traffic (Ascend ``links``) it is the measured one; otherwise a collective's ring sends bytes x bus
    factor over each link from a member to the next one (in group order) during its transfer."""
    measured = npu_links(links, world) if links is not None and links.num_rows else {}
    if measured:
        return [
            {"src": a, "dst": b, "link_type": kind, "bytes": int(size), "time_ns": int(time), "instances": int(count),
             "bandwidth_gbps": round(size / time, 3) if time > 0 else None}
            for (a, b), (size, time, count, kind) in sorted(measured.items())
        ]  # fmt: skip
    acc: dict[tuple[int, int], list[float]] = {}

    def add(a: int, b: int, size: float, time: float, count: float) -> None:
        entry = acc.setdefault((a, b), [0.0, 0.0, 0.0])
        entry[0] += size
        entry[1] += time
        entry[2] += count

    # Totals per group first: every instance of a group loads the same ring links.
    per_group: dict[str, list[float]] = {}
    inst = instances.select(["group", "collective", "bytes", "members", "transfer_ns"]).to_pydict()
    for group, collective, size, n, transfer in zip(*inst.values(), strict=True):
        if n >= 2 and len(members.get(group, ())) == n and transfer > 0:
            total = per_group.setdefault(group, [0.0, 0.0, 0.0])
            total[0] += size * BUS_FACTOR.get(collective, lambda m: 0.0)(n)
            total[1] += transfer
            total[2] += 1
    for group, (moved, time, count) in per_group.items():
        ring = members[group]
        for a, b in zip(ring, ring[1:] + ring[:1], strict=True):
            add(a, b, moved, time, count)
    for (src, dst), (size, time, count) in _p2p_links(p2p).items():
        add(src, dst, size, time, count)
    return [
        {
            "src": a,
            "dst": b,
            "link_type": link_type(a, b, host_of),
            "bytes": int(v[0]),
            "time_ns": int(v[1]),
            "instances": int(v[2]),
            "bandwidth_gbps": round(v[0] / v[1], 3) if v[1] > 0 else None,
        }
        for (a, b), v in sorted(acc.items())
    ]


# The columns of a pair (p2p_transfers) saying where each side's event stopped being about the transfer
# (with_deliveries): its measured end, but on a CPU rank whose host waited on it late, where the data went across.
DELIVERED = ("send_done_ns", "recv_done_ns")


def pair_rows(f: Frame, p2p: pa.Table) -> tuple[np.ndarray, np.ndarray]:
    """Per pair of ``p2p`` (:func:`p2p_transfers`), the row of ``f`` of its send and of its receive, found by
    rank and start among the sends and among the receives (a batch posts a send and a receive of one rank at
    once; -1 where ``f`` does not hold it)."""
    none = np.full(p2p.num_rows, -1, np.int64)
    if not len(f) or not p2p.num_rows:
        return none, none.copy()
    base = int(f.start.min())
    span = int(f.start.max()) - base + 1

    def find(kind: str, rank: str, start: str) -> np.ndarray:
        code = f.code("collectives", kind)
        rows = np.flatnonzero(f.collective == code) if code >= 0 else np.zeros(0, np.int64)
        if not len(rows):
            return none.copy()
        keys = f.rank[rows].astype(np.int64) * span + (f.start[rows] - base)
        order = np.argsort(keys, kind="stable")
        sorted_keys = keys[order]
        q = np.asarray(p2p.column(rank).to_numpy(), np.int64) * span + (
            np.asarray(p2p.column(start).to_numpy(), np.int64) - base
        )
        pos = np.clip(np.searchsorted(sorted_keys, q), 0, len(sorted_keys) - 1)
        return np.where(sorted_keys[pos] == q, rows[order[pos]], -1)

    return find("send", "src", "send_start_ns"), find("recv", "dst", "recv_start_ns")


def host_deliveries(
    f: Frame, send: np.ndarray, recv: np.ndarray, host_ranks: frozenset[int]
) -> tuple[np.ndarray, np.ndarray]:
    """The ends of matched send and receive events (rows of ``f``, pair by pair) where their data went across:
    their measured ends, but on ranks whose host is their device (``host_ranks``) earlier for the pairs whose event
    held work of its own rank.

    gloo records an asynchronous send or receive (``isend``/``irecv``, a pipeline schedule's batches) from its
    posting to the return of its ``wait()``: a receive whose data came at once lasts until its rank came to wait on
    it (after computing another chunk's forward, say), a send until the step's end. Work of its own rank (of a
    profiled step) that began after both sides were there and ended within the event says the rank was not blocked
    on it: its end was the host's. It then ends the pair's typical transfer after both sides were there (the median
    over the job's pairs whose events held no such work: blocked on, they end when the data came). The replay
    (``depgraph``) times the pair so (kept at the measured end, it held the wait's length fixed: a host stall removed
    from one rank of a zero-bubble pipeline moved its neighbour's forward not at all), and Marey's graph draws it so
    (drawn to the measured end, a ZBV job's sends covered every rank's compute)."""
    send_end, recv_end = f.end[send].astype(np.int64), f.end[recv].astype(np.int64)
    if not host_ranks or not len(send):
        return send_end, recv_end
    pairs = np.concatenate([send, recv])
    on_host = np.isin(f.rank[pairs], np.fromiter(host_ranks, np.int64, len(host_ranks)))
    if not on_host.any():
        return send_end, recv_end
    both = np.maximum(f.start[send], f.start[recv])
    arrived = np.concatenate([both, both])
    compute = np.flatnonzero((f.kind == f.code("kinds", "compute")) & (f.step >= 0) & (f.end >= f.start))
    held = np.zeros(len(pairs), bool)
    rows = np.flatnonzero(on_host)
    if len(compute):
        # Per member: does a compute event of its rank lie within (its last arrival, its end)? Events of a rank in
        # order of start; the one ending first among those starting after the arrival decides.
        key = f.rank[compute].astype(np.int64)
        order = np.lexsort((f.start[compute], key))
        c, ranks = compute[order], key[order]
        base = int(min(f.start.min(), arrived.min()))
        span = int(max(f.end.max(), f.start.max())) - base + 1
        starts = ranks * span + (f.start[c] - base)
        # The earliest end among the rank's compute events from each position on (suffix minimum per rank).
        ends = f.end[c].astype(np.int64)
        suffix = ends.copy()
        _, firsts = np.unique(ranks, return_index=True)
        for lo, hi in zip(firsts.tolist(), np.append(firsts[1:], len(c)).tolist(), strict=True):
            suffix[lo:hi] = np.minimum.accumulate(ends[lo:hi][::-1])[::-1]
        member = pairs[rows]
        q = f.rank[member].astype(np.int64) * span + (arrived[rows] - base)
        pos = np.searchsorted(starts, q, side="left")
        inside = pos < len(c)
        at = np.minimum(pos, len(c) - 1)
        inside &= (ranks[at] == f.rank[member]) & (suffix[at] <= f.end[member])
        held[rows] = inside
    tail = f.end[pairs] - arrived
    blocked = on_host & ~held
    if not held.any() or not blocked.any():
        return send_end, recv_end
    transfer = int(np.median(np.maximum(tail[blocked], 0)))
    ends = np.concatenate([send_end, recv_end])
    moved = held & (tail > transfer)
    ends[moved] = arrived[moved] + transfer
    return ends[: len(send)], ends[len(send) :]


def with_deliveries(p2p: pa.Table, f: Frame, host_ranks: frozenset[int]) -> pa.Table:
    """``p2p`` (:func:`p2p_transfers`) with :data:`DELIVERED`: each side's end as :func:`host_deliveries` gives it
    (``f``: the job's events, communication included), the measured one for pairs ``f`` does not hold."""
    done = [np.asarray(p2p.column(c).to_numpy(), np.int64).copy() for c in ("send_end_ns", "recv_end_ns")]
    if host_ranks:  # a GPU rank's pairs end where measured: no lookup
        send, recv = pair_rows(f, p2p)
        ok = (send >= 0) & (recv >= 0)
        done[0][ok], done[1][ok] = host_deliveries(f, send[ok], recv[ok], host_ranks)
    for name, values in zip(DELIVERED, done, strict=True):
        p2p = p2p.append_column(name, pa.array(values, pa.int64()))
    return p2p
