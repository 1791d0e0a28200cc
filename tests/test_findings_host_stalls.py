"""Host stalls of CPU ranks (issue 22), the cases the real-job matrix showed, built small:

* a CPU rank's launch delay is, as on a GPU, the time before its first work of the step; its idle time is every
  hole in the step;
* a one-off hole mid-step (the scheduler preempting a rank on a shared host) is no stall; a stall before the
  step's first work is, and so is a hole that the rank shows in every step;
* a rank alone in its pipeline stage is weighed against the other lone ranks' starts of step;
* a rank that arrives last at every collective of a data-parallel group, its compute like its peers', is a
  late arriver (host_stall); which member is last is chance in a clean job.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

from paradiag.analysis import findings
from paradiag.analysis.frame import device_frame
from tests.helpers import host_events

MS = 1_000_000


def _steps(spans: list[tuple[int, int]]) -> pa.Table:
    return pa.table({"step": pa.array(range(len(spans)), pa.int32()), "start_ns": [a for a, _ in spans], "end_ns": [b for _, b in spans],
                     "device_start_ns": [a for a, _ in spans], "device_end_ns": [b for _, b in spans]})  # fmt: skip


def test_a_cpu_ranks_launch_delay_is_the_time_before_its_first_work_and_its_idle_every_hole() -> None:
    """Step 0: 30 ms of nothing, then work; step 1: work, a 20 ms hole, work (a mid-step hole is idle, not a
    late start)."""
    rows = [
        {"name": "aten::mm", "start_ns": 30 * MS, "dur_ns": 70 * MS, "step": 0},
        {"name": "aten::mm", "start_ns": 100 * MS, "dur_ns": 40 * MS, "step": 1},
        {"name": "aten::mm", "start_ns": 160 * MS, "dur_ns": 40 * MS, "step": 1},
    ]
    table = findings.step_figures(
        device_frame(host_events(rows)), _steps([(0, 100 * MS), (100 * MS, 200 * MS)]), host_lanes=True
    ).to_pydict()
    assert table["launch_delay_ns"] == [30 * MS, 0]
    assert table["idle_ns"] == [30 * MS, 20 * MS]


def _figures(
    values: dict[int, list[tuple[float, float]]], step_ns: float = 100 * MS
) -> dict[tuple[int, int], dict[str, int]]:
    """rank -> per step (launch delay, idle) in ms; compute alike everywhere."""
    return {
        (r, s): {
            "compute_ns": 40 * MS,
            "launch_delay_ns": int(lead * MS),
            "idle_ns": int(idle * MS),
            "step_ns": int(step_ns),
        }
        for r, per_step in values.items()
        for s, (lead, idle) in enumerate(per_step)
    }


def test_a_hole_mid_step_once_or_every_step_is_no_stall_of_its_own_but_a_late_start_is() -> None:
    """A CPU rank's holes mid-step are the shared host's scheduler as often as its own (one rank of a clean job on
    2 cores idles 3-5x its peers in every step): only its late start (a data loader, a sleep before the step) is a
    stall by its own time; a host that holds it back before its collectives or sends is told by
    ``late_arrivals`` / ``late_senders`` (the tests below)."""
    peers, host = [[0, 1, 2, 3]], frozenset(range(4))
    calm = [(0.1, 5.0)] * 3
    preempted = _figures({0: [(0.1, 5.0), (0.1, 60.0), (0.1, 5.0)], 1: calm, 2: calm, 3: calm})
    assert findings.rank_excess(preempted, peers, 100 * MS, host_ranks=host) == []
    stalled = _figures({0: [(0.1, 5.0), (60.0, 65.0), (0.1, 5.0)], 1: calm, 2: calm, 3: calm})
    rows = findings.rank_excess(stalled, peers, 100 * MS, host_ranks=host)
    assert {(r["rank"], r["step"], r["part"]) for r in rows} == {(0, 1, "launch_delay_ns")}
    habit = _figures(
        {
            0: [(0.1, 25.0), (0.1, 27.0), (0.1, 24.0)],
            1: [(0.1, 5.0), (0.1, 6.0), (0.1, 5.5)],
            2: calm,
            3: [(0.1, 4.0)] * 3,
        }
    )
    assert findings.rank_excess(habit, peers, 100 * MS, host_ranks=host) == []
    assert findings.rank_findings(_frame(), habit, peers, {}, {}, 100 * MS, host) == []


def _frame() -> Any:
    return device_frame(
        host_events([{"name": "aten::mm", "start_ns": 0, "dur_ns": MS, "rank": r} for r in range(4)])
    )


def test_a_rank_alone_in_its_stage_is_weighed_against_the_other_lone_ranks_start_of_step() -> None:
    """pp4, one rank per stage: rank 2 starts step 1 40 ms late (a data loader, a sleep); the others start within
    a few tenths of a ms. With no replica to compare with, the other stages stand in."""
    stages = [[0], [1], [2], [3]]
    calm = [(0.1, 30.0), (0.2, 28.0), (0.1, 33.0)]
    figures = _figures(
        {0: calm, 1: calm, 2: [(0.1, 30.0), (40.0, 64.0), (0.1, 31.0)], 3: calm}, step_ns=175 * MS
    )
    rows = findings.rank_excess(figures, stages, 175 * MS, host_ranks=frozenset(range(4)))
    assert {(r["rank"], r["step"], r["part"]) for r in rows} == {(2, 1, "launch_delay_ns")}
    found = findings.rank_findings(_frame(), figures, stages, {}, {}, 175 * MS, frozenset(range(4)))
    assert [(f["kind"], f["culprit"]["ranks"]) for f in found] == [("host_stall", [2])]
    # Nobody late: nothing (the stages' idle between their operators differs, and is not weighed across stages).
    quiet = _figures({0: calm, 1: [(0.1, 50.0)] * 3, 2: calm, 3: calm}, step_ns=175 * MS)
    assert findings.rank_excess(quiet, stages, 175 * MS, host_ranks=frozenset(range(4))) == []


def _instances(late: list[int], skew_ms: float = 10.0, per_step: int = 2) -> pa.Table:
    n = len(late)
    return pa.table({"group": ["0"] * n, "step": [i // per_step for i in range(n)], "late_rank": late, "total_wait_ns": [int(skew_ms * MS)] * n,
                     "skew_ns": [int(skew_ms * MS)] * n, "members": [2] * n})  # fmt: skip


def test_a_rank_last_at_every_collective_of_its_group_is_a_late_arriver() -> None:
    found = findings.late_arrivals(_instances([1] * 6), set(), 50 * MS, 3)
    assert [(f["kind"], f["culprit"]["ranks"], f["steps"]) for f in found] == [("host_stall", [1], [0, 1, 2])]
    assert "arrived last at 6 of the 6" in found[0]["evidence"]
    # Chance (each member last now and then), a rank already blamed for its own time, or too little skew: none.
    assert findings.late_arrivals(_instances([1, 0, 1, 1, 0, 1]), set(), 50 * MS, 3) == []
    assert findings.late_arrivals(_instances([1] * 6), {1}, 50 * MS, 3) == []
    assert findings.late_arrivals(_instances([1] * 6, skew_ms=0.2), set(), 50 * MS, 3) == []
    # Too few instances to tell a habit from chance (2 members, 3 collectives: 1 in 4 clean jobs would show it).
    assert findings.late_arrivals(_instances([1] * 3, per_step=1), set(), 50 * MS, 3) == []


def test_on_cpu_ranks_a_late_arriver_is_one_the_host_holds_back_inside_its_operators() -> None:
    """2 CPU ranks, rank 1 last at every collective. A DDP communication hook that sleeps runs within autograd's
    call: rank 1's operators last 3x their typical durations on the clock, its peer's 1.5x (a busy host): a host
    stall. The same order with both stretched alike is the scheduler running rank 1 behind: none."""
    host, members = frozenset({0, 1}), {"0": [0, 1]}
    typical = {(r, s): {"compute_ns": 10 * MS} for r in (0, 1) for s in range(3)}

    def clock(stretch: float) -> dict[tuple[int, int], int]:
        return {(r, s): int((stretch if r == 1 else 1.5) * 10 * MS) for r in (0, 1) for s in range(3)}

    held = findings.late_arrivals(_instances([1] * 6), set(), 50 * MS, 3, host, clock(3.0), typical, members)
    assert [(f["kind"], f["culprit"]["ranks"]) for f in held] == [("host_stall", [1])]
    assert (
        findings.late_arrivals(_instances([1] * 6), set(), 50 * MS, 3, host, clock(1.6), typical, members)
        == []
    )
    # Held back at 5 of 6 (the habit's share, PERSISTENT_SHARE, on CPU ranks where the stretch is the evidence).
    five = findings.late_arrivals(
        _instances([1, 1, 0, 1, 1, 1]), set(), 50 * MS, 3, host, clock(3.0), typical, members
    )
    assert [f["culprit"]["ranks"] for f in five] == [[1]]


def _buckets(idle_ms: dict[int, float]) -> tuple[Any, pa.Table]:
    """DDP on 2 CPU ranks, 3 steps of 2 buckets: each rank computes 5 ms of backward, joins bucket 0's
    all-reduce, computes 5 ms more, idles ``idle_ms[rank]`` (a communication hook sleeping outside any profiled
    operator), then joins bucket 1's."""
    rows: list[dict[str, Any]] = []
    part: dict[str, list[int]] = {"rank": [], "step": [], "start_ns": []}
    for r, idle in idle_ms.items():
        for s in range(3):
            t = s * 50 * MS
            rows.append({"rank": r, "name": "aten::mm", "start_ns": t, "dur_ns": 5 * MS, "step": s})
            rows.append({"rank": r, "name": "aten::mm", "start_ns": t + 5 * MS, "dur_ns": 5 * MS, "step": s})
            for at in (t + 5 * MS, t + 10 * MS + int(idle * MS)):
                for key, v in zip(part, (r, s, at), strict=True):
                    part[key].append(v)
    return device_frame(host_events(rows)), pa.table(part)


