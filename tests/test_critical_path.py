"""The critical path: on a fault-free job it spans the step; with a fault it runs through the culprit."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import jsonschema
import numpy as np
import pyarrow as pa
import pytest
from click.testing import CliRunner

import paradiag
from paradiag.analysis import comm
from paradiag.analysis.critical_path import PATH_KINDS, composition, critical_path
from paradiag.analysis.diagnosis_types import Diagnosis
from paradiag.analysis.frame import Frame
from paradiag.analysis.report import build_report
from paradiag.cli import main
from paradiag.simulator import SimConfig, parse_fault, simulate
from tests.conftest import shared_path

# Big enough that compute, not kernel launches, sets the step (at hidden 512 the host is the bottleneck).
MESH = {"dp": 2, "tp": 2, "pp": 2, "steps": 2, "layers": 4, "jitter": 0.0}
SCHEMA = Path(__file__).resolve().parents[1] / "docs" / "report.schema.json"


def _diagnosis(tmp: Path, name: str, *faults: str, **options: Any) -> tuple[paradiag.job.Job, Diagnosis]:
    folder = simulate(
        SimConfig(output=tmp / name, faults=tuple(parse_fault(f) for f in faults), **{**MESH, **options})
    )
    job = paradiag.open(folder)
    return job, job.diagnosis()


def test_fault_free_path_spans_the_step_without_gaps(tmp_path: Path) -> None:
    job, d = _diagnosis(tmp_path, "clean")
    steps = composition(d.critical_path)
    assert [s["step"] for s in steps] == sorted(set(job.steps.column("step").to_pylist()))
    for s in steps:
        assert s["length_ns"] == pytest.approx(d.step_time_ns, rel=0.02)
        assert s["length_ns"] == s["end_ns"] - s["start_ns"] == sum(s[f"{k}_ns"] for k in PATH_KINDS)
    rows = d.critical_path.to_pylist()
    assert {r["kind"] for r in rows} <= set(PATH_KINDS)
    for a, b in itertools.pairwise(rows):
        if a["step"] == b["step"]:
            assert a["end_ns"] == b["start_ns"]  # the segments tile the path
        assert b["end_ns"] > b["start_ns"] or b["kind"] == "host"


# The last stage carries the LM head: a culprit in the first stage sets the step only with a small vocabulary.
# Its share stays lower (about 2/3): the pipeline's fill and drain run on the other stage whoever is slow.
@pytest.mark.parametrize(
    ("culprit", "vocab", "share"),
    [(5, 50304, 0.8), (6, 50304, 0.8), (1, 256, 0.6), (2, 256, 0.6)],
)
def test_slow_device_puts_the_path_on_the_culprit(
    tmp_path: Path, culprit: int, vocab: int, share: float
) -> None:
    _, d = _diagnosis(tmp_path, "slow", f"slow_device:ranks={culprit},factor=1.3", vocab=vocab)
    for s in composition(d.critical_path):
        compute = {r["rank"]: r["compute_ns"] for r in s["by_rank"]}
        assert compute[culprit] > share * s["compute_ns"], s["by_rank"]


def test_slow_link_is_communication_on_its_ranks(tmp_path: Path) -> None:
    _, d = _diagnosis(tmp_path, "link", "slow_link:ranks=4-6,factor=8")
    for s in composition(d.critical_path):
        assert s["communication_ns"] > 0.5 * s["length_ns"]
        comm = {r["rank"]: r["communication_ns"] for r in s["by_rank"]}
        assert max(comm, key=lambda r: comm[r]) in (4, 6)
        assert s["by_operator"][0]["kind"] == "communication"


def test_host_stall_is_host_time_on_the_stalled_rank(tmp_path: Path) -> None:
    _, d = _diagnosis(tmp_path, "stall", "host_stall:ranks=1,steps=1,ms=30")
    stalled = next(s for s in composition(d.critical_path) if s["step"] == 1)
    host = {r["rank"]: r["host_ns"] for r in stalled["by_rank"]}
    assert host[1] >= 30_000_000
    assert stalled["length_ns"] == pytest.approx(d.step_time_ns + 30_000_000, rel=0.5)


def test_report_has_the_path_per_step(tmp_path: Path) -> None:
    job, d = _diagnosis(tmp_path, "report", "slow_device:ranks=5,factor=1.3", steps=1)
    report = json.loads(json.dumps(build_report(job)))
    jsonschema.validate(report, json.loads(SCHEMA.read_text()))
    (entry,) = report["critical_path"]
    assert (
        entry["compute_ns"] + entry["communication_ns"] + entry["waiting_ns"] + entry["host_ns"]
        == entry["length_ns"]
    )
    assert max(entry["by_rank"], key=lambda r: r["compute_ns"])["rank"] == 5
    assert d.critical_path.num_rows == entry["segments"]


def test_analyze_prints_the_path_of_each_step(tmp_path: Path) -> None:
    job, _ = _diagnosis(tmp_path, "cli", "slow_device:ranks=5,factor=1.3")
    result = CliRunner().invoke(main, ["analyze", str(job.source)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    lines = [line for line in result.output.splitlines() if line.startswith("critical path of step")]
    assert len(lines) == 2 and all("most compute on rank 5" in line for line in lines)


def _frame(rows: list[tuple[int, int, str, str, int, int, int]]) -> Frame:
    """Device work of step 0 from (rank, track, kind, name, start, end, peer) rows; ``all_reduce`` is one
    collective (group g, seq 0) and ``send``/``recv`` go to ``peer``."""
    rows = sorted(rows, key=lambda r: (r[0], r[4]))
    kinds, names = ["compute", "communication", "sync"], sorted({r[3] for r in rows})
    collectives = ["all_reduce", "send", "recv"]

    def col(values: list[int]) -> np.ndarray:
        return np.array(values, dtype=np.int64)

    coll = [collectives.index(r[3]) if r[3] in collectives else -1 for r in rows]
    return Frame(
        rank=col([r[0] for r in rows]).astype(np.int32), track=col([r[1] for r in rows]).astype(np.int32),
        kind=col([kinds.index(r[2]) for r in rows]), name=col([names.index(r[3]) for r in rows]), op=col([-1] * len(rows)), launch=col([-1] * len(rows)),
        start=col([r[4] for r in rows]), end=col([r[5] for r in rows]), step=col([0] * len(rows)), collective=col(coll),
        group=col([0 if c >= 0 else -1 for c in coll]), peer=col([r[6] for r in rows]),
        bytes=col([8 if c >= 0 else -1 for c in coll]), seq=col([0 if c >= 0 else -1 for c in coll]),
        kinds=kinds, names=names, collectives=collectives, groups=["g"],
    )  # fmt: skip


def _path(frame: Frame, ranks: int) -> list[tuple[int, str, int, int]]:
    steps = pa.table({"rank": list(range(ranks)), "step": [0] * ranks, "start_ns": [0] * ranks})
    table = critical_path(frame, comm.collective_participation(frame), comm.p2p_transfers(frame), steps)
    return [(r["rank"], r["kind"], r["start_ns"], r["end_ns"]) for r in table.to_pylist()]


def test_a_kernel_released_twice_keeps_its_last_release() -> None:
    """A send/receive pair's release overrides a collective's for the same kernel (the order they are listed in),
    and only communication kernels are released: a compute kernel with the same rank and times is not."""
    from paradiag.analysis.critical_path import _released, _releases

    participation = pa.table(
        {"rank": [0], "start_ns": [10], "end_ns": [50], "last_arrival_ns": [40], "late_rank": [1]}
    )
    p2p = pa.table(
        {
            "src": [2],
            "dst": [0],
            "send_start_ns": [30],
            "send_end_ns": [50],
            "recv_start_ns": [10],
            "recv_end_ns": [50],
        }
    )
    frame = _frame(
        [
            (0, 1, "compute", "a", 10, 50, -1),
            (0, 2, "communication", "recv", 10, 50, 2),
            (0, 2, "communication", "recv", 60, 70, 2),
        ]
    )
    released = _released(frame, _releases(participation, p2p))
    assert released.tolist() == [[-1, -1], [2, 30], [-1, -1]]
    assert _released(frame, _releases(participation.slice(0, 0), p2p.slice(0, 0))).tolist() == [[-1, -1]] * 3


def test_a_collective_hands_the_path_to_its_last_arrival() -> None:
    frame = _frame([
        (0, 1, "compute", "a", 0, 10, -1), (0, 2, "communication", "all_reduce", 10, 50, -1), (0, 1, "compute", "c", 52, 60, -1),
        (1, 1, "compute", "b", 0, 40, -1), (1, 2, "communication", "all_reduce", 40, 50, -1),
    ])  # fmt: skip
    assert _path(frame, 2) == [
        (1, "compute", 0, 40),
        (0, "communication", 40, 50),
        (0, "host", 50, 52),
        (0, "compute", 52, 60),
    ]


def test_a_receive_that_waited_hands_the_path_to_the_sender() -> None:
    frame = _frame([
        (0, 1, "compute", "a", 0, 30, -1), (0, 3, "communication", "send", 30, 35, 1),
        (1, 3, "communication", "recv", 5, 35, 0), (1, 1, "compute", "b", 35, 45, -1),
    ])  # fmt: skip
    assert _path(frame, 2) == [(0, "compute", 0, 30), (1, "communication", 30, 35), (1, "compute", 35, 45)]


def test_work_ending_within_the_rounding_still_releases_the_next() -> None:
    # The sync on stream 2 ends 500 ns after the kernel it released started (times rounded by the trace).
    frame = _frame(
        [
            (0, 1, "compute", "a", 0, 1_000, -1),
            (0, 2, "sync", "wait", 1_000, 9_500, -1),
            (0, 1, "compute", "b", 9_000, 12_000, -1),
        ]
    )
    assert _path(frame, 1) == [
        (0, "compute", 0, 1_000),
        (0, "waiting", 1_000, 9_000),
        (0, "compute", 9_000, 12_000),
    ]


def test_a_device_wait_hands_the_path_to_the_stream_it_waited_for() -> None:
    frame = _frame([
        (0, 3, "compute", "long", 50_000, 4_990_000, -1), (0, 2, "compute", "short", 0, 100_000, -1),
        (0, 2, "sync", "wait", 100_000, 5_000_000, -1), (0, 2, "compute", "after", 5_000_000, 6_000_000, -1),
    ])  # fmt: skip
    expected = [
        (0, "host", 0, 50_000),
        (0, "compute", 50_000, 4_990_000),
        (0, "waiting", 4_990_000, 5_000_000),
    ]
    assert _path(frame, 1) == [*expected, (0, "compute", 5_000_000, 6_000_000)]


def test_work_launched_later_did_not_release_it() -> None:
    """Where the critical path and the what-if disagreed (issue 24): a receive posted after the all-reduce was
    launched, that happened to end just before the all-reduce started, did not release it (its launch came later:
    the host had already queued the all-reduce). The path goes back to the work launched before it, the host gap
    after it, as the replay's graph anchors the all-reduce (both ask depgraph.released_by); without the launches
    (-1) the receive is the latest work before it and releases it."""
    from paradiag.analysis.depgraph import anchors

    rows = [
        (0, 1, "compute", "a", 0, 30_000, -1),
        (0, 3, "communication", "recv", 5_000, 39_800, 1),
        (0, 2, "communication", "all_reduce", 40_000, 50_000, -1),
    ]
    frame = _frame(rows)
    frame.launch[:] = [1_000, 3_000, 2_000]  # a, then the all-reduce, then the receive
    assert _path(frame, 1) == [
        (0, "compute", 0, 30_000),
        (0, "host", 30_000, 40_000),
        (0, "communication", 40_000, 50_000),
    ]
    assert anchors(frame)[0].tolist() == [-1, -1, 0]
    unknown = _frame(rows)  # no launch in the traces: the latest work that ended before it released it
    assert _path(unknown, 1) == [
        (0, "host", 0, 5_000),
        (0, "communication", 5_000, 39_800),
        (0, "host", 39_800, 40_000),
        (0, "communication", 40_000, 50_000),
    ]
    assert anchors(unknown)[0].tolist() == [-1, -1, 1]


def test_real_npu_wait_is_followed_to_the_collective() -> None:
    """On the real Ascend trace the compute stream's long EVENT_WAIT waited for the all-reduce on the
    communication stream: the path goes on through the all-reduce, not through the wait."""
    job = paradiag.open(shared_path("npu", "msinsight_alexnet_dp8_db_level1"))
    (step,) = composition(job.diagnosis().critical_path)
    assert step["waiting_ns"] < 0.01 * step["length_ns"]
    assert step["communication_ns"] > 0.5 * step["length_ns"]
    assert step["by_operator"][0]["kind"] == "communication"


def _handed_on_graph() -> Any:
    """The replay graph of rank 0 computing ``a`` (0-30) and sending (32-34) to rank 1, whose receive (5-31) ends
    before the send's event begins (gloo's annotation after the handoff), then computes ``b`` (31-41)."""
    from paradiag.analysis.depgraph import build_graph

    frame = _frame([
        (0, 1, "compute", "a", 0, 30, -1), (0, 3, "communication", "send", 32, 34, 1),
        (1, 3, "communication", "recv", 5, 31, 0), (1, 1, "compute", "b", 31, 41, -1),
    ])  # fmt: skip
    steps = pa.table({"rank": [0, 1], "step": [0, 0], "start_ns": [0, 0], "end_ns": [34, 41]})
    return build_graph(frame, steps, comm.p2p_transfers(frame.take(slice(None))), {0: "h", 1: "h"})


def test_a_receive_that_ends_before_its_send_begins_still_waits_for_it() -> None:
    """gloo records a send's annotation once c10d::send has passed the data on: the traces can show the receive
    ending (31) before its send's event begins (32). The receive still waited for that send: when the sender's
    work before it takes 20 less, the receiver ends 20 earlier, and so does its work after it (the replay once
    took such a receive for one that never waited, and held it at its measured end)."""
    from paradiag.analysis.replay import Timing, replay

    g = _handed_on_graph()
    t = Timing.of(g)
    assert (replay(g, t) == g.end).all()  # without an edit, the traces as they are
    a = int(np.flatnonzero((g.rank == 0) & (g.end == 30))[0])
    t.dur = t.dur.copy()
    t.dur[a] -= 20
    moved = g.end - replay(g, t)
    assert {(int(r), int(e)): int(m) for r, e, m in zip(g.rank, g.end, moved, strict=True)} == {
        (0, 30): 20,
        (0, 34): 20,
        (1, 31): 20,
        (1, 41): 20,
    }


def _timed_graph(
    rows: list[tuple[int, int, str, str, int, int, int]],
    us: int,
    step_ends: tuple[int, int],
    host_ranks: frozenset[int] = frozenset(),
) -> tuple[Any, Any]:
    """The replay graph of two ranks' step 0 from (rank, track, kind, name, start, end, peer) rows in units of
    ``us`` ns, and its timing, checked to give the traces back without an edit."""
    from paradiag.analysis.depgraph import build_graph
    from paradiag.analysis.replay import Timing, replay

    frame = _frame(
        [(r, track, kind, name, a * us, b * us, peer) for r, track, kind, name, a, b, peer in rows]
    )
    steps = pa.table(
        {"rank": [0, 1], "step": [0, 0], "start_ns": [0, 0], "end_ns": [e * us for e in step_ends]}
    )
    p2p = comm.p2p_transfers(frame.take(slice(None)))
    g = build_graph(frame, steps, p2p, {0: "h", 1: "h"}, host_ranks=host_ranks)
    t = Timing.of(g)
    assert (replay(g, t) == g.end).all()  # without an edit, the graph's own times
    return g, t


def _moves(g: Any, t: Any, us: int) -> dict[tuple[int, int], int]:
    """(rank, measured end) -> how much earlier the replay ends the event, in units of ``us`` ns."""
    from paradiag.analysis.replay import replay

    ends = (g.end - replay(g, t)) // us
    return {(int(r), int(e) // us): int(m) for r, e, m in zip(g.rank, g.end, ends, strict=True)}


def test_a_send_that_ends_before_its_receive_begins_waited_for_the_receiver() -> None:
    """gloo's receive annotation begins when the receiver waits on it, after the batch that posted it: a send that
    waited for its receiver can end (31) before the receive's event begins (32). It waited for the receiver all the
    same: when the receiver's work before it takes 20 less, the send ends 20 earlier, and the sender's work after
    it too (the replay once kept such a send's measured length, the wait included, and the sender never moved).
    Most sends posted before their receive end after it began (the job's sends are not eager: the second pair);
    how long one takes alone is the job's send that found its receive there (the third pair: 1)."""
    us = 10_000  # times in units of 10 us: above the tolerance of a trace's rounding
    g, t = _timed_graph([
        (0, 3, "communication", "send", 5, 31, 1), (0, 1, "compute", "c", 31, 40, -1), (0, 3, "communication", "send", 41, 52, 1),
        (0, 3, "communication", "send", 60, 61, 1),
        (1, 1, "compute", "b", 0, 30, -1), (1, 3, "communication", "recv", 32, 34, 0), (1, 1, "compute", "d", 34, 44, -1),
        (1, 3, "communication", "recv", 45, 53, 0), (1, 3, "communication", "recv", 58, 62, 0),
    ], us, (61, 62))  # fmt: skip
    b = int(np.flatnonzero((g.rank == 1) & (g.end == 30 * us))[0])
    t.dur = t.dur.copy()
    t.dur[b] -= 20 * us
    moved = _moves(g, t, us)
    assert moved[(1, 34)] == 20  # the receive, posted 20 earlier
    assert (
        moved[(0, 31)] == 20 and moved[(0, 40)] == 20
    )  # the send ends with it, and the sender's work after it


def test_work_posted_after_an_asynchronous_send_does_not_wait_for_its_transfer() -> None:
    """A CPU rank's lane records an isend from its posting to its completion, which the schedule waits on at the
    end of the step (`gloo:send` 422-980 us), and goes on computing meanwhile (`c` from 425 us). Removing the host
    stall before it (rank 1 idle 10-400 us) moves that work by the whole stall: it never waited for the transfer,
    which waits for a receiver (rank 0 posts at 200 us) that the stall does not move. The replay once tied `c` to
    the send's end, and so to the receiver: the stall's replay saved 222 us of 390 (a zero-bubble pipeline's host
    stall came out as 0.06 ms of 40)."""
    us = 1_000
    g, t = _timed_graph([
        (0, 1, "compute", "a", 0, 200, -1), (0, 1, "communication", "recv", 200, 423, 1),
        (0, 1, "compute", "b", 423, 523, -1),
        (1, 1, "compute", "x", 0, 10, -1), (1, 1, "compute", "y", 400, 420, -1),
        (1, 1, "communication", "send", 422, 980, 0), (1, 1, "compute", "c", 425, 620, -1),
    ], us, (523, 980))  # fmt: skip
    y = int(np.flatnonzero((g.rank == 1) & (g.end == 420 * us))[0])
    t.own("gap")[y] = 0  # the stall removed: y starts once x has ended
    moved = _moves(g, t, us)
    assert moved[(1, 420)] == 390 and moved[(1, 620)] == 390  # y, and c after the send
    assert moved[(0, 423)] == 222 and moved[(0, 523)] == 222  # the receiver: its data from 222 earlier


def test_a_receive_waited_on_late_ended_where_its_host_came_to_it_not_where_its_data_came() -> None:
    """gloo records an irecv until its wait() returns. Rank 1 posts two receives (5, 6 us), waits on the second's
    data (sent at 421, after rank 0's stall 10-400), computes `c`, and only then waits on the first (ends 524),
    whose data was there since 8. Removing the stall moves `c` by 390, and `d` after the first receive too: it
    waited for its host, not for a transfer. The replay once held the first receive's 516 us after its data as
    a transfer and `d` did not move (a zero-bubble pipeline's host stall replayed as 0.06 ms of 40)."""
    us = 1_000
    g, t = _timed_graph([
        (0, 1, "compute", "x", 0, 10, -1), (0, 1, "communication", "send", 8, 990, 1),
        (0, 1, "compute", "y", 400, 420, -1), (0, 1, "communication", "send", 421, 990, 1),
        (0, 1, "compute", "z", 430, 500, -1),
        (1, 1, "communication", "recv", 5, 524, 0), (1, 1, "communication", "recv", 6, 422, 0),
        (1, 1, "compute", "c", 423, 523, -1), (1, 1, "compute", "d", 525, 625, -1),
    ], us, (990, 625), host_ranks=frozenset({0, 1}))  # fmt: skip
    y = int(np.flatnonzero((g.rank == 0) & (g.end == 420 * us))[0])
    t.own("gap")[y] = 0  # the stall removed
    moved = _moves(g, t, us)
    assert moved[(1, 523)] == 390 and moved[(1, 625)] == 390  # c, and d after the receive waited on late
    # The receive itself ends 1 us (the job's transfer when blocked on) after its data came, in the graph.
    assert (1, 9) in moved


def test_the_pairs_say_where_a_cpu_ranks_send_or_receive_waited_on_late_delivered_its_data() -> None:
    """What the replay times, the diagnosis' pairs carry for the views (``comm.DELIVERED``): the first receive of
    the test above, waited on at 524 us with its data there since 8, delivered at 9 (both there at 8, and the job's
    blocked transfer, 1 us); its send, waited on at the step's end (990) while rank 0 computed, at 9 too. The
    second pair: rank 1 blocked on it, delivered where it ended (422); its send, posted at 421 and held by rank 0's
    `z`, at 422. A GPU rank's pairs keep their measured ends; a batch's send and receive posted at once on one rank
    are told apart."""
    us = 1_000
    rows = [
        (0, 1, "compute", "x", 0, 10, -1), (0, 1, "communication", "send", 8, 990, 1),
        (0, 1, "compute", "y", 400, 420, -1), (0, 1, "communication", "send", 421, 990, 1),
        (0, 1, "compute", "z", 430, 500, -1),
        (1, 1, "communication", "recv", 5, 524, 0), (1, 1, "communication", "recv", 6, 422, 0),
        (1, 1, "compute", "c", 423, 523, -1), (1, 1, "compute", "d", 525, 625, -1),
    ]  # fmt: skip
    frame = _frame([(r, k, kind, n, a * us, b * us, p) for r, k, kind, n, a, b, p in rows])
    p2p = comm.p2p_transfers(frame)
    on_cpu = comm.with_deliveries(p2p, frame, frozenset({0, 1})).sort_by("send_start_ns").to_pydict()
    assert [v // us for v in on_cpu["send_done_ns"]] == [9, 422]
    assert [v // us for v in on_cpu["recv_done_ns"]] == [9, 422]
    on_gpu = comm.with_deliveries(p2p, frame, frozenset()).sort_by("send_start_ns").to_pydict()
    assert on_gpu["send_done_ns"] == on_gpu["send_end_ns"] and on_gpu["recv_done_ns"] == on_gpu["recv_end_ns"]
    # rank 1 posts a send to rank 0 as it posts the first receive (a batch): each side finds its own event
    both = _frame([*[(r, k, kind, n, a * us, b * us, p) for r, k, kind, n, a, b, p in rows],
                   (1, 1, "communication", "send", 5 * us, 7 * us, 0), (0, 1, "communication", "recv", 6 * us, 7 * us, 1)])  # fmt: skip
    pairs = comm.p2p_transfers(both)
    send, recv = comm.pair_rows(both, pairs)
    assert (both.collective[send] == both.code("collectives", "send")).all()
    assert (both.collective[recv] == both.code("collectives", "recv")).all()
    found = zip(both.rank[send].tolist(), (both.start[send] // us).tolist(), strict=True)
    assert sorted(found) == [(0, 8), (0, 421), (1, 5)]


def test_a_replay_whose_dependencies_run_in_a_circle_says_so_and_ends() -> None:
    """Events that wait for each other in a circle (traces whose events are not in the order their work ran) make
    a replay that would never settle: it raises ReplayError (an EditError: the finding keeps its own estimate,
    ``paradiag whatif`` says why) instead of running forever."""
    from paradiag.analysis.replay import ReplayError, Timing, replay

    g = _handed_on_graph()
    first, last = int(np.flatnonzero(g.end == 30)[0]), int(np.flatnonzero(g.end == 41)[0])
    g.pred[first] = last  # a waits for b, which waits (through the receive and the send) for a
    with pytest.raises(ReplayError, match="does not settle"):
        replay(g, Timing.of(g))
