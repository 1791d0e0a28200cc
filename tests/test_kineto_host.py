"""CPU ranks (gloo, no device activity): their threads become their device (parsers/kineto_host.py), on small
hand-made traces shaped as PyTorch 2.13 writes them (record_shapes, gloo annotations, c10d enqueues)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow.compute as pc

from paradiag.parsers import kineto

MAIN, RUNLOOP = 100, 200


def _op(
    name: str, ts: float, dur: float, tid: int = MAIN, cat: str = "cpu_op", args: dict[str, Any] | None = None
) -> dict[str, Any]:
    return {
        "ph": "X",
        "cat": cat,
        "name": name,
        "pid": 1,
        "tid": tid,
        "ts": ts,
        "dur": dur,
        "args": args or {},
    }


def _trace(rank: int, groups: list[dict[str, Any]], events: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "distributedInfo": {"backend": "gloo", "rank": rank, "world_size": 4, "pg_config": groups},
        "traceEvents": events,
    }


def _all_reduce(at: float, run_at: float, run_us: float, elements: int = 64) -> list[dict[str, Any]]:
    """An all-reduce enqueued on the main thread at ``at`` (``c10d::allreduce_``, 10 us) and run by gloo's
    runloop thread from ``run_at`` for ``run_us``."""
    return [
        _op(
            "c10d::allreduce_",
            at,
            10,
            args={
                "Concrete Inputs": ["", "", "", "", "False", "-1"],
                "Input type": ["TensorList"],
                "Input Dims": [[[elements]]],
            },
        ),
        _op(
            "gloo:all_reduce",
            run_at,
            run_us,
            tid=RUNLOOP,
            cat="user_annotation",
            args={"Input type": ["float"], "Input Dims": [[elements]]},
        ),
    ]


GROUPS = [
    {"pg_name": "0", "pg_desc": "default_pg", "ranks": [0, 1, 2, 3]},
    {"pg_name": "1", "pg_desc": "mesh_dp", "ranks": [1, 3]},
    {"pg_name": "3", "pg_desc": "mesh_pp", "ranks": [0, 1]},
]


def _rank1(tmp_path: Path) -> kineto.ParsedRank:
    """Rank 1 of a dp x pp mesh: a forward (aten::linear > aten::addmm), a blocking send to its pipeline peer
    (group-local index 0 = global rank 0), and an all-reduce on its dp group run by a runloop thread."""
    tensors: dict[str, Any] = {
        "Input type": ["TensorList", "", "Scalar", "Scalar"],
        "Input Dims": [[[32, 256]], [], [], []],
    }
    events = [
        _op("ProfilerStep#5", 0, 1000, cat="user_annotation"),
        _op("aten::linear", 10, 100),
        _op("aten::addmm", 20, 70),
        _op("c10d::send", 120, 10, args={"Concrete Inputs": ["", "", "0", "0"], **tensors}),
        _op(
            "gloo:send",
            128,
            50,
            cat="user_annotation",
            args={"Input type": ["float"], "Input Dims": [[32, 256]]},
        ),
        _op(
            "c10d::allreduce_",
            300,
            20,
            args={
                "Concrete Inputs": ["", "", "", "", "False", "-1"],
                "Input type": ["TensorList"],
                "Input Dims": [[[256, 256]]],
            },
        ),
        _op("aten::mul", 330, 40),
        _op(
            "gloo:all_reduce",
            325,
            400,
            tid=RUNLOOP,
            cat="user_annotation",
            args={"Input type": ["float"], "Input Dims": [[256, 256]]},
        ),
    ]
    path = tmp_path / "rank1.pt.trace.json"
    path.write_text(json.dumps(_trace(1, GROUPS, events)))
    return kineto.parse(path)


def test_cpu_ops_become_compute_lanes_counted_by_self_time(tmp_path: Path) -> None:
    parsed = _rank1(tmp_path)
    assert parsed.device_type == "cpu"
    ev = parsed.events
    lanes = ev.filter(pc.greater_equal(ev.column("device"), 0))
    compute = lanes.filter(pc.equal(lanes.column("kind").cast("string"), "compute")).to_pylist()
    by_name: dict[str, int] = {}
    for row in compute:
        by_name[row["name"]] = by_name.get(row["name"], 0) + row["dur_ns"]
    # aten::linear's 100 us hold aten::addmm's 70: 30 us of its own; the enqueue is no compute.
    assert by_name == {"aten::linear": 30_000, "aten::addmm": 70_000, "aten::mul": 40_000}
    assert all(row["step"] == 5 and row["track"] == MAIN for row in compute)
    # The host events themselves are all still there.
    assert ev.filter(pc.less(ev.column("device"), 0)).num_rows == 8


def test_an_operator_running_past_the_one_it_began_in_is_the_threads_next_call(tmp_path: Path) -> None:
    """A thread's calls nest; an operator that begins inside another and ends well after it (a writer that held a
    send over the next call) is the thread's next call, not one inside it: the send is taken to have ended where
    it began, and the call keeps its work and its own callee (was: counted inside the enqueue, no piece at all).
    An overrun of rounding (0.5 us) is still a nested call, cut at its caller's end."""
    tensors: dict[str, Any] = {"Concrete Inputs": ["", "", "0", "0"], "Input type": ["TensorList"]}
    events = [
        _op("ProfilerStep#5", 0, 1000, cat="user_annotation"),
        _op("c10d::send", 100, 200, args=tensors),
        _op("autograd::engine::evaluate_function: MmBackward0", 150, 300, args={"External id": 7}),
        _op("aten::mm", 151, 290, args={"External id": 8}),
        _op("aten::linear", 500, 100),
        _op("aten::addmm", 550, 50.5),
    ]
    path = tmp_path / "rank1.pt.trace.json"
    path.write_text(json.dumps(_trace(1, GROUPS, events)))
    ev = kineto.parse(path).events
    compute = ev.filter(pc.equal(ev.column("kind").cast("string"), "compute")).to_pylist()
    by_name: dict[str, int] = {}
    for row in compute:
        by_name[row["name"]] = by_name.get(row["name"], 0) + row["dur_ns"]
    assert by_name["aten::mm"] == 290_000 and by_name["aten::addmm"] == 50_000, by_name
    mm = next(r for r in compute if r["name"] == "aten::mm")
    assert mm["correlation"] == 7  # its caller: the autograd node, not the send