def test_a_cpu_rank_idle_in_one_hole_before_it_joins_is_a_late_arriver_though_its_operators_are_not_stretched() -> (
    None
):
    """A communication hook that sleeps outside any profiled operator stretches none of them: rank 1 is last at
    every collective, its operators and its peer's stretched alike, but it idles 6 ms in one hole before each
    bucket's launch (its peer 0.1 ms): a host stall. Both idle alike: the scheduler's order, none."""
    host, members = frozenset({0, 1}), {"0": [0, 1]}
    typical = {(r, s): {"compute_ns": 10 * MS} for r in (0, 1) for s in range(3)}
    clock = {(r, s): 15 * MS for r in (0, 1) for s in range(3)}
    holes = findings.arrival_holes(*_buckets({0: 0.1, 1: 6.0}), host)
    assert holes == {0: pytest.approx(0.1 * MS), 1: pytest.approx(6 * MS)}
    held = findings.late_arrivals(
        _instances([1] * 6), set(), 50 * MS, 3, host, clock, typical, members, holes
    )
    assert [(f["kind"], f["culprit"]["ranks"]) for f in held] == [("host_stall", [1])]
    alike = findings.arrival_holes(*_buckets({0: 4.0, 1: 6.0}), host)
    assert (
        findings.late_arrivals(_instances([1] * 6), set(), 50 * MS, 3, host, clock, typical, members, alike)
        == []
    )
    assert findings.late_arrivals(_instances([1] * 6), set(), 50 * MS, 3, host, clock, typical, members) == []


