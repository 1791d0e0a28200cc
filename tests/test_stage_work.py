"""A pipeline stage's work counted in calls at job-wide prices (analysis.stages.stage_work) and the stage rule of
CPU jobs that reads it (issue 22): more layers are more calls of the same operators, which no busier core, page
fault or hot operator makes; a stage's own operators (the loss) are no layer work."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from paradiag.analysis import findings, stages
from paradiag.analysis.frame import concat, device_frame
from paradiag.parsers import kineto

MS = 1_000_000
STAGES = [[0], [1], [2], [3]]


def _rank_events(
    tmp_path: Path, rank: int, layers: int, mm_us: float, own: list[str], reentered: bool = False
) -> pa.Table:
    """One step of a CPU stage: per layer aten::linear > aten::mm (``mm_us`` each) and aten::gelu (50 us), then
    the stage's own operators (``own``, 200 us each); ``reentered``: each aten::mm calls aten::mm again inside
    it, as under a dispatch mode (the real jobs' slowdown, a FLOP counter)."""
    events: list[dict[str, Any]] = [
        {
            "ph": "X",
            "cat": "user_annotation",
            "name": "ProfilerStep#1",
            "pid": 1,
            "tid": 7,
            "ts": 0,
            "dur": 90_000,
        }
    ]
    t, ext = 10.0, 1
    calls = [("aten::linear", "aten::mm", mm_us)] * (2 * layers) + [("aten::gelu", None, 50.0)] * layers
    calls += [(name, None, 200.0) for name in own]
    for outer, inner, dur in calls:
        events.append({"ph": "X", "cat": "cpu_op", "name": outer, "pid": 1, "tid": 7, "ts": t, "dur": dur + 20, "args": {"External id": ext}})  # fmt: skip
        if inner:
            events.append({"ph": "X", "cat": "cpu_op", "name": inner, "pid": 1, "tid": 7, "ts": t + 10, "dur": dur, "args": {"External id": ext + 1}})  # fmt: skip
        if inner and reentered:
            events.append({"ph": "X", "cat": "cpu_op", "name": inner, "pid": 1, "tid": 7, "ts": t + 15, "dur": dur - 10, "args": {"External id": ext + 2}})  # fmt: skip
        t, ext = t + dur + 40, ext + 3
    groups = [{"pg_name": "0", "pg_desc": "default_pg", "ranks": [0, 1, 2, 3]}]
    path = tmp_path / f"rank{rank}.pt.trace.json"
    info = {"backend": "gloo", "rank": rank, "world_size": 4, "pg_config": groups}
    path.write_text(json.dumps({"distributedInfo": info, "traceEvents": events}))
    table = kineto.parse(path).events  # the rank is set at ingest, from the job's files
    return table.set_column(
        table.schema.get_field_index("rank"),
        "rank",
        pa.array([rank] * len(table), table.schema.field("rank").type),
    )


def _work(tmp_path: Path, layers: list[int], mm_us: list[float]) -> list[float]:
    tables = [
        _rank_events(tmp_path, r, layers[r], mm_us[r], ["aten::mse_loss"] * 3 if r == 3 else [], r == 1)
        for r in range(4)
    ]
    frame = concat(
        [device_frame(t) for t in tables]
    )  # one frame a rank, as a job's (External ids are per rank)
    return stages.stage_work(frame, STAGES, frozenset(range(4)))


def test_a_stage_of_more_layers_does_more_work_a_slower_operator_none(tmp_path: Path) -> None:
    # stage 2 holds 3 layers, the others 2; stage 0's aten::mm takes 4x as long (glibc's page faults on a large
    # output), stage 1's aten::mm re-enters itself under a dispatch mode, stage 3 runs the loss as well
    work = _work(tmp_path, [2, 2, 3, 2], [400, 100, 100, 100])
    assert work[2] == pytest.approx(1.5 * work[1])
    assert work[0] == pytest.approx(work[1]) and work[3] == pytest.approx(work[1])


def test_a_stage_s_extra_calls_of_its_layers_operators_from_the_top_are_its_work(tmp_path: Path) -> None:
    # stage 1 also runs 4 matmuls of its own from the top (a forward hook's, beside its layers' aten::linear >
    # aten::mm), stage 3 its loss: the hook's matmuls are more of the work every stage does, the loss is not
    own = {1: ["aten::mm"] * 4, 3: ["aten::mse_loss"] * 3}
    tables = [_rank_events(tmp_path, r, 2, 100, own.get(r, [])) for r in range(4)]
    work = stages.stage_work(concat([device_frame(t) for t in tables]), STAGES, frozenset(range(4)))
    assert work[0] == pytest.approx(work[2]) and work[3] == pytest.approx(work[2])
    # the hook's 4 calls of 220 us (the events' own time) besides the layers' work
    assert work[1] == pytest.approx(work[2] + 4 * 220_000)


def _metrics(per_micro_batch_ms: list[float]) -> dict[str, Any]:
    rows = [
        {"stage": s, "ranks": [s], "compute_per_micro_batch_ns": int(v * MS), "bubble_ratio": 0.3}
        for s, v in enumerate(per_micro_batch_ms)
    ]
    return stages._stage_summary(rows, micro_batches=8, virtual=1, step_time_ns=100 * MS, compute_scale=2.0)


def test_a_heavy_first_stage_hidden_in_time_is_found_by_its_work_and_noise_is_not() -> None:
    # stage 0 holds 1.5x the layers, but does no input gradient: its time is 1.12x the others' (under both time
    # rules of CPU ranks); its work says what it holds
    heavy_first = _metrics([2.24, 2.0, 2.0, 2.0])
    assert findings.stage_findings(heavy_first, on_host=True) == []
    (f,) = findings.stage_findings(heavy_first, on_host=True, work=[1.45, 1.0, 1.0, 1.01])
    assert (f.kind, f.culprit.stage) == ("stage_imbalance", 0)
    # a rank 1.3x slower in time at the same calls (a hot operator, a busier core): the time rule alone decides
    slow_op = _metrics([2.6, 2.0, 2.0, 2.0])
    assert findings.stage_findings(slow_op, on_host=True, work=[1.0, 1.0, 1.0, 1.0]) != []
    # a stage of more calls that runs no slower is the split's all the same: a host's busiest rank takes more of
    # its shared cores (real V and interleaved jobs: rank 0 with 1.22x the work at 1.0-1.07x the time); it costs,
    # at the others' pace, its extra work in every slot of the pipeline (11 slots x 2.06 ms x 0.21 x 2.0)
    (f,) = findings.stage_findings(heavy_first, on_host=True, work=[1.0, 1.0, 1.3, 1.0], compute_scale=2.0)
    assert (f.culprit.stage, round(f.impact_pct, 1)) == (2, 9.5)
    assert f.evidence.startswith("stage 2 does 1.30x the work") and findings.counted(f)
    # work within the stages' own spread (a clean pipeline's last stage: 1.13x the others' calls): time decides
    assert findings.stage_findings(heavy_first, on_host=True, work=[1.0, 1.0, 1.13, 1.0]) == []


def _lone_rows(per_micro_batch_ms: list[float]) -> list[dict[str, Any]]:
    """Stages of one rank each, computing ``per_micro_batch_ms``."""
    return [
        {"stage": s, "ranks": [s], "compute_per_micro_batch_ns": int(v * MS), "bubble_ratio": 0.5}
        for s, v in enumerate(per_micro_batch_ms)
    ]


def _replica_metrics(per_micro_batch_ms: list[float], replicas: int) -> dict[str, Any]:
    rows = [
        {
            "stage": s,
            "ranks": [s + len(per_micro_batch_ms) * d for d in range(replicas)],
            "compute_per_micro_batch_ns": int(v * MS),
            "bubble_ratio": 0.3,
        }
        for s, v in enumerate(per_micro_batch_ms)
    ]
    return stages._stage_summary(rows, micro_batches=8, virtual=1, step_time_ns=50 * MS, compute_scale=1.0)


def test_a_stage_heavier_in_time_only_is_one_slow_rank_standing_apart_or_the_hosts_cores() -> None:
    """A real clean pp4 isend job on 2 cores: stages 1 and 2 took 1.47 and 1.53 ms a micro-batch, stages 0 and 3
    1.12 and 1.08, at the same work (stage 0: no input gradient); a real clean dp4 x pp2 job: the last stage's
    replicas 1.36x the first's at 1.12x its work (its loss, its input gradients, its cores' share). Neither is a
    stage's doing; one rank 1.3x slower than every other stage is (a pipeline's lone slow rank)."""
    two_slow = _metrics([1.118, 1.472, 1.534, 1.08])
    assert findings.stage_findings(two_slow, on_host=True, work=[5.01, 5.38, 5.38, 5.38]) == []
    assert findings.stage_findings(two_slow) != []  # GPU ranks: their time is their work
    last = _replica_metrics([0.878, 1.197], replicas=4)
    assert findings.stage_findings(last, on_host=True, work=[5.58, 6.24]) == []
    # the same stage with 1.4x the others' calls (more layers) is the split's
    (f,) = findings.stage_findings(last, on_host=True, work=[5.0, 7.0])
    assert f.culprit.stage == 1
    lone = _metrics([1.3, 1.45, 1.9, 1.2])  # 1.31x the runner-up at the same work
    (f,) = findings.stage_findings(lone, on_host=True, work=[1.0, 1.0, 1.0, 1.0])
    assert (f.kind, f.culprit.stage) == ("stage_imbalance", 2)


def test_a_heavy_chunk_of_a_rank_that_holds_two_is_found_by_the_share_of_its_rank_s_work() -> None:
    """A real zero-bubble V job on 2 cores (rank r holds stages r and 7 - r, 2 blocks each, stage 0 of 3): rank 0 did
    1.198x the others' work (alike to the call), 3.94 ms a micro-batch against 3.49-3.67: its first chunk's 1.5x
    is half its rank's work. The same rank ratio without chunks is within a stage's own structure."""
    rows = _lone_rows([3.943, 3.492, 3.673, 3.614])
    v_job = stages._stage_summary(rows, micro_batches=4, virtual=2, step_time_ns=89.9 * MS, compute_scale=2.0)
    work = [17284626.0, 14426544.0, 14426544.0, 14426544.0]
    (f,) = findings.stage_findings(v_job, on_host=True, work=work, compute_scale=2.0)
    assert (f.culprit.stage, f.culprit.ranks) == (0, [0]) and findings.counted(f)
    plain = stages._stage_summary(rows, micro_batches=4, virtual=1, step_time_ns=89.9 * MS, compute_scale=2.0)
    assert findings.stage_findings(plain, on_host=True, work=work, compute_scale=2.0) == []
    # a clean V job: rank 0 (the first and the last chunk) 0.957x the others
    clean = [26213992.0, 27401532.0, 27401532.0, 27401532.0]
    assert findings.stage_findings(v_job, on_host=True, work=clean, compute_scale=2.0) == []


def test_a_lone_stage_far_slower_in_time_is_named_beside_a_stage_just_heavier_in_work() -> None:
    """A real interleaved zero-bubble job (pp4, two chunks a rank, activation checkpointing): rank 1's extra
    matmuls (forward hooks: a caller no other stage has, no work counted) took 4.83 ms a micro-batch against
    2.41-2.80 on the other stages, while the last stage did 1.10x the others' work, just at its rule's bar and worth
    a fraction of a percent. The stage that costs more is named."""
    rows = _lone_rows([2.411, 4.825, 2.748, 2.797])
    job = stages._stage_summary(rows, micro_batches=4, virtual=2, step_time_ns=132.2 * MS, compute_scale=2.3)
    work = [7979483.5, 7566399.5, 8779999.5, 8789583.5]
    (f,) = findings.stage_findings(job, on_host=True, work=work, compute_scale=2.3)
    assert (f.culprit.stage, f.culprit.ranks) == (1, [1]) and not findings.counted(f)
    # without the slow rank, the last stage's extra work alone is too small to report
    even = [{**r, "compute_per_micro_batch_ns": int(2.7 * MS)} for r in rows]
    flat = stages._stage_summary(even, micro_batches=4, virtual=2, step_time_ns=132.2 * MS, compute_scale=2.3)
    assert findings.stage_findings(flat, on_host=True, work=work, compute_scale=2.3) == []


def test_a_lone_stage_slower_in_time_whose_host_held_its_sends_back_is_not_a_stage() -> None:
    """A real pp4 isend job on 2 cores whose rank 1 sleeps 10 ms before each send: its micro-batches took 1.86 ms
    against 1.10-1.30 ms on the other stages, at the same work (it computes while its neighbours, no longer waiting
    for it, compute too). Its host stall is named (``late_senders``); its slower time is not a stage's. Its work
    heavier is (a split's, whoever holds its sends)."""
    late = _metrics([1.104, 1.857, 1.301, 1.272])
    (f,) = findings.stage_findings(late, on_host=True, work=[1.0, 1.0, 1.0, 1.0])
    assert f.culprit.stage == 1  # no stall named: a lone slow rank
    assert findings.stage_findings(late, on_host=True, work=[1.0, 1.0, 1.0, 1.0], held={1}) == []
    assert findings.stage_findings(late, on_host=True, work=[1.0, 1.0, 1.0, 1.0], held={2}) != []
    (f,) = findings.stage_findings(late, on_host=True, work=[1.0, 1.5, 1.0, 1.0], held={1})
    assert f.culprit.stage == 1


def test_a_stage_whose_layers_no_whole_layer_split_evens_out_says_so() -> None:
    """17 layers on 4 stages (a real interleaved job, one stage of 1.5x the blocks): the replay moves no layer,
    so the evidence says why its saving is none while the estimate of an even split of the work stands."""
    metrics = _metrics([2.24, 2.0, 2.0, 2.0])
    moved = findings.stage_evidence(metrics, 90 * MS, {"now": [5, 4, 4, 4], "balanced": [4, 5, 4, 4]})
    assert (
        "a balanced split (layers per stage 5/4/4/4 -> 4/5/4/4) would take the step from 100.0 to 90.0 ms"
        in moved
    )
    stuck = findings.stage_evidence(
        metrics, 96 * MS, {"now": [4, 5, 4, 4], "balanced": [4, 5, 4, 4]}, estimate_kept=True
    )
    assert "no split of whole layers does better (layers per stage 4/5/4/4)" in stuck
    assert stuck.endswith("from 100.0 to 96.0 ms")


def test_a_second_heavy_stage_is_named_beside_the_heaviest() -> None:
    """A stage given extra layers beside a last stage that the LM head makes heavier still (a simulated 256-rank CPU
    job: 3.36 and 4.08 ms per micro-batch against 1.98 on average): the finding blames the heaviest, and its
    evidence names the other, so that the split it proposes reads as the fix of both. Stages near the average are
    not named."""
    metrics = _metrics([0.85, 1.7, 3.4, 4.1])
    evidence = findings.stage_evidence(metrics, 90 * MS)
    assert evidence.startswith("stage 3 computes 4.10 ms") and "; stage 2 too: 3.40 ms)" in evidence
    assert "stage 1 too" not in evidence and "stage 0 too" not in evidence
    assert "too:" not in findings.stage_evidence(_metrics([2.24, 2.0, 2.0, 2.0]), 90 * MS)


def _checkpointed_rank(
    tmp_path: Path, rank: int, layers: int, recomputes: int
) -> tuple[pa.Table, list[dict]]:
    """One step of a CPU stage under activation checkpointing: a forward pass (per layer aten::linear > aten::mm
    twice, aten::gelu), then a backward pass that runs the forward's calls again ``recomputes`` times (inside
    autograd's nodes, as the checkpoint's unpack hook does) beside its own (per layer MmBackward0 > aten::mm
    twice, aten::gelu_backward); and its passes (``stages.number_passes``'s columns that ``recomputed`` reads)."""
    events: list[dict[str, Any]] = [{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 7, "ts": 0, "dur": 900_000}]  # fmt: skip
    t, ext = 10.0, 1

    def call(outer: str, inner: str | None, dur: float) -> None:
        nonlocal t, ext
        events.append({"ph": "X", "cat": "cpu_op", "name": outer, "pid": 1, "tid": 7, "ts": t, "dur": dur + 20, "args": {"External id": ext}})  # fmt: skip
        if inner:
            events.append({"ph": "X", "cat": "cpu_op", "name": inner, "pid": 1, "tid": 7, "ts": t + 10, "dur": dur, "args": {"External id": ext + 1}})  # fmt: skip
        t, ext = t + dur + 40, ext + 2

    def forward() -> None:
        for _ in range(layers):
            call("aten::linear", "aten::mm", 100.0)
            call("aten::linear", "aten::mm", 100.0)
            call("aten::gelu", None, 50.0)

    forward()
    middle = t
    for _ in range(recomputes):
        forward()
    for _ in range(layers):
        call("MmBackward0", "aten::mm", 200.0)
        call("MmBackward0", "aten::mm", 200.0)
        call("aten::gelu_backward", None, 50.0)
    path = tmp_path / f"ckpt{rank}.pt.trace.json"
    info = {"backend": "gloo", "rank": rank, "world_size": 4, "pg_config": [{"pg_name": "0", "pg_desc": "default_pg", "ranks": [0, 1, 2, 3]}]}  # fmt: skip
    path.write_text(json.dumps({"distributedInfo": info, "traceEvents": events}))
    table = kineto.parse(path).events
    table = table.set_column(
        table.schema.get_field_index("rank"),
        "rank",
        pa.array([rank] * len(table), table.schema.field("rank").type),
    )
    start = min(table.column("start_ns").to_pylist())  # the parser's clock: the step starts at 0 us
    spans = [("forward", 10.0, middle), ("backward", middle, t)]
    return table, [
        {
            "rank": rank,
            "direction": d,
            "start_ns": start + round((a - 0) * 1000),
            "end_ns": start + round(b * 1000),
        }
        for d, a, b in spans
    ]


def test_a_forward_computed_again_in_the_backward_is_not_a_stage_s_work(tmp_path: Path) -> None:
    """Activation checkpointing runs a layer's forward again in the backward, as often as the schedule's backward
    is split (a zero-bubble job's ranks: 3 or 4 forwards a micro-batch): stage work counts each call once, so a
    stage of more layers is the heavier one however often each stage recomputed, and equal stages stay equal."""
    layers, recomputes = [3, 2, 2, 2], [1, 2, 1, 2]
    built = [_checkpointed_rank(tmp_path, r, layers[r], recomputes[r]) for r in range(4)]
    frame = concat([device_frame(t) for t, _ in built])
    passes = pa.Table.from_pylist([p for _, ps in built for p in ps])
    again = stages.recomputed(frame, passes)
    names = [frame.names[int(n)] for n in frame.name[again]]
    assert set(names) == {
        "aten::linear",
        "aten::mm",
        "aten::gelu",
    }  # the forward's calls; the gradients' mm not
    calls = set(
        zip(frame.rank[again].tolist(), frame.call[again].tolist(), strict=True)
    )  # a call's pieces: one
    assert len(calls) == 5 * sum(n * k for n, k in zip(layers, recomputes, strict=True))
    counted = stages.stage_work(frame, STAGES, frozenset(range(4)), again)
    assert counted[0] == pytest.approx(1.5 * counted[2])
    assert counted[1] == pytest.approx(counted[2]) == pytest.approx(counted[3])
    # a rank whose forward is not told from its backward (a 1F1B last stage: one pass a micro-batch) keeps its
    # recomputation in its work: then every rank does
    merged = [p for _, ps in built[:3] for p in ps] + [
        {**built[3][1][1], "start_ns": built[3][1][0]["start_ns"]}
    ]
    assert not stages.recomputed(frame, pa.Table.from_pylist(merged)).any()
    # counted with its recomputation, stage 1 would look heavier than stage 2
    timed = stages.stage_work(frame, STAGES, frozenset(range(4)))
    assert timed[1] > 1.2 * timed[2]
