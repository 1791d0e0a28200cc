"""CPU ranks' compute as the work they do (analysis.operators.typical_durations) and the direction of their
pipeline passes (analysis.stages.inside_backward), on small hand-made host-lane traces (PyTorch 2.13 CPU shapes:
autograd's backward runs aten::mm inside its backward nodes on the main thread)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from paradiag.analysis import stages
from paradiag.analysis.frame import device_frame
from paradiag.analysis.operators import typical_durations
from paradiag.parsers import kineto

GROUPS = [{"pg_name": "0", "pg_desc": "default_pg", "ranks": [0, 1]}]


def _op(
    name: str, ts: float, dur: float, cat: str = "cpu_op", args: dict[str, Any] | None = None
) -> dict[str, Any]:
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": 7, "ts": ts, "dur": dur, "args": args or {}}


def _events(tmp_path: Path, events: list[dict[str, Any]]) -> pa.Table:
    path = tmp_path / "rank0.pt.trace.json"
    path.write_text(
        json.dumps(
            {
                "distributedInfo": {"backend": "gloo", "rank": 0, "world_size": 2, "pg_config": GROUPS},
                "traceEvents": events,
            }
        )
    )
    return kineto.parse(path).events


def test_a_preempted_call_counts_as_long_as_its_operator_typically_takes(tmp_path: Path) -> None:
    """Four calls of aten::mm of 100 us, one of them stretched to 900 us by the scheduler, and aten::linear's own
    time split in two pieces around its child: each call counts its operator's typical self time, a call's pieces
    share it."""
    events = [_op("ProfilerStep#1", 0, 10_000, cat="user_annotation")]
    t = 10
    for i, dur in enumerate((100, 100, 900, 100)):
        events += [
            _op("aten::linear", t, dur + 20, args={"External id": 10 + i}),
            _op("aten::mm", t + 10, dur, args={"External id": 20 + i}),
        ]
        t += dur + 100
    frame = device_frame(_events(tmp_path, events))
    typical = typical_durations(frame)
    mm = frame.name == frame.names.index("aten::mm")
    linear = frame.name == frame.names.index("aten::linear")
    assert (frame.end - frame.start)[mm].sum() == 1_200_000
    assert np.allclose(typical[mm], 100_000)
    assert mm.sum() == 4 and linear.sum() == 8  # two self-time pieces per aten::linear call
    assert np.isclose(typical[linear].sum(), 4 * 20_000)


def test_operators_inside_backward_nodes_are_backward_work(tmp_path: Path) -> None:
    """A last pipeline stage: recv, forward (aten::addmm), backward (aten::mm inside MmBackward0), send; twice.
    aten::mm's own name says nothing about its direction: the node it runs in does. The data preparation before
    the first receive is no micro-batch."""
    recv = {"Concrete Inputs": ["", "", "1", "0"], "Input type": ["TensorList"], "Input Dims": [[[64]]]}
    gloo = {"Input type": ["float"], "Input Dims": [[64]]}
    events = [_op("ProfilerStep#1", 0, 10_000, cat="user_annotation"), _op("aten::randn", 5, 20)]
    t = 100
    for _ in range(2):
        events += [
            _op("c10d::recv_", t, 10, args=recv),
            _op("gloo:recv", t + 5, 50, cat="user_annotation", args=gloo),
            _op("aten::addmm", t + 100, 300),
            _op("autograd::engine::evaluate_function: MmBackward0", t + 500, 620),
            _op("MmBackward0", t + 505, 610),
            _op("aten::mm", t + 510, 300),
            _op("aten::mm", t + 810, 300),
            _op("c10d::send", t + 1200, 10, args=recv),
            _op("gloo:send", t + 1205, 50, cat="user_annotation", args=gloo),
        ]
        t += 2000
    events_table = _events(tmp_path, events)
    frame = device_frame(events_table)
    back = stages.inside_backward(frame, events_table)
    names = np.array(frame.names)[frame.name]
    compute = frame.kind == frame.code("kinds", "compute")
    assert set(names[back & compute]) == {
        "aten::mm",
        "MmBackward0",
        "autograd::engine::evaluate_function: MmBackward0",
    }
    assert not back[compute & (names == "aten::addmm")].any()
    passes = stages.rank_pass_table(frame, events_table).to_pylist()
    assert [p["direction"] for p in passes] == ["forward", "backward", "forward", "backward"]
    assert [p["compute_ns"] for p in passes if p["direction"] == "backward"] == [620_000, 620_000]


def test_a_zero_bubble_stages_deferred_weight_gradients_leave_its_input_gradient_passes_whole(
    tmp_path: Path,
) -> None:
    """A middle stage of a zero-bubble schedule (ScheduleInterleavedZeroBubble, ScheduleZBVZeroBubble): per
    micro-batch a forward and an input-gradient pass between sends, and the weight-gradient passes deferred to the
    step's end, back to back with no send between them: one "pass" of 4x the others. The input-gradient passes are
    whole micro-batches' work, not minor work beside that lump; the data preparation is."""
    p2p = {"Concrete Inputs": ["", "", "1", "0"], "Input type": ["TensorList"], "Input Dims": [[[64]]]}
    gloo = {"Input type": ["float"], "Input Dims": [[64]]}

    def transfer(kind: str, t: float) -> list[dict[str, Any]]:
        op = "c10d::recv_" if kind == "recv" else "c10d::send"
        return [_op(op, t, 10, args=p2p), _op(f"gloo:{kind}", t + 5, 50, cat="user_annotation", args=gloo)]

    def gradient(t: float) -> list[dict[str, Any]]:
        return [
            _op("autograd::engine::evaluate_function: MmBackward0", t, 320),
            _op("MmBackward0", t + 5, 310),
            _op("aten::mm", t + 10, 300),
        ]

    events = [_op("ProfilerStep#1", 0, 40_000, cat="user_annotation"), _op("aten::randn", 5, 20)]
    t = 100
    for _ in range(4):
        events += [*transfer("recv", t), _op("aten::addmm", t + 100, 300), *transfer("send", t + 450)]
        events += [*transfer("recv", t + 600), *gradient(t + 700), *transfer("send", t + 1100)]
        t += 1400
    for _ in range(4):  # the deferred weight gradients
        events += gradient(t)
        t += 400
    events_table = _events(tmp_path, events)
    frame = device_frame(events_table)
    passes = stages.rank_pass_table(frame, events_table).to_pylist()
    backward = [p["compute_ns"] for p in passes if p["direction"] == "backward"]
    assert backward == [320_000] * 4 + [4 * 320_000]
    assert [p["compute_ns"] for p in passes if p["direction"] == "forward"] == [300_000] * 4  # no randn