def test_gloo_annotations_are_communication_with_group_global_peer_and_bytes(tmp_path: Path) -> None:
    ev = _rank1(tmp_path).events
    comm = (
        ev.filter(pc.equal(ev.column("kind").cast("string"), "communication")).sort_by("start_ns").to_pylist()
    )
    assert [
        (c["name"], c["collective"], c["group"], c["group_ranks"], c["peer"], c["bytes"], c["step"], c["seq"])
        for c in comm
    ] == [
        (
            "gloo:send",
            "send",
            "3",
            "0,1",
            0,
            32 * 256 * 4,
            5,
            0,
        ),  # the pipeline group; its index 0 is global rank 0
        (
            "gloo:all_reduce",
            "all_reduce",
            "1",
            "1,3",
            None,
            256 * 256 * 4,
            5,
            0,
        ),  # the rank's named non-pipeline group
    ]
    assert comm[1]["track"] == RUNLOOP and comm[1]["dur_ns"] == 400_000


def test_a_send_that_blocks_in_its_enqueue_begins_when_the_host_asked_for_it(tmp_path: Path) -> None:
    """gloo records a synchronous send's gloo:send at the very end of its c10d::send (every send of the real jobs),
    and c10d::send blocks for ms on a busy host (3.8 ms for 12 KB): the send began when the host called it, not
    when the annotation did (it was read as a host idling 2.8 ms before each send: a late sender, in a clean job).
    A receive annotated when it is waited on, long after its enqueue returned, begins at its annotation."""
    dims = {"Input type": ["TensorList"], "Input Dims": [[[64]]]}
    gloo = {"Input type": ["float"], "Input Dims": [[64]]}
    peer = {"Concrete Inputs": ["", "", "1", "0"], **dims}
    events = [
        _op("ProfilerStep#1", 0, 20000, cat="user_annotation"),
        _op("aten::mm", 10, 300),
        _op("c10d::send", 320, 3800, args=peer),
        _op("gloo:send", 4112, 900, cat="user_annotation", args=gloo),
        _op("c10d::recv_", 5100, 30, args=peer),
        _op("aten::mm", 5200, 300),
        _op("gloo:recv", 6000, 400, cat="user_annotation", args=gloo),
    ]
    path = tmp_path / "rank0.pt.trace.json"
    path.write_text(json.dumps(_trace(0, GROUPS[:1], events)))
    ev = kineto.parse(path).events
    comm = ev.filter(pc.equal(ev.column("kind").cast("string"), "communication")).sort_by("start_ns")
    assert [(c["collective"], c["start_ns"], c["start_ns"] + c["dur_ns"]) for c in comm.to_pylist()] == [
        ("send", 320_000, 5_012_000),
        ("recv", 6_000_000, 6_400_000),
    ]


