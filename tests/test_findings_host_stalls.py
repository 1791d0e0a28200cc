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

from dataclasses import replace
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
    assert [(f.kind, f.culprit.ranks) for f in found] == [("host_stall", [2])]
    # Nobody late: nothing (the stages' idle between their operators differs, and is not weighed across stages).
    quiet = _figures({0: calm, 1: [(0.1, 50.0)] * 3, 2: calm, 3: calm}, step_ns=175 * MS)
    assert findings.rank_excess(quiet, stages, 175 * MS, host_ranks=frozenset(range(4))) == []
    # pp2: the one other lone rank stands in (a real 1F1B job of 2 stages: the last stage slept 90 ms before one
    # step's first operator, its neighbour started every step at once).
    pp2 = _figures({0: calm, 1: [(0.1, 30.0), (90.0, 100.0), (0.1, 31.0)]}, step_ns=60 * MS)
    rows = findings.rank_excess(pp2, [[0], [1]], 60 * MS, host_ranks=frozenset(range(2)))
    assert {(r["rank"], r["step"], r["part"]) for r in rows} == {(1, 1, "launch_delay_ns")}
    calm2 = _figures({0: calm, 1: [(0.3, 30.0), (0.1, 29.0), (0.2, 31.0)]}, step_ns=60 * MS)
    assert findings.rank_excess(calm2, [[0], [1]], 60 * MS, host_ranks=frozenset(range(2))) == []