def _calls(rank: int, slower: float = 1.0, extra_mm: int = 0) -> list[dict[str, Any]]:
    """Three steps of six operators called four times each (durations 1..6 ms), on one CPU rank."""
    rows, t = [], 0
    for step in range(3):
        for _ in range(4):
            for k, name in enumerate(
                ("aten::mm", "aten::add", "aten::gelu", "aten::mul", "aten::sum", "aten::copy_")
            ):
                for _ in range(1 + (extra_mm if name == "aten::mm" else 0)):
                    dur = int((k + 1) * MS * slower)
                    rows.append({"rank": rank, "name": name, "start_ns": t, "dur_ns": dur, "step": step})
                    t += dur + 10_000
    return rows


def test_a_cpu_rank_running_every_operator_slower_at_the_same_calls_is_weighed_at_its_own_speed() -> None:
    """Ranks 3 and 4 run every call 1.4x and 1.3x as long (busier cores); rank 2 does twice the matmul calls
    (extra work) at its peers' speed: only ranks 3 and 4 have a speed above 1."""
    from paradiag.analysis.operators import host_speeds

    rows = _calls(0) + _calls(1) + _calls(2, extra_mm=1) + _calls(3, slower=1.4) + _calls(4, slower=1.3)
    speeds = host_speeds(device_frame(host_events(rows)), [[0, 1, 2, 3, 4]], frozenset(range(5)))
    assert speeds[3] == pytest.approx(1.4, rel=0.02) and speeds[4] == pytest.approx(1.3, rel=0.02)
    assert speeds[0] == speeds[1] == speeds[2] == 1.0
    # A lone rank slower at every operator than all its peers is a slow rank: no speed of its own.
    lone = _calls(0) + _calls(1) + _calls(2) + _calls(3, slower=1.4)
    assert host_speeds(device_frame(host_events(lone)), [[0, 1, 2, 3]], frozenset(range(4))) == {}
    # A GPU rank, or a rank without peers, has no speed of its own here.
    assert host_speeds(device_frame(host_events(rows)), [[0], [1], [2], [3]], frozenset(range(4))) == {}
    # Ranks with a core each (the clock's compute as long as the typical one): a rank slower at every operator is
    # a slower device, weighed as it is.
    assert (
        host_speeds(device_frame(host_events(rows)), [[0, 1, 2, 3]], frozenset(range(4)), stretch=1.0) == {}
    )