def test_a_schedule_that_names_its_actions_has_a_pass_per_action_numbered_as_named(tmp_path: Path) -> None:
    """Rank 0 of a V-shaped zero-bubble schedule (ScheduleZBVZeroBubble, pp2: stages 0 and 3) names every action
    `PP:{stage}{F|I|W}{micro-batch}`. Its last stage's forward runs straight into the loss and its input and weight
    gradients with no send between them, and its two chunks alternate in no order a count of passes can tell. Each
    named action is a pass of its direction, numbered by its stage's place among the rank's (chunk) and its
    micro-batch; the optimizer, in no action, is in no pass."""
    p2p = {"Concrete Inputs": ["", "", "1", "0"], "Input type": ["TensorList"], "Input Dims": [[[64]]]}
    gloo = {"Input type": ["float"], "Input Dims": [[64]]}

    def action(name: str, t: float, backward: bool) -> list[dict[str, Any]]:
        work = (
            [
                _op("autograd::engine::evaluate_function: MmBackward0", t + 5, 210),
                _op("aten::mm", t + 10, 200),
            ]
            if backward
            else [_op("aten::addmm", t + 5, 200)]
        )
        return [_op(f"PP:{name}", t, 230, cat="user_annotation"), *work]

    order = ["0F0", "0F1", "3F0", "3I0", "3W0", "3F1", "3I1", "3W1", "0W0", "0W1"]
    events = [_op("ProfilerStep#1", 0, 10_000, cat="user_annotation")]
    t = 100
    for name in order:
        events += action(name, t, name[1] != "F")
        if name in ("0F1", "3I1"):  # to the next rank, and back from it
            events += [
                _op("c10d::send", t + 240, 10, args=p2p),
                _op("gloo:send", t + 245, 20, cat="user_annotation", args=gloo),
            ]
        t += 300
    events.append(_op("aten::add_", t + 100, 50))  # the optimizer
    events_table = _events(tmp_path, events)
    frame = device_frame(events_table)
    table = stages.rank_pass_table(frame, events_table)
    passes = table.to_pylist()
    assert [(p["action_stage"], p["action_micro_batch"]) for p in passes] == [
        (int(n[0]), int(n[2])) for n in order
    ]
    assert [p["direction"] for p in passes] == ["backward" if n[1] != "F" else "forward" for n in order]
    assert [p["compute_ns"] for p in passes] == [200_000 if n[1] == "F" else 210_000 for n in order]
    numbered = stages.number_passes(table.append_column("rank", pa.array([0] * table.num_rows)), {0: 0}, 2, 2)
    assert [
        (c, m)
        for c, m in zip(
            numbered.column("chunk").to_pylist(), numbered.column("micro_batch").to_pylist(), strict=True
        )
    ] == [(0 if n[0] == "0" else 1, int(n[2])) for n in order]


