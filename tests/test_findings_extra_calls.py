"""Extra calls (issue 22): a replica that calls operators more often than its peers, which all call them alike, does
more work by construction, however little its compute time strays on a shared host; counted, such work is a
finding down to EXTRA_IMPACT_PCT of the step, the timing noise's floors aside. Counts that differ among the other
peers too, or a rank that also calls some operator less (another program, not more work), tell nothing."""

from __future__ import annotations

from typing import Any

from paradiag.analysis import findings
from paradiag.analysis.diagnosis_types import Culprit, Finding
from paradiag.analysis.frame import device_frame
from paradiag.analysis.operators import extra_calls, per_step_calls
from tests.helpers import host_events

MS = 1_000_000
US = 1_000


def _extra(frame: Any, peers: list[list[int]], host: frozenset[int]) -> dict[int, dict[str, Any]]:
    """extra_calls of the frame's calls per (rank, step, operator), as the rank detector counts them."""
    return extra_calls(per_step_calls(frame, host), peers)


def _calls(plan: dict[int, dict[str, list[int]]], dur_us: int = 100) -> list[dict[str, Any]]:
    """rank -> operator -> calls per step (one entry per step): each call its own row of ``dur_us``."""
    rows = []
    for rank, ops in plan.items():
        for name, per_step in ops.items():
            for step, n in enumerate(per_step):
                for k in range(n):
                    rows.append(
                        {
                            "rank": rank,
                            "name": name,
                            "step": step,
                            "start_ns": step * 100 * MS + k * 200 * US + hash(name) % 1000,
                            "dur_ns": dur_us * US,
                        }
                    )
    return rows


def _frame(plan: dict[int, dict[str, list[int]]]) -> Any:
    return device_frame(host_events(_calls(plan)))


def test_a_rank_calling_operators_more_often_than_its_alike_peers_every_step_does_extra_work() -> None:
    same = {"aten::mm": [20, 20, 20], "aten::add": [10, 10, 10], "aten::view": [7, 9, 8]}
    plan = {r: dict(same) for r in range(4)}
    plan[2] = {**same, "aten::mm": [24, 24, 24], "aten::view": [9, 7, 7]}  # 4 extra matmuls a step
    plan[3] = {**same, "aten::view": [6, 8, 9]}  # views vary on every rank: no evidence either way
    frame = _frame(plan)
    found = _extra(frame, [[0, 1, 2, 3]], frozenset(range(4)))
    assert set(found) == {2}
    top = found[2]["operators"][0]
    assert frame.names[top["name"]] == "aten::mm" and (top["calls"], top["peer_calls"]) == (24, 20)
    assert len(found[2]["operators"]) == 1  # the views, which differ among the others too, are not counted
    # Each extra call at the rank's own typical duration (100 us here): 4 x 0.1 ms a step.
    assert all(abs(ns - 4 * 100 * US) < 1 for ns in found[2]["per_step"].values())


def test_extra_calls_in_only_some_steps_or_with_an_operator_called_less_are_no_evidence() -> None:
    same = {"aten::mm": [20, 20, 20], "aten::add": [10, 10, 10]}
    plan = {r: dict(same) for r in range(4)}
    plan[1] = {**same, "aten::mm": [24, 20, 24]}  # not every step
    plan[2] = {
        "aten::mm": [24, 24, 24],
        "aten::add": [8, 8, 8],
    }  # more of one, less of another: another program
    assert _extra(_frame(plan), [[0, 1, 2, 3]], frozenset(range(4))) == {}
    # Alone in its stage: nobody to count against.
    assert _extra(_frame({0: {"aten::mm": [24, 24]}}), [[0]], frozenset({0})) == {}


def test_a_wrapper_whose_calls_fall_either_side_of_a_step_boundary_hides_no_extra_work() -> None:
    """A real dp2 x tp2 rank with extra matmuls (``mesh_dp_tp_slow_rank_s51_usual``): DTensor's
    ``_FromTorchTensor`` ran 12, 11, 11 times in its steps and 12, 12, 11 in its peers': it called it less in step 1,
    which its peers call as often as one another there but not in every step. That is a count that moves, not
    another program: its 16 extra matmuls a step are extra work."""
    same = {"aten::mm": [15, 15, 15], "aten::add": [10, 10, 10], "_FromTorchTensor": [12, 12, 11]}
    plan = {r: dict(same) for r in range(4)}
    plan[1] = {**same, "aten::mm": [31, 31, 31], "_FromTorchTensor": [12, 11, 11]}
    assert set(_extra(_frame(plan), [[0, 1, 2, 3]], frozenset(range(4)))) == {1}


def test_two_replicas_count_only_where_both_call_an_operator_alike_in_every_step() -> None:
    steady = {0: {"aten::mm": [20, 20, 20]}, 1: {"aten::mm": [23, 23, 23]}}
    assert set(_extra(_frame(steady), [[0, 1]], frozenset({0, 1}))) == {1}
    wobbly = {0: {"aten::mm": [20, 21, 20]}, 1: {"aten::mm": [23, 23, 24]}}
    assert _extra(_frame(wobbly), [[0, 1]], frozenset({0, 1})) == {}


def test_extra_calls_are_a_finding_down_to_their_own_floor_and_not_for_a_rank_already_named() -> None:
    same = {"aten::add": [10, 10, 10]}
    plan = {r: {**same, "aten::mm": [20, 20, 20]} for r in range(4)}
    plan[1] = {**same, "aten::mm": [30, 30, 30]}  # 10 extra calls of 0.1 ms: 1 ms a step
    frame = _frame(plan)
    peers, host = [[0, 1, 2, 3]], frozenset(range(4))
    extra = _extra(frame, peers, host)
    # A 200 ms step: 0.5 % of it, under the 1 % timing floor of CPU jobs, over EXTRA_IMPACT_PCT.
    [f] = findings.extra_call_findings(extra, frame, peers, host, 200 * MS, 1.0, named=set())
    assert (f.kind, f.culprit.ranks, f.culprit.operator) == ("operator_hotspot", [1], "aten::mm")
    assert abs(f.impact_pct - 0.5) < 0.01 and findings.counted(f)
    assert "calls mm 30 times a step, each of its 3 peers 20" in f.evidence
    assert findings.above_host_noise([f]) == [f]  # counted, not timed: the scheduler's floor does not apply
    # On a busy host the calls' typical time is weighed at the clock's pace (x compute_scale).
    [slow] = findings.extra_call_findings(extra, frame, peers, host, 200 * MS, 2.0, named=set())
    assert abs(slow.impact_pct - 1.0) < 0.01
    # Too little of the step, or a rank another finding names already: nothing.
    assert findings.extra_call_findings(extra, frame, peers, host, 1000 * MS, 1.0, named=set()) == []
    assert findings.extra_call_findings(extra, frame, peers, host, 200 * MS, 1.0, named={1}) == []
    # A timed finding of that size stays under the CPU jobs' floor.
    timed = Finding(
        kind="operator_hotspot",
        culprit=Culprit(ranks=[1], operator="aten::mm"),
        steps=[0],
        impact_pct=0.5,
        severity="low",
        evidence="rank 1: compute 1.10 ms vs 1.00 ms on peers",
    )
    assert findings.above_host_noise([timed]) == []