def test_a_send_re_entered_under_a_dispatch_mode_is_one_send(tmp_path: Path) -> None:
    """A dispatch mode re-enters the operator it handles: ``c10d::send`` > ``PythonDispatchMode`` > ``c10d::send``
    is one send, which gloo annotates once. Linked first in, first out, the inner enqueue took the next send's
    annotation, whose send then began when its annotation did (0.3-0.6 ms of blocked send read as a host idling
    before it: a late sender, over a slowed stage)."""
    peer = {"Concrete Inputs": ["", "", "1", "0"], "Input type": ["TensorList"], "Input Dims": [[[64]]]}
    gloo = {"Input type": ["float"], "Input Dims": [[64]]}
    events = [_op("ProfilerStep#1", 0, 20000, cat="user_annotation")]
    for at in (100, 1500):
        events += [
            _op("c10d::send", at, 300, args=peer),
            _op("PythonDispatchMode", at + 1, 298),
            _op("c10d::send", at + 10, 280, args=peer),
            _op("gloo:send", at + 280, 500, cat="user_annotation", args=gloo),
        ]
    path = tmp_path / "rank0.pt.trace.json"
    path.write_text(json.dumps(_trace(0, GROUPS[:1], events)))
    ev = kineto.parse(path).events
    comm = ev.filter(pc.equal(ev.column("kind").cast("string"), "communication")).sort_by("start_ns")
    assert [(c["collective"], c["start_ns"]) for c in comm.to_pylist()] == [
        ("send", 100_000),
        ("send", 1_500_000),
    ]


def test_a_collective_takes_the_step_of_its_enqueue(tmp_path: Path) -> None:
    """An asynchronous all-reduce enqueued at the end of a step runs into the next one: it is the first step's."""
    events = [
        _op("ProfilerStep#1", 0, 500, cat="user_annotation"),
        _op("ProfilerStep#2", 500, 500, cat="user_annotation"),
        _op("aten::mm", 10, 400),
        _op("c10d::allreduce_", 480, 10, args={"Input type": ["TensorList"], "Input Dims": [[[1024]]]}),
        _op(
            "gloo:all_reduce",
            505,
            100,
            tid=RUNLOOP,
            cat="user_annotation",
            args={"Input type": ["float"], "Input Dims": [[1024]]},
        ),
        _op("aten::mm", 520, 300),
    ]
    path = tmp_path / "rank0.pt.trace.json"
    path.write_text(json.dumps(_trace(0, GROUPS[:1], events)))
    ev = kineto.parse(path).events
    comm = ev.filter(pc.equal(ev.column("kind").cast("string"), "communication")).to_pylist()
    assert [(c["step"], c["group"], c["bytes"]) for c in comm] == [(1, "0", 4096)]


def test_a_trace_with_device_activity_gets_no_host_lanes(tmp_path: Path) -> None:
    from tests.helpers import kineto_trace

    path = tmp_path / "rank0.pt.trace.json"
    path.write_text(json.dumps(kineto_trace(0)))
    parsed = kineto.parse(path)
    assert parsed.device_type == "gpu"
    lanes = parsed.events.filter(pc.greater_equal(parsed.events.column("device"), 0))
    assert set(lanes.column("category").cast("string").to_pylist()) == {"kernel"}


def _compute_by_name(ev: Any, kind: str = "compute") -> dict[str, int]:
    lanes = ev.filter(pc.greater_equal(ev.column("device"), 0))
    out: dict[str, int] = {}
    for row in lanes.filter(pc.equal(lanes.column("kind").cast("string"), kind)).to_pylist():
        out[row["name"]] = out.get(row["name"], 0) + row["dur_ns"]
    return out