def _pipeline(gaps_ms: dict[int, float], pieces: dict[int, int] | None = None) -> tuple[Any, pa.Table]:
    """pp4, one CPU rank per stage, 3 steps of 4 micro-batches: each rank's receive completes, it computes 2 ms,
    idles ``gaps_ms[rank]``, then sends to the next stage; a rank of ``pieces`` computes its 2 ms in that many
    operators and idles its time in as many holes, one after each (the Python between operators)."""
    rows: list[dict[str, Any]] = []
    p2p: dict[str, list[int]] = {"src": [], "dst": [], "step": [], "send_start_ns": [], "recv_end_ns": []}
    arrive = {
        (r, s, k): s * 100 * MS + k * 20 * MS + r * MS for r in range(4) for s in range(3) for k in range(4)
    }
    for (r, s, k), t in arrive.items():
        n = (pieces or {}).get(r, 1)
        if n == 1:
            rows.append({"rank": r, "name": "aten::mm", "start_ns": t, "dur_ns": 2 * MS, "step": s})
        else:
            each, hole = 2 * MS // n, int(gaps_ms[r] * MS) // n
            rows += [
                {"rank": r, "name": "aten::mm", "start_ns": t + i * (each + hole), "dur_ns": each, "step": s}
                for i in range(n)
            ]
        for key, v in zip(
            p2p,
            (r, (r + 1) % 4, s, t + 2 * MS + int(gaps_ms[r] * MS), arrive[((r + 1) % 4, s, k)]),
            strict=True,
        ):
            p2p[key].append(v)
    return device_frame(host_events(rows)), pa.table(p2p)


def test_a_lone_pipeline_rank_idling_before_each_of_its_sends_is_a_late_sender() -> None:
    host = frozenset(range(4))
    frame, p2p = _pipeline({0: 0.2, 1: 8.0, 2: 0.3, 3: 0.2})
    found = findings.late_senders(frame, p2p, set(), host, 100 * MS, 3)
    assert [(f["kind"], f["culprit"]["ranks"]) for f in found] == [("host_stall", [1])]
    assert "idle 8.00 ms at a stretch (80 % of the time)" in found[0]["evidence"]
    # As much idle time in 16 short holes between its operators (the Python of a stage with more glue: the last
    # one computes the loss before each backward send): no host holding the send back.
    assert (
        findings.late_senders(*_pipeline({0: 0.2, 1: 8.0, 2: 0.3, 3: 0.2}, {1: 16}), set(), host, 100 * MS, 3)
        == []
    )
    # Alike senders, a rank already blamed for its own time, or another sender nearly as idle: none.
    assert findings.late_senders(*_pipeline({0: 0.2, 1: 0.5, 2: 0.3, 3: 0.2}), set(), host, 100 * MS, 3) == []
    assert findings.late_senders(frame, p2p, {1}, host, 100 * MS, 3) == []
    assert findings.late_senders(*_pipeline({0: 0.2, 1: 8.0, 2: 5.0, 3: 0.2}), set(), host, 100 * MS, 3) == []