def _instances(late: list[int], skew_ms: float = 10.0, per_step: int = 2) -> pa.Table:
    n = len(late)
    return pa.table({"group": ["0"] * n, "step": [i // per_step for i in range(n)], "late_rank": late, "total_wait_ns": [int(skew_ms * MS)] * n,
                     "skew_ns": [int(skew_ms * MS)] * n, "members": [2] * n})  # fmt: skip


def test_a_rank_last_at_every_collective_of_its_group_is_a_late_arriver() -> None:
    found = findings.late_arrivals(_instances([1] * 6), set(), 50 * MS, 3)
    assert [(f.kind, f.culprit.ranks, f.steps) for f in found] == [("host_stall", [1], [0, 1, 2])]
    assert "arrived last at 6 of the 6" in found[0].evidence
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
    assert [(f.kind, f.culprit.ranks) for f in held] == [("host_stall", [1])]
    assert (
        findings.late_arrivals(_instances([1] * 6), set(), 50 * MS, 3, host, clock(1.6), typical, members)
        == []
    )
    # Held back at 5 of 6 (the habit's share, PERSISTENT_SHARE, on CPU ranks where the stretch is the evidence).
    five = findings.late_arrivals(
        _instances([1, 1, 0, 1, 1, 1]), set(), 50 * MS, 3, host, clock(3.0), typical, members
    )
    assert [f.culprit.ranks for f in five] == [[1]]


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
    assert [(f.kind, f.culprit.ranks) for f in held] == [("host_stall", [1])]
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


def _call_figures(
    rows: list[dict[str, Any]], noise: dict[int, float]
) -> dict[tuple[int, int], dict[str, int]]:
    """Each rank's compute per step from its calls, stretched by its ``noise`` (how far a clean rank strays)."""
    out: dict[tuple[int, int], dict[str, int]] = {}
    for row in rows:
        fig = out.setdefault(
            (row["rank"], row["step"]), {"compute_ns": 0, "launch_delay_ns": 0, "hooks_ns": 0}
        )
        fig["compute_ns"] += int(row["dur_ns"] * noise.get(row["rank"], 1.0))
    return out


def test_a_cpu_rank_doing_more_work_beyond_doubt_is_a_culprit_under_the_hosts_noise_band() -> None:
    """8 CPU ranks in a step dominated by communication (800 ms, 84 ms of compute). Rank 4 makes 3 extra matmul
    calls per micro-batch (1.14x its peers' compute, 1.5 % of the step) while its peers stray within 1 % of each
    other: beyond doubt, at its peers' pace per call, a culprit (real: a dp x tp rank with extra matmuls 1.15x,
    a DDP rank with a 1.6x batch 1.5x in a 65 ms gloo step, both 1.8-2.4 % of it). The same 1.14x with every call
    slower alike (a busier core), or among peers that stray 8 %, is not."""
    host = frozenset(range(8))
    noise = {0: 1.0, 1: 1.01, 2: 0.995, 3: 1.005, 5: 0.99, 6: 1.0, 7: 1.008}

    def found(rank4: list[dict[str, Any]], spread: float = 1.0) -> list[tuple[str, list[int]]]:
        rows = [row for r in range(8) if r != 4 for row in _calls(r)] + rank4
        figures = _call_figures(rows, {r: 1 + (v - 1) * spread for r, v in noise.items()})
        frame = device_frame(host_events(rows))
        got = findings.rank_findings(frame, figures, [list(range(8))], {}, {}, 800 * MS, host)
        return [(f.kind, f.culprit.ranks) for f in got]

    (hit,) = found(_calls(4, extra_mm=3))
    assert hit[1] == [4] and hit[0] in ("slow_device", "operator_hotspot")
    assert found(_calls(4, slower=1.14)) == []
    assert found(_calls(4, extra_mm=3), spread=8.0) == []


def test_a_cpu_ranks_hold_shorter_than_the_schedulers_is_no_stall_at_a_steps_start_or_before_its_sends() -> (
    None
):
    """A host whose cores its ranks share holds a runnable rank for a few ms now and then: the real jobs' clean pp4
    twins held a lone rank 2.16 ms at one step's start (its peers: 0.02 ms) and a first stage 1.01 ms before three
    of four sends (the others: at most 0.4 ms), which a replay that lets the rest of the pipeline move prices at
    2.2-2.8 % of a step. Under HOST_HOLD_NS (3 ms) neither is a stall; the same shapes at 4 ms and 40 ms are."""
    stages, host = [[0], [1], [2], [3]], frozenset(range(4))
    calm = [(0.02, 2.0), (0.03, 2.0), (0.02, 2.0)]

    def late_start(lead_ms: float) -> list[Any]:
        figures = _figures(
            {0: calm, 1: calm, 2: [(0.02, 2.0), (lead_ms, 2.0), (0.02, 2.0)], 3: calm}, 30 * MS
        )
        return findings.rank_excess(figures, stages, 30 * MS, host_ranks=host)

    assert late_start(2.16) == []
    assert [(r["rank"], r["step"]) for r in late_start(4.0)] == [(2, 1)]
    assert [(r["rank"], r["step"]) for r in late_start(40.0)] == [(2, 1)]

    # in its hooks, every step (a real FSDP2 rank: 1.94 ms over its peers in AddmmBackward0's, ranked above another
    # rank's 90 ms stall at a step's start): the scheduler's too; a comm hook sleeping 5 ms is not
    def hooks(extra_ms: float) -> list[Any]:
        figures = {
            (r, step): {
                "compute_ns": 40 * MS,
                "launch_delay_ns": 20_000,
                "idle_ns": 2 * MS,
                "hooks_ns": int((0.75 + (extra_ms if r == 2 else 0.01 * r)) * MS),
                "step_ns": 60 * MS,
            }
            for r in range(4)
            for step in range(3)
        }
        return findings.rank_excess(figures, [[0, 1, 2, 3]], 60 * MS, host_ranks=host)

    assert hooks(1.94) == []
    assert {(r["rank"], r["part"]) for r in hooks(5.0)} == {(2, "hooks_ns")}
    held = findings.late_senders(*_pipeline({0: 1.01, 1: 0.3, 2: 0.4, 3: 0.2}), set(), host, 30 * MS, 3)
    assert held == []
    found = findings.late_senders(*_pipeline({0: 4.0, 1: 0.3, 2: 0.4, 3: 0.2}), set(), host, 30 * MS, 3)
    assert [f.culprit.ranks for f in found] == [[0]]


def _p2p_columns() -> dict[str, list[int]]:
    """The send/receive pairs' columns that ``late_senders`` reads, empty."""
    return {k: [] for k in ("src", "dst", "step", "send_start_ns", "recv_end_ns", "recv_start_ns")}


def _pipeline(
    gaps_ms: dict[int, float],
    pieces: dict[int, int] | None = None,
    compute_ms: dict[int, float] | None = None,
    received_ms: dict[int, float] | None = None,
) -> tuple[Any, pa.Table]:
    """pp4, one CPU rank per stage, 3 steps of 4 micro-batches: each rank's receive completes, it computes 2 ms
    (``compute_ms``), idles ``gaps_ms[rank]``, then sends to the next stage; a rank of ``pieces`` computes in that
    many operators and idles its time in as many holes, one after each (the Python between operators). The receive
    of a rank's sends lasts ``received_ms[rank]`` (default 20 ms: its receiver waited for it)."""
    rows: list[dict[str, Any]] = []
    p2p = _p2p_columns()
    arrive = {
        (r, s, k): s * 100 * MS + k * 20 * MS + r * MS for r in range(4) for s in range(3) for k in range(4)
    }
    for (r, s, k), t in arrive.items():
        n = (pieces or {}).get(r, 1)
        work = int((compute_ms or {}).get(r, 2.0) * MS)
        if n == 1:
            rows.append({"rank": r, "name": "aten::mm", "start_ns": t, "dur_ns": work, "step": s})
        else:
            each, hole = work // n, int(gaps_ms[r] * MS) // n
            rows += [
                {"rank": r, "name": "aten::mm", "start_ns": t + i * (each + hole), "dur_ns": each, "step": s}
                for i in range(n)
            ]
        end = arrive[((r + 1) % 4, s, k)]
        for key, v in zip(
            p2p,
            (
                r,
                (r + 1) % 4,
                s,
                t + work + int(gaps_ms[r] * MS),
                end,
                end - int((received_ms or {}).get(r, 20.0) * MS),
            ),
            strict=True,
        ):
            p2p[key].append(v)
    return device_frame(host_events(rows)), pa.table(p2p)


def test_a_lone_pipeline_rank_idling_before_each_of_its_sends_is_a_late_sender() -> None:
    host = frozenset(range(4))
    frame, p2p = _pipeline({0: 0.2, 1: 8.0, 2: 0.3, 3: 0.2})
    found = findings.late_senders(frame, p2p, set(), host, 100 * MS, 3)
    assert [(f.kind, f.culprit.ranks) for f in found] == [("host_stall", [1])]
    assert "idle 8.00 ms at a stretch (80 % of the time)" in found[0].evidence
    # As much idle time in 16 short holes between its operators (the Python of a stage with more glue: the last
    # one computes the loss before each backward send): no host holding the send back.
    assert (
        findings.late_senders(*_pipeline({0: 0.2, 1: 8.0, 2: 0.3, 3: 0.2}, {1: 16}), set(), host, 100 * MS, 3)
        == []
    )
    # Its neighbour's receives that do not wait for its sends (the next stage posts them late, pipelining's sender
    # blocked until its previous data is taken: pp8 1F1B, the stage before a sleeping one idles as long before its
    # sends, while its receiver's take 0.1-0.3 ms): it holds nobody back, and the sleeper is the late sender.
    held = _pipeline({0: 8.0, 1: 8.0, 2: 0.3, 3: 0.2}, received_ms={0: 0.2})
    assert [f.culprit.ranks for f in findings.late_senders(*held, set(), host, 100 * MS, 3)] == [[1]]
    # Alike senders, a rank already blamed for its own time, or another sender nearly as idle: none.
    assert findings.late_senders(*_pipeline({0: 0.2, 1: 0.5, 2: 0.3, 3: 0.2}), set(), host, 100 * MS, 3) == []
    assert findings.late_senders(frame, p2p, {1}, host, 100 * MS, 3) == []
    assert findings.late_senders(*_pipeline({0: 0.2, 1: 8.0, 2: 5.0, 3: 0.2}), set(), host, 100 * MS, 3) == []


def test_a_late_senders_hole_is_most_of_its_window_or_a_larger_share_of_it_than_any_others() -> None:
    """A stage whose heavier compute leaves its hole a smaller share of the window is a late sender as long as
    that share stands out too (pipe_1f1b_slow_link_s13: a 5.2 ms hole, 38 % of its windows, 2 % on the other
    sender). A slower rank's holes grow with its work: twice as long, the same share of a window twice as long
    (a 1.6x rank of a pp4 GPipe job: 1.1 ms holes, 15 % of its windows, 10 % on the others), and a rank of a
    small job that idles 50 us where its neighbour idles 25 us between operators of as little: neither."""
    host = frozenset(range(4))
    found = findings.late_senders(
        *_pipeline({0: 0.2, 1: 5.0, 2: 0.2, 3: 0.2}, compute_ms={1: 8.0}), set(), host, 100 * MS, 3
    )
    assert [(f.kind, f.culprit.ranks) for f in found] == [("host_stall", [1])]
    assert "(38 % of the time)" in found[0].evidence
    slower = _pipeline({0: 0.2, 1: 0.8, 2: 0.3, 3: 0.2}, compute_ms={1: 5.0})
    assert findings.late_senders(*slower, set(), host, 100 * MS, 3) == []
    small = _pipeline({0: 0.025, 1: 0.05, 2: 0.025, 3: 0.025}, compute_ms={0: 0.4, 1: 1.0, 2: 0.4, 3: 0.4})
    assert findings.late_senders(*small, set(), host, 1 * MS, 3) == []


def _both_ways(
    forward_ms: dict[int, float], backward_ms: float = 0.3, stages: int = 4
) -> tuple[Any, pa.Table]:
    """pp4 (``stages``), one CPU rank per stage, 3 steps of 200 ms, 4 micro-batches: each rank starts 1 ms after the previous
    stage's forward send (the first: at the step's start, then once stage 1's backward send of the micro-batch
    before has arrived), computes 2 ms, idles ``forward_ms[rank]`` (0.2 ms unless given) and sends forward (the
    last stage: none), then computes 2 ms, idles ``backward_ms`` and sends backward (the first stage: none); a
    receive completes 1 ms after its send."""
    rows: list[dict[str, Any]] = []
    p2p = _p2p_columns()
    for s in range(3):
        t = s * 200 * MS
        for _ in range(4):
            for r in range(stages):
                rows.append({"rank": r, "name": "aten::mm", "start_ns": t, "dur_ns": 2 * MS, "step": s})
                sent = t + 2 * MS + int(forward_ms.get(r, 0.2) * MS)
                if r < stages - 1:
                    for key, v in zip(p2p, (r, r + 1, s, sent, sent + MS, sent - 20 * MS), strict=True):
                        p2p[key].append(v)
                rows.append(
                    {"rank": r, "name": "aten::mm", "start_ns": sent + 1, "dur_ns": 2 * MS, "step": s}
                )
                if r > 0:
                    back = sent + 1 + 2 * MS + int(backward_ms * MS)
                    for key, v in zip(p2p, (r, r - 1, s, back, back + MS, back - 20 * MS), strict=True):
                        p2p[key].append(v)
                if r == 1:
                    again = back + MS + MS // 10  # the first stage's next micro-batch
                t = sent + MS
            t = again
    return device_frame(host_events(rows)), pa.table(p2p)


def test_a_sender_held_one_way_or_on_the_first_stage_is_a_late_sender() -> None:
    """A stage's forward hook sleeps 10 ms: its forward sends are late, its backward ones are not; the sends to
    each neighbour are weighed apart. The first stage sleeping before its sends is found as any other stage is."""
    host = frozenset(range(4))
    found = findings.late_senders(*_both_ways({1: 10.0}), set(), host, 200 * MS, 3)
    assert [(f.kind, f.culprit.ranks) for f in found] == [("host_stall", [1])]
    assert "its sends to rank 2" in found[0].evidence
    found = findings.late_senders(*_both_ways({0: 6.0}), set(), host, 200 * MS, 3)
    assert [(f.kind, f.culprit.ranks) for f in found] == [("host_stall", [0])]
    assert findings.late_senders(*_both_ways({}), set(), host, 200 * MS, 3) == []
    # A pipeline of two stages (pipe_1f1b_slow_link_s3: rank 0 idle 5.33 ms before three of four of its sends, at
    # most 0.20 ms on rank 1): its one other sender is the one to compare with.
    two = frozenset(range(2))
    found = findings.late_senders(*_both_ways({0: 6.0}, stages=2), set(), two, 200 * MS, 3)
    assert [(f.kind, f.culprit.ranks) for f in found] == [("host_stall", [0])]
    assert findings.late_senders(*_both_ways({}, stages=2), set(), two, 200 * MS, 3) == []


def test_on_cpu_ranks_a_finding_must_cost_more_than_the_schedulers_noise() -> None:
    """A job of CPU ranks only keeps the findings that cost HOST_NOISE_PCT once replayed (a clean job's reruns
    show culprits at 0-0.7 % of a step), a replayed slow link MIN_IMPACT_PCT; clock skew costs nothing and stays."""
    stall = findings.finding("host_stall", findings.blamed([1]), [2], 0.64, "a hold-up")
    stage = findings.finding("stage_imbalance", findings.blamed([2], stage=1), [], 1.5, "a stage")
    link = replace(
        findings.finding("slow_link", findings.blamed([0, 1], link=[0, 1]), [2], 1.5, "a link"), what_if={}
    )
    skew = findings.finding("clock_skew", findings.blamed([3], hosts=["b"]), [], 0.0, "a clock")
    assert findings.above_host_noise([stall, stage, link, skew]) == [stage, skew]


def test_on_cpu_ranks_a_stall_its_peers_absorbed_is_kept_and_says_so() -> None:
    """A host stall replayed to less than the host's noise stays (its detector's bars keep the scheduler's holds
    out; on a host its ranks share, the others ran while it slept: ddp_host_stall_s55_stack, rank 6's 40 ms before
    its step's first work on 2 cores of 8 ranks, replayed away, saved 0.0 %), its impact its replay's, and says so."""
    evidence = "rank 6: first device work after 40.28 ms vs 0.08 ms on peers in step 2 (+40.20 ms)"
    replayed = {
        "predicted_step_ms": 81.5,
        "saving_ms": 0.0,
        "saving_pct": 0.0,
        "edits": ["rank=6:host=remove:steps=2"],
    }
    stall = replace(
        findings.finding("host_stall", findings.blamed([6]), [2], 0.0, evidence), what_if=replayed
    )
    slow = replace(
        findings.finding("slow_device", findings.blamed([3]), [2], 0.5, "a rank"), what_if=replayed
    )
    [kept] = findings.above_host_noise([stall, slow])
    assert (kept.kind, kept.culprit.ranks, kept.impact_pct, kept.severity) == ("host_stall", [6], 0.0, "low")
    assert kept.evidence.startswith(evidence) and "only 0.00 % shorter" in kept.evidence
    costly = replace(stall, impact_pct=4.2, what_if={**replayed, "saving_pct": 4.2})
    assert findings.above_host_noise([costly]) == [costly]  # above the noise: as it was


ACCUMULATE = "autograd::engine::evaluate_function: torch::autograd::AccumulateGrad"


def _hooked(rank: int, hook_ms: list[float], mm_ms: float = 5) -> list[dict[str, Any]]:
    """Three steps of 100 ms on one CPU rank: four matmuls of ``mm_ms``, each followed by an AccumulateGrad node
    whose own time is 0.2 ms; in step s one of them also runs a hook for ``hook_ms[s]`` (a DDP comm hook that
    sleeps before its bucket's all_reduce: time in the wrapper's own code, no operator under it)."""
    rows = []
    for step in range(3):
        t = step * 100 * MS
        for k in range(4):
            rows.append(
                {"rank": rank, "name": "aten::mm", "start_ns": t, "dur_ns": int(mm_ms * MS), "step": step}
            )
            t += int(mm_ms * MS)
            own = int(0.2 * MS + (hook_ms[step] * MS if k == 3 else 0))
            rows.append({"rank": rank, "name": ACCUMULATE, "start_ns": t, "dur_ns": own, "step": step})
            t += own
    return rows


def test_a_cpu_rank_held_in_its_hooks_every_step_is_a_host_stall_naming_the_wrapper() -> None:
    """Rank 1's comm hook sleeps 10 ms in every step: its compute at typical durations is its peers', it starts
    on time and its wrapper's span hides the sleep from its idle time; the wrappers' own time beyond their typical
    durations (hooks_ns) shows it, and the finding names where it ran. Rank 2 held once (the scheduler) is none."""
    spans = _steps([(s * 100 * MS, (s + 1) * 100 * MS) for s in range(3)])
    hooks = {0: [0, 0, 0], 1: [10, 10, 10], 2: [0, 12, 0], 3: [0, 0, 0]}
    frames = {r: device_frame(host_events(_hooked(r, h))) for r, h in hooks.items()}
    figures: dict[tuple[int, int], dict[str, int]] = {}
    for r, frame in frames.items():
        table = findings.step_figures(frame, spans, host_lanes=True).to_pylist()
        figures.update({(r, row["step"]): row for row in table})
    assert [figures[(1, s)]["hooks_ns"] for s in range(3)] == [10 * MS] * 3
    assert figures[(0, 0)]["hooks_ns"] == 0 and figures[(1, 0)]["launch_delay_ns"] == 0
    assert figures[(1, 0)]["compute_ns"] == figures[(0, 0)]["compute_ns"]  # typical durations: no extra work
    peers, host = [[0, 1, 2, 3]], frozenset(range(4))
    rows = findings.rank_excess(figures, peers, 100 * MS, host_ranks=host)
    assert {(r["rank"], r["part"]) for r in rows} == {(1, "hooks_ns")}
    everyone = device_frame(host_events([row for r, h in hooks.items() for row in _hooked(r, h)]))
    waits = {(r, s): {"wait_ns": 0, "caused_ns": 10 * MS if r == 1 else 0} for r in hooks for s in range(3)}
    found = findings.rank_findings(everyone, figures, peers, {}, waits, 100 * MS, host)
    assert [(f.kind, f.culprit.ranks, f.culprit.operator) for f in found] == [
        ("host_stall", [1], "AccumulateGrad")
    ]
    assert "hooks" in found[0].evidence and found[0].impact_pct == pytest.approx(10.0)
    # The replay cannot remove a stall inside wrappers as a launch delay: the finding keeps its own estimate.
    from paradiag.analysis import kinds

    assert kinds.stall_removed(found[0]) == []
    # On a GPU rank (no host lanes) the figure is 0: a wrapper's span there is the host's, not the device's.
    assert findings.step_figures(frames[1], spans).column("hooks_ns").to_pylist() == [0, 0, 0]


@pytest.mark.parametrize(
    ("hook_ms", "mm_ms", "kind"),
    [
        # Held 10 ms in its hook, its work a little slower too (the work after a sleep runs cold): the hooks.
        ([10, 10, 10], 6.5, "host_stall"),
        # Every rank's hook runs 10 ms; rank 1's 14 ms, and its work 1.5x: a slower rank, slower in its hooks too.
        ([14, 14, 14], 7.5, "slow_device"),
    ],
)
def test_a_rank_slower_in_its_hooks_and_its_work_is_blamed_for_the_larger_stretch(
    hook_ms: list[float], mm_ms: float, kind: str
) -> None:
    """A CPU rank both slower at its compute and held in its hooks: one cause, the one it is the further beyond
    its peers in (HOOK_DOMINANCE); the compute finding of a rank held in a sleeping hook was the CI's flake."""
    spans = _steps([(s * 100 * MS, (s + 1) * 100 * MS) for s in range(3)])
    others = [0, 0, 0] if kind == "host_stall" else [10, 10, 10]
    runs = {r: _hooked(r, hook_ms, mm_ms) if r == 1 else _hooked(r, others) for r in range(4)}
    figures: dict[tuple[int, int], dict[str, int]] = {}
    for r, rows in runs.items():
        table = findings.step_figures(device_frame(host_events(rows)), spans, host_lanes=True).to_pylist()
        figures.update({(r, row["step"]): row for row in table})
    peers, host = [[0, 1, 2, 3]], frozenset(range(4))
    assert {r["part"] for r in findings.rank_excess(figures, peers, 100 * MS, host_ranks=host)} == {
        "compute_ns",
        "hooks_ns",
    }
    everyone = device_frame(host_events([row for rows in runs.values() for row in rows]))
    waits = {(r, s): {"wait_ns": 0, "caused_ns": 10 * MS if r == 1 else 0} for r in runs for s in range(3)}
    found = findings.rank_findings(everyone, figures, peers, {}, waits, 100 * MS, host)
    assert [(f.kind, f.culprit.ranks) for f in found] == [(kind, [1])]


def test_findings_of_a_cpu_job_are_ordered_by_their_replays_when_every_one_has_one() -> None:
    """isend_slow_link_s1 (real, pp8): a stage 1.22x as heavy on a busier core kept its pipeline estimate (8.5 %;
    its replay 5.5 %) and came before rank 1's 5 ms hole before each send (its replay 5.8 %). On a CPU job the
    replays order them; the impacts stay as they were; without a replay for each, the impacts order them."""
    stage = replace(
        findings.finding("stage_imbalance", findings.blamed([4], stage=4), [], 8.5, "stage 4 heavier"),
        what_if={"saving_pct": 5.5, "saving_ms": 10.3},
    )
    stall = replace(
        findings.finding("host_stall", findings.blamed([1]), [2, 3, 4], 5.8, "rank 1 late to send"),
        what_if={"saving_pct": 5.8, "saving_ms": 10.8},
    )
    skew = findings.finding("clock_skew", findings.blamed([0]), [], 0.0, "a clock off")
    found = [stage, skew, stall]
    assert [f.kind for f in findings.ranked(found, by_replay=True)] == [
        "host_stall",
        "stage_imbalance",
        "clock_skew",
    ]
    assert [f.kind for f in findings.ranked(found)] == ["stage_imbalance", "host_stall", "clock_skew"]
    assert [f.impact_pct for f in findings.ranked(found, by_replay=True)] == [5.8, 8.5, 0.0]
    unreplayed = replace(stall, what_if=None)
    assert [f.kind for f in findings.ranked([stage, unreplayed], by_replay=True)] == [
        "stage_imbalance",
        "host_stall",
    ]
    # mesh_dp_pp_slow_rank_s14 (real, dp2 x pp2): rank 0 runs every operator 1.4x; the LM-head stage 1.17x the
    # other. No split of whole layers does better, yet the stages' replay saved 17.0 ms a step, evening out rank
    # 0 with its replica; rank 0's own replay 16.4 ms. A replay that moved no layer does not rank its finding.
    even = replace(
        findings.finding("stage_imbalance", findings.blamed([1, 3], stage=1), [], 4.2, "stage 1 heavier"),
        what_if={"saving_pct": 34.9, "saving_ms": 17.0, "layers": {"now": [2, 2], "balanced": [2, 2]}},
    )
    slow = replace(
        findings.finding("slow_device", findings.blamed([0]), [2, 3, 4], 14.9, "rank 0 slower"),
        what_if={"saving_pct": 33.6, "saving_ms": 16.4},
    )
    assert [f.kind for f in findings.ranked([even, slow], by_replay=True)] == [
        "slow_device",
        "stage_imbalance",
    ]
    moved = replace(even, what_if={**even.what_if, "layers": {"now": [3, 1], "balanced": [2, 2]}})
    assert [f.kind for f in findings.ranked([moved, slow], by_replay=True)] == [
        "stage_imbalance",
        "slow_device",
    ]
    # The same job with its sends linked right (each re-entered c10d::send one enqueue): the stages' replay saves
    # nothing, rank 0's only 2.9 % (its gloo on cores its spinning shares, which no replay models). A replay that
    # moved no layer ranks its finding by its own estimate at most: the split does nothing, the slow rank something.
    idle = replace(even, what_if={**even.what_if, "saving_pct": 0.0, "saving_ms": 0.0})
    weak = replace(slow, impact_pct=22.5, what_if={"saving_pct": 2.9, "saving_ms": 1.4})
    assert [f.kind for f in findings.ranked([idle, weak], by_replay=True)] == [
        "slow_device",
        "stage_imbalance",
    ]
    # mesh_dp_pp_heavy_stage_s53_usual (real, dp2 x pp2, FSDP2, checkpointing): the stage of twice the blocks at
    # 12.6 % by the pipeline heuristic, its replay -0.04 %; a rank on a busier core 1.2x its replica, 2.6 %, its
    # replay 0.65 %. Replays that all save less than the host's noise order nothing: the estimates do.
    heavy = replace(
        findings.finding("stage_imbalance", findings.blamed([1, 3], stage=1), [], 12.6, "stage 1 heavier"),
        what_if={"saving_pct": -0.04, "saving_ms": -0.1, "layers": {"now": [3, 5], "balanced": [4, 4]}},
    )
    busier = replace(
        findings.finding("slow_device", findings.blamed([0]), [7, 8, 9], 2.6, "rank 0 slower"),
        what_if={"saving_pct": 0.65, "saving_ms": 1.4},
    )
    assert [f.kind for f in findings.ranked([busier, heavy], by_replay=True)] == [
        "stage_imbalance",
        "slow_device",
    ]
