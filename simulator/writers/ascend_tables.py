"""The summaries torch_npu derives from one rank's step: overlap segments, step_trace_time.csv row,
communication.json and communication_matrix.json entries (definitions: ../shared/formats/ascend.md)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

LINKS = ("RDMA", "HCCS", "PCIE", "SDMA", "SIO")


def union(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Merged, sorted [start, end) intervals."""
    out: list[tuple[float, float]] = []
    for start, end in sorted(intervals):
        if out and start <= out[-1][1]:
            if end > out[-1][1]:
                out[-1] = (out[-1][0], end)
        else:
            out.append((start, end))
    return out


def subtract(a: list[tuple[float, float]], b: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Parts of union ``a`` not covered by union ``b`` (both merged and sorted)."""
    out: list[tuple[float, float]] = []
    j = 0
    for start, end in a:
        cur = start
        while j < len(b) and b[j][1] <= cur:
            j += 1
        k = j
        while k < len(b) and b[k][0] < end:
            if b[k][0] > cur:
                out.append((cur, b[k][0]))
            cur = max(cur, b[k][1])
            k += 1
        if cur < end:
            out.append((cur, end))
    return out


def total(segments: list[tuple[float, float]]) -> float:
    return sum(e - s for s, e in segments)


@dataclass
class Overlap:
    computing: list[tuple[float, float]]
    communication: list[tuple[float, float]]
    not_overlapped: list[tuple[float, float]]
    free: list[tuple[float, float]]


def overlap(compute: list[tuple[float, float]], comm: list[tuple[float, float]]) -> Overlap:
    computing, communication = union(compute), union(comm)
    busy = union(computing + communication)
    free = [(busy[i][1], busy[i + 1][0]) for i in range(len(busy) - 1) if busy[i + 1][0] > busy[i][1]]
    return Overlap(computing, communication, subtract(communication, computing), free)


def step_row(step: int, ov: Overlap, bubble: float, step_start: float) -> list[Any]:
    """One step_trace_time.csv row (us)."""
    computing, comm, not_overlapped, free = (
        total(ov.computing),
        total(ov.communication),
        total(ov.not_overlapped),
        total(ov.free),
    )
    busy = union(ov.computing + ov.communication)
    span = busy[-1][1] - busy[0][0] if busy else 0.0
    preparing = busy[0][0] - step_start if busy else 0.0
    return [
        step,
        computing,
        not_overlapped,
        comm - not_overlapped,
        comm,
        free,
        span - bubble,
        bubble,
        max(not_overlapped - bubble, 0.0),
        preparing,
    ]


def _bandwidth_block(size_mb: float, transit_ms: float, packets: int) -> dict[str, Any]:
    if size_mb <= 0:
        return {
            "Transit Size(MB)": 0,
            "Transit Time(ms)": 0,
            "Bandwidth(GB/s)": 0,
            "Large Packet Ratio": 0,
            "Size Distribution": {},
        }
    packet = size_mb / packets
    return {
        "Transit Size(MB)": size_mb,
        "Transit Time(ms)": transit_ms,
        "Bandwidth(GB/s)": round(size_mb / transit_ms, 4) if transit_ms > 0 else 0,
        "Large Packet Ratio": 0.0 if packet < 32 else 1.0,
        "Size Distribution": {f"{packet:.6f}".rstrip("0").rstrip("."): [packets, transit_ms]},
    }


def op_entry(
    start_us: float, elapse_us: float, transit_us: float, link: str, size_mb: float, packets: int
) -> dict[str, Any]:
    """One op of communication.json: the time breakdown and the bandwidth per link type."""
    wait = max(elapse_us - transit_us, 0.0) / 1e3
    transit = transit_us / 1e3
    blocks = {name: _bandwidth_block(size_mb if name == link else 0.0, transit, packets) for name in LINKS}
    if link in ("HCCS", "PCIE", "SIO"):
        blocks["SDMA"] = {**blocks[link], "Large Packet Ratio": 0, "Size Distribution": {}}
    return {
        "Communication Time Info": {
            "Start Timestamp(us)": start_us,
            "Elapse Time(ms)": elapse_us / 1e3,
            "Transit Time(ms)": transit,
            "Wait Time(ms)": wait,
            "Synchronization Time(ms)": wait,
            "Idle Time(ms)": 0.0,
            "Wait Time Ratio": round(wait / (wait + transit), 4) if wait + transit > 0 else 0,
            "Synchronization Time Ratio": round(wait / (wait + transit), 4) if wait + transit > 0 else 0,
        },
        "Communication Bandwidth Info": blocks,
    }


def total_entry(ops: list[dict[str, Any]]) -> dict[str, Any]:
    """``Total Op Info``: times summed, ratios recomputed, sizes and distributions merged per link type."""
    keys = (
        "Elapse Time(ms)",
        "Transit Time(ms)",
        "Wait Time(ms)",
        "Synchronization Time(ms)",
        "Idle Time(ms)",
    )
    times = {k: sum(o["Communication Time Info"][k] for o in ops) for k in keys}
    wait, transit, sync = times["Wait Time(ms)"], times["Transit Time(ms)"], times["Synchronization Time(ms)"]
    times["Wait Time Ratio"] = round(wait / (wait + transit), 4) if wait + transit > 0 else 0
    times["Synchronization Time Ratio"] = round(sync / (sync + transit), 4) if sync + transit > 0 else 0
    links: dict[str, Any] = {}
    for name in LINKS:
        dist: dict[str, list[float]] = {}
        size = time = 0.0
        for o in ops:
            block = o["Communication Bandwidth Info"][name]
            size += block["Transit Size(MB)"]
            time += block["Transit Time(ms)"]
            for packet, (count, dur) in block["Size Distribution"].items():
                acc = dist.setdefault(packet, [0, 0.0])
                acc[0] += count
                acc[1] += dur
        links[name] = {"Transit Time(ms)": time, "Transit Size(MB)": size, "Size Distribution": dist}
    return {"Communication Time Info": times, "Communication Bandwidth Info": links}


def matrix_entries(instances: list[tuple[str, dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """top1 / middle / bottom1-3 / total link tables of one op type, from (op name, links) instances."""

    def bandwidth(links: dict[str, Any]) -> float:
        return min(
            (v["Bandwidth(GB/s)"] for v in links.values() if v["Transport Type"] != "LOCAL"), default=0.0
        )

    ranked = sorted(instances, key=lambda item: -bandwidth(item[1]))
    out: dict[str, dict[str, Any]] = {}
    picks = {
        "top1": 0,
        "middle": len(ranked) // 2,
        "bottom1": len(ranked) - 1,
        "bottom2": len(ranked) - 2,
        "bottom3": len(ranked) - 3,
    }
    for label, index in picks.items():
        if index >= 0 and (label in ("top1", "middle", "bottom1") or index not in (0, len(ranked) // 2)):
            name, links = ranked[index]
            out[label] = {k: {**v, "Op Name": name} for k, v in links.items()}
    totals: dict[str, Any] = {}
    for _, links in instances:
        for pair, v in links.items():
            acc = totals.setdefault(
                pair,
                {
                    "Transport Type": v["Transport Type"],
                    "Transit Size(MB)": 0.0,
                    "Transit Time(ms)": 0.0,
                    "Bandwidth(GB/s)": 0.0,
                    "Op Name": "",
                },
            )
            acc["Transit Size(MB)"] += v["Transit Size(MB)"]
            acc["Transit Time(ms)"] += v["Transit Time(ms)"]
    for v in totals.values():
        v["Bandwidth(GB/s)"] = (
            round(v["Transit Size(MB)"] / v["Transit Time(ms)"], 4) if v["Transit Time(ms)"] > 0 else 0
        )
    out["total"] = totals
    return out