def test_an_isend_lasting_on_the_thread_keeps_the_compute_that_runs_meanwhile(tmp_path: Path) -> None:
    """isend's gloo:send lasts on the calling thread until the transfer completes while the thread computes on; a
    synchronous transfer inside an operator is that operator waiting, and functional collectives' waits are no
    compute either."""
    events = [
        _op("ProfilerStep#1", 0, 2000, cat="user_annotation"),
        _op(
            "c10d::send",
            10,
            10,
            args={
                "Concrete Inputs": ["", "", "1", "0"],
                "Input type": ["TensorList"],
                "Input Dims": [[[64]]],
            },
        ),
        _op(
            "gloo:send", 18, 500, cat="user_annotation", args={"Input type": ["float"], "Input Dims": [[64]]}
        ),
        _op("aten::mm", 40, 300),  # the next micro-batch, while the send is in flight
        _op("Wrapper", 600, 300),  # an operator that waits for a blocking transfer inside it
        _op(
            "gloo:recv", 650, 200, cat="user_annotation", args={"Input type": ["float"], "Input Dims": [[64]]}
        ),
        _op("_c10d_functional::wait_tensor", 1000, 400),
        _op("aten::add", 1500, 100),
    ]
    path = tmp_path / "rank0.pt.trace.json"
    path.write_text(json.dumps(_trace(0, GROUPS[:1], events)))
    assert _compute_by_name(kineto.parse(path).events) == {
        "aten::mm": 300_000,
        "Wrapper": 100_000,
        "aten::add": 100_000,
    }


def test_the_operators_gloo_runs_inside_a_collective_are_the_collectives(tmp_path: Path) -> None:
    """gloo's runloop thread copies an all-gather's result into its output tensors (FSDP1's flat parameter) before
    the collective's annotation ends: that is the collective's work, not the rank's compute or memory (kept, the
    replay made it work of its own, released by the rank's work before the collective, and a stall removed from a
    peer left the next collective behind it in place). The same copy on the main thread is the rank's."""
    events = [
        _op("ProfilerStep#1", 0, 2000, cat="user_annotation"),
        *_all_reduce(10, 20, 500),
        _op("aten::select", 480, 5, tid=RUNLOOP),  # inside the collective's annotation, on its thread
        _op("aten::copy_", 486, 30, tid=RUNLOOP),
        _op("aten::copy_", 600, 40),  # the rank's own, on its main thread
        _op("aten::mm", 700, 200),
    ]
    path = tmp_path / "rank0.pt.trace.json"
    path.write_text(json.dumps(_trace(0, GROUPS[:1], events)))
    ev = kineto.parse(path).events
    assert _compute_by_name(ev) == {"aten::mm": 200_000}
    assert _compute_by_name(ev, "memory") == {"aten::copy_": 40_000}


def test_a_wrapper_waiting_for_in_flight_gloo_work_is_not_computing(tmp_path: Path) -> None:
    """FSDP2's post-backward: RegisterPostBackwardFunctionBackward (a wrapper, no dispatcher operator) enqueues a
    reduce-scatter and blocks in Work.wait() until the runloop thread's gloo:all_reduce is done, and a little after
    (the thread wakes when the scheduler runs it). Its self time from the enqueue on is waiting; an aten::mm that
    runs while DDP-style work is in flight is compute all the same."""
    events = [
        _op("ProfilerStep#1", 0, 3000, cat="user_annotation"),
        _op("RegisterPostBackwardFunctionBackward", 10, 1000, args={"External id": 1}),
        _op("aten::mm", 20, 100, args={"External id": 2}),
        _op(
            "c10d::_reduce_scatter_base_",
            130,
            20,
            args={
                "Concrete Inputs": ["", "", "", "False", "-1"],
                "Input type": ["float"],
                "Input Dims": [[64]],
            },
        ),
        _op(
            "gloo:all_reduce",
            150,
            800,
            tid=RUNLOOP,
            cat="user_annotation",
            args={"Input type": ["float"], "Input Dims": [[64]]},
        ),
        _op("aten::copy_", 1000, 5, args={"External id": 3}),
        *_all_reduce(1100, 1115, 600),
        _op("aten::mm", 1200, 300, args={"External id": 4}),  # compute while the all-reduce is in flight
    ]
    path = tmp_path / "rank0.pt.trace.json"
    path.write_text(json.dumps(_trace(0, GROUPS[:1], events)))
    events_out = kineto.parse(path).events
    by_name = _compute_by_name(events_out)
    # The wrapper's own time before the reduce-scatter (10-20 and 120-130 us) is its glue; from 150 us until the
    # copy_ it wakes to at 1000 (50 us after the all-reduce ended) it waits; after the copy_ (1005-1010) glue again.
    assert by_name == {"RegisterPostBackwardFunctionBackward": 25_000, "aten::mm": 400_000}
    # The copy_ only moves memory: memory work on the host lane, as a GPU's memcpy is.
    assert _compute_by_name(events_out, "memory") == {"aten::copy_": 5_000}