def test_an_overlapped_action_is_a_pass_per_sub_action_split_where_its_backward_begins(
    tmp_path: Path,
) -> None:
    """DualPipeV (ScheduleDualPipeV) runs a forward of one stage and a backward of the other as one action,
    `PP:(0F2;3B0)OVERLAP_F_B`, its sub-actions one after the other with nothing marking where the backward begins.
    Each sub-action is a pass: the forward's work up to the first operator inside a backward node, the backward's
    from there on (its own autograd nodes' ATen calls, forward-named, included)."""

    def forward(t: float) -> list[dict[str, Any]]:
        return [_op("aten::addmm", t, 200), _op("aten::gelu", t + 210, 30)]

    def backward(t: float) -> list[dict[str, Any]]:
        return [
            _op("autograd::engine::evaluate_function: MmBackward0", t, 210),
            _op("aten::mm", t + 10, 200),
            _op("autograd::engine::evaluate_function: GeluBackward0", t + 220, 40),
            _op("aten::gelu_backward", t + 225, 30),
        ]

    events = [_op("ProfilerStep#1", 0, 10_000, cat="user_annotation")]
    events += [_op("PP:0F0", 100, 250, cat="user_annotation"), *forward(105)]
    events += [_op("PP:(0F1;3B0)OVERLAP_F_B", 400, 600, cat="user_annotation"), *forward(405), *backward(700)]
    events += [
        _op("PP:(3F1;0B0)OVERLAP_F_B", 1100, 600, cat="user_annotation"),
        *forward(1105),
        *backward(1400),
    ]
    events += [_op("PP:3B1", 1800, 300, cat="user_annotation"), *backward(1805)]
    events_table = _events(tmp_path, events)
    actions = stages.annotated_actions(events_table)
    assert actions is not None
    assert actions.group.tolist() == [0, 1, 1, 2, 2, 3]  # the overlapped actions' sub-actions share a group
    assert stages.annotated_schedule(actions) == (2, 2)
    passes = stages.rank_pass_table(device_frame(events_table), events_table).to_pylist()
    assert [(p["direction"][0], p["action_stage"], p["action_micro_batch"]) for p in passes] == [
        ("f", 0, 0),
        ("f", 0, 1),
        ("b", 3, 0),
        ("f", 3, 1),
        ("b", 0, 0),
        ("b", 3, 1),
    ]
    # a forward's work is its addmm and gelu; a backward's its nodes' own time, mm and gelu_backward
    assert [p["compute_ns"] for p in passes] == [230_000, 230_000, 250_000, 230_000, 250_000, 250_000]
    assert [(p["start_ns"], p["end_ns"]) for p in passes][1:3] == [(405_000, 645_000), (700_000, 960_000)]


def test_calls_of_one_operator_under_different_callers_keep_their_own_typical_durations(
    tmp_path: Path,
) -> None:
    """A dispatch mode re-enters every aten::mm: the outer call (under MmBackward0) is 10 us of glue, the inner one
    (under PythonDispatchMode) the 500 us of work, and one inner call is preempted. Typical durations per operator
    alone would give every call the glue's 10 us (the 25th percentile of all eight); per caller, the work counts."""
    events = [_op("ProfilerStep#1", 0, 100_000, cat="user_annotation")]
    t, ext = 10, 100
    for dur in (500, 500, 2000, 500):
        events += [
            _op("MmBackward0", t, dur + 40, args={"External id": ext}),
            _op("aten::mm", t + 5, dur + 30, args={"External id": ext + 1}),
            _op("PythonDispatchMode", t + 10, dur + 20, args={"External id": ext + 2}),
            _op("aten::mm", t + 20, dur, args={"External id": ext + 3}),
        ]
        t, ext = t + dur + 100, ext + 4
    frame = device_frame(_events(tmp_path, events))
    typical = typical_durations(frame)
    mm = frame.name == frame.names.index("aten::mm")
    assert len(set(frame.work[mm].tolist())) == 2  # two kinds of aten::mm call: by caller
    # 4 inner calls at 500 us + 4 outer calls' own 30 us: 5 us before and after the dispatch mode, and the mode's
    # own 10 + 10 us, which run inside the outer call and are its work (kineto_host._self_time)
    assert np.isclose(typical[mm].sum(), 4 * 500_000 + 4 * 30_000)


def test_the_chunks_and_micro_batches_a_pipelining_schedule_names(tmp_path: Path) -> None:
    """torch.distributed.pipelining's multi-stage schedules annotate every action "PP:{stage}{action}{mb}": rank
    0 of a V schedule over 4 ranks holds stages 0 and 7; single-stage schedules and other names say nothing."""
    events = [_op("ProfilerStep#1", 0, 10_000, cat="user_annotation")]
    t = 10
    for stage in (0, 7):
        for mb in range(3):
            for action in ("F", "I", "W", "SEND_F", "RECV_B"):
                events.append(_op(f"PP:{stage}{action}{mb}", t, 5, cat="user_annotation"))
                t += 10
    assert stages.annotated_schedule(stages.annotated_actions(_events(tmp_path, events))) == (2, 3)
    one = [e for e in events if not e["name"].startswith("PP:7")] + [
        _op("Forward 0", 900, 5, cat="user_annotation")
    ]
    assert stages.annotated_schedule(stages.annotated_actions(_events(tmp_path, one))) is None
    # rows of the other chunk filtered out: their names may stay in the column's dictionary, and do not count
    both = _events(tmp_path, events)
    first = both.filter(pc.invert(pc.starts_with(pc.cast(both.column("name"), pa.string()), "PP:7")))
    assert stages.annotated_schedule(stages.annotated_actions(first)) is None