def test_a_dispatch_mode_inside_an_operator_is_that_operators_work_while_gloo_is_in_flight(
    tmp_path: Path,
) -> None:
    """A tensor subclass or dispatch mode runs an operator's call in Python: ``aten::mm`` holds a
    ``PythonDispatchMode`` (or DTensor's ``PythonSubclass``) that holds the inner ``aten::mm``, and the mode's own
    time (a slower device emulated, sharding propagation) is the outer call's work. While a pipeline's isend is in
    flight, a wrapper's own time is otherwise taken for a blocked wait: inside a dispatcher operator it is not."""
    events = [
        _op("ProfilerStep#1", 0, 2000, cat="user_annotation"),
        _op(
            "c10d::send",
            10,
            10,
            args={
                "Concrete Inputs": ["", "", "1", "0"],
                "Input type": ["TensorList"],
                "Input Dims": [[[64]]],
            },
        ),
        _op(
            "gloo:send", 18, 1500, cat="user_annotation", args={"Input type": ["float"], "Input Dims": [[64]]}
        ),
        _op("aten::mm", 100, 700, args={"External id": 1}),  # in flight throughout
        _op("PythonDispatchMode", 110, 680, args={"External id": 2}),
        _op("aten::mm", 120, 200, args={"External id": 3}),  # then the mode keeps the core busy 470 us more
        _op(
            "Wrapper", 900, 300, args={"External id": 4}
        ),  # a wrapper outside any operator: waiting, as before
        # DTensor's loss: its subclass enqueues an all-reduce and blocks until it is done (no event for the wait).
        _op("aten::mse_loss", 1600, 1000, args={"External id": 5}),
        _op("PythonSubclass", 1610, 980, args={"External id": 6}),
        _op("aten::mse_loss", 1620, 80, args={"External id": 7}),
        *_all_reduce(1710, 1725, 800, elements=1),
    ]
    path = tmp_path / "rank0.pt.trace.json"
    path.write_text(json.dumps(_trace(0, GROUPS[:1], events)))
    by_name = _compute_by_name(kineto.parse(path).events)
    # The loss: its inner call (80 us), the outer call's own 10 + 10 us and the subclass's own 10 + 10 us before
    # the enqueue; from the enqueue on the call waits for its all-reduce, and the subclass's time is no compute.
    assert by_name == {"aten::mm": 700_000, "aten::mse_loss": 120_000}


def test_a_compute_slice_names_its_callers_external_id(tmp_path: Path) -> None:
    """The caller of each piece is the operator it runs inside, by External id (its correlation)."""
    events = [
        _op("ProfilerStep#1", 0, 1000, cat="user_annotation"),
        _op("MmBackward0", 10, 200, args={"External id": 7}),
        _op("aten::mm", 20, 100, args={"External id": 8}),
        _op("aten::mm", 300, 100, args={"External id": 9}),
    ]
    path = tmp_path / "rank0.pt.trace.json"
    path.write_text(json.dumps(_trace(0, GROUPS[:1], events)))
    ev = kineto.parse(path).events
    lanes = ev.filter(pc.greater_equal(ev.column("device"), 0)).sort_by("start_ns").to_pylist()
    assert [(r["name"], r["external_id"], r["correlation"]) for r in lanes] == [
        ("MmBackward0", 7, -1),
        ("aten::mm", 8, 7),
        ("MmBackward0", 7, -1),
        ("aten::mm", 9, -1),
    ]
