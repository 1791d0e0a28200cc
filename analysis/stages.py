"""Pipeline stages: each rank's forward and backward passes per micro-batch, stage imbalance and the bubble.

A *pass* is the compute a rank does for one micro-batch in one direction. Pipeline send/recv operations bound
the passes (a stage receives activations, computes, sends them on); where a forward pass runs straight into a
backward one (the last stage in 1F1B), the switch is at the last forward-only kernel before the first
backward kernel (names with backward/bwd/grad). Optimizer kernels are not part of any pass. The k-th forward
pass of a step on a rank is micro-batch k (for interleaved schedules, the k-th pass is mapped to its model chunk
and micro-batch as Megatron orders them).

Theoretical bubble ratio (Narayanan et al. 2021): (p - 1) / (m + p - 1) for GPipe and 1F1B with p stages and m
micro-batches; (p - 1) / (v m + p - 1) with v virtual stages per rank (interleaved 1F1B). The measured bubble of
a rank is 1 - (the summed span of its passes) / (its pipeline span: first pass start to last pass end): the
time between passes, waiting for other stages.
"""

from __future__ import annotations

import re
import statistics
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from paradiag.analysis.frame import Frame, group_bounds, weighted_median
from paradiag.analysis.operators import call_counts, operator_time, typical_durations
from paradiag.intervals import union_length

BACKWARD = re.compile(r"backward|bwd|grad|dgrad|wgrad", re.IGNORECASE)
OPTIMIZER = re.compile(r"adam|multi_tensor|foreach|sgd|lamb|optimizer|apply_?gradient", re.IGNORECASE)
AMBIGUOUS = re.compile(r"gemm|matmul|mm_|xmma|cutlass|cublas|sgemm|elementwise", re.IGNORECASE)
P2P = ("send", "recv", "send_recv")


def name_classes(names: list[str]) -> np.ndarray:
    """Per name code: 1 backward, -1 forward-only, 0 either (GEMMs and elementwise kernels run in both), 2
    optimizer."""
    out = np.zeros(len(names), dtype=np.int8)
    for i, n in enumerate(names):
        out[i] = 2 if OPTIMIZER.search(n) else 1 if BACKWARD.search(n) else 0 if AMBIGUOUS.search(n) else -1
    return out


# A segment's forward-only kernels after its last backward kernel are the next micro-batch's forward pass (stage 0
# of 1F1B runs a backward pass straight into the next forward: no p2p between them) only when there are at least
# this many: a backward pass may end with a stray kernel not named backward (a bias-gradient reduction).
MIN_TRAILING_FORWARD = 3


def split_passes(classes: np.ndarray, segment: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For kernels in time order with their class and p2p-bounded segment id: the pass id of each kernel and
    whether that pass is backward. A segment holding backward kernels is cut just after the last forward-only
    kernel before its first backward kernel, and just before the first of the forward-only kernels after its last
    backward kernel (when there are enough of them to be a pass): forward, backward, forward, each where present."""
    pass_id = np.zeros(len(classes), dtype=np.int64)
    backward: list[bool] = []
    current = -1
    for seg in np.unique(segment):
        rows = np.flatnonzero(segment == seg)
        cls = classes[rows]
        back, fwd = np.flatnonzero(cls == 1), np.flatnonzero(cls == -1)
        if len(back):
            before, after = fwd[fwd < back[0]], fwd[fwd > back[-1]]
            lo = before[-1] + 1 if len(before) else 0
            hi = after[0] if len(after) >= MIN_TRAILING_FORWARD else len(rows)
            pieces = [(0, lo, False), (lo, hi, True), (hi, len(rows), False)]
        else:
            pieces = [(0, len(rows), False)]
        for a, b, is_backward in pieces:
            if b > a:
                current += 1
                pass_id[rows[a:b]] = current
                backward.append(is_backward)
    return pass_id, np.array(backward, dtype=bool)


# autograd's backward nodes on a host thread (``MmBackward0``, ``autograd::engine::evaluate_function:
# AddmmBackward0``, ``torch::autograd::AccumulateGrad``) and explicit backward operators (``aten::gelu_backward``).
BACKWARD_OPERATOR = re.compile(
    r"Backward\d*$|^autograd::engine::evaluate_function:|AccumulateGrad|_backward$"
)


def inside_backward(frame: Frame, events: pa.Table) -> np.ndarray:
    """Per row of ``frame`` (one CPU rank's host lanes, ``parsers.kineto_host``), whether it runs inside a backward
    host operator (BACKWARD_OPERATOR) of ``events`` on its thread: on CPU autograd runs the forward's ATen
    operators (``aten::mm``) inside its backward nodes, and only the node says which direction the work is."""
    out = np.zeros(len(frame), bool)
    host = events.filter(pc.less(events.column("device"), 0)).select(["name", "track", "start_ns", "dur_ns"])
    if not host.num_rows or not len(frame):
        return out
    names = host.column("name").combine_chunks()
    if not pa.types.is_dictionary(names.type):
        names = pc.dictionary_encode(names)
    back_codes = [i for i, w in enumerate(names.dictionary.to_pylist()) if w and BACKWARD_OPERATOR.search(w)]
    is_back = np.isin(names.indices.fill_null(-1).to_numpy(zero_copy_only=False), back_codes)
    track = host.column("track").fill_null(-1).to_numpy()[is_back]
    start = host.column("start_ns").to_numpy()[is_back]
    end = start + host.column("dur_ns").to_numpy()[is_back]
    mid = (frame.start + frame.end) // 2
    for tid in np.unique(track).tolist():
        order = np.argsort(start[track == tid], kind="stable")
        s, e = (
            start[track == tid][order],
            np.maximum.accumulate(end[track == tid][order]),
        )  # reach of the nodes so far
        rows = np.flatnonzero(frame.track == tid)
        at = np.searchsorted(s, mid[rows], side="right") - 1
        out[rows] = (at >= 0) & (mid[rows] < e[np.maximum(at, 0)])
    return out


def row_classes(frame: Frame, classes: np.ndarray, backward: np.ndarray | None = None) -> np.ndarray:
    """Per row of ``frame``, the class of its name (:func:`name_classes` of ``frame.names``), and backward where
    ``backward`` says the row runs inside a backward operator (a CPU rank: :func:`inside_backward`)."""
    own = classes[frame.name]
    if backward is None:
        return own
    return np.where(backward & (own != 2), 1, own).astype(np.int8)


# On a CPU rank every host operator is compute: between two p2p operations there are also the step's data
# preparation (``aten::randn``, ``tensor_split`` into micro-batches), the loss bookkeeping and the step's end. A pass
# computing less than this share of the largest pass of its direction in the step is such work, not a micro-batch.
MINOR_PASS = 0.3


def rank_passes(
    frame: Frame,
    step: int,
    classes: np.ndarray,
    durations: np.ndarray | None = None,
    actions: Actions | None = None,
) -> list[dict[str, Any]]:
    """The passes of one rank (``frame``: its events) in one step, in time order: direction, start, end, compute
    time (the union of its compute, or the sum of ``durations``, one per row of ``frame``, where given: a CPU
    rank's typical durations, ``operators.typical_durations``; its minor passes, MINOR_PASS, are then left out),
    and the stage and micro-batch the schedule names it by (-1 for none). ``classes``: per row
    (:func:`row_classes`). Where the schedule names its actions (``actions``: :func:`annotated_actions`), each
    action is a pass, its direction its kind's (F forward; B, I, W backward) and its work what was launched during
    it; else passes are cut at the sends and receives and where the kernels' classes turn (:func:`split_passes`)."""
    mine = frame.step == step
    compute = mine & (frame.kind == frame.code("kinds", "compute"))
    compute &= classes != 2
    p2p = mine & np.isin(frame.collective, frame.codes("collectives", P2P))
    if not compute.any():
        return []
    starts, ends, row_class = frame.start[compute], frame.end[compute], classes[compute]
    spent = durations[compute] if durations is not None else None
    # Launch order is program order; a receive posted early (the host ahead of the device) starts before kernels
    # launched ahead of it, and its start would cut their pass.
    by = frame.launch if (frame.launch[compute | p2p] >= 0).all() else frame.start
    at = by[compute]
    named = actions.split_overlaps(actions.during(at), at, row_class) if actions is not None else None
    if actions is not None and named is not None and (named >= 0).any():
        # Work outside every action (the optimizer, gradient syncs) is in no pass.
        ran = np.unique(named[named >= 0])
        pass_id = np.where(named >= 0, np.searchsorted(ran, named), -1)
        backward = actions.backward[ran]
    else:
        named = None
        segment = np.searchsorted(np.sort(by[p2p]), at, side="right")
        pass_id, backward = split_passes(row_class, segment)
    out: list[dict[str, Any]] = []
    for p in range(len(backward)):
        rows = pass_id == p
        action = int(named[rows][0]) if named is not None else -1
        stage, micro_batch = (
            (int(actions.stage[action]), int(actions.micro_batch[action]))
            if actions is not None and action >= 0
            else (-1, -1)
        )
        out.append(
            {
                "direction": "backward" if backward[p] else "forward",
                "start_ns": int(starts[rows].min()),
                "end_ns": int(ends[rows].max()),
                "compute_ns": union_length(starts[rows], ends[rows])
                if spent is None
                else round(spent[rows].sum()),
                "action_stage": stage,
                "action_micro_batch": micro_batch,
            }
        )
    if spent is not None and named is None:
        # A typical pass of each direction: the median by the compute each holds. Not the largest pass: a
        # zero-bubble schedule defers its weight-gradient passes to the step's end, where several run back to back
        # with no send between them, one "pass" of 2-5x a micro-batch's, and a pass a third of that lump is a whole
        # micro-batch's input gradient, no minor work.
        typical: dict[str, float] = {}
        for d in {one["direction"] for one in out}:
            mine = [one["compute_ns"] for one in out if one["direction"] == d]
            typical[d] = weighted_median(mine, mine) or 0.0
        out = [one for one in out if one["compute_ns"] >= MINOR_PASS * typical[one["direction"]]]
    return out


def chunk_and_micro_batch(k: int, stages: int, virtual: int, backward: bool) -> tuple[int, int]:
    """Megatron's interleaved order: passes go through the model chunks in groups of ``stages`` micro-batches
    (backward passes visit the chunks last to first)."""
    if virtual <= 1:
        return 0, k
    group, within = divmod(k, stages * virtual)
    chunk = within // stages
    return (virtual - 1 - chunk if backward else chunk), group * stages + within % stages


PASS_COLUMNS = ("direction", "start_ns", "end_ns", "compute_ns")
ACTION_COLUMNS = ("action_stage", "action_micro_batch")  # the schedule's names for a pass (-1: none)


# torch.distributed.pipelining's multi-stage schedules (interleaved 1F1B, zero-bubble, V-shaped ones) name each
# action of a rank in a record_function: "PP:{stage}F{micro-batch}" for a forward, B for a whole backward, I and W
# for its input and weight gradients (a zero-bubble schedule's halves). DualPipeV runs a forward and a backward of
# its two stages as one action, "PP:(0F7;7B3)OVERLAP_F_B": its sub-actions one after the other, unmarked within.
PIPELINING_COMPUTE = re.compile(r"^PP:(\d+)([FBIW])(\d+)$")
PIPELINING_OVERLAP = re.compile(r"^PP:\(((?:\d+[FBIW]\d+;?)+)\)OVERLAP_F_B$")
_SUB_ACTION = re.compile(r"(\d+)([FBIW])(\d+)")


@dataclass(frozen=True)
class Actions:
    """A rank's compute actions as its pipeline schedule names them (:func:`annotated_actions`), in order of start:
    where each began and ended (the host's clock, as a kernel's launch), its stage and its micro-batch. The
    sub-actions of one overlapped action share its span and its ``group`` (each other action has a group of its
    own), in the order they ran."""

    start: np.ndarray
    end: np.ndarray
    stage: np.ndarray
    micro_batch: np.ndarray
    backward: np.ndarray  # bool: B, I or W
    group: np.ndarray

    def during(self, t: np.ndarray) -> np.ndarray:
        """Per time, the action under way then (its index; an overlapped action's first sub-action), -1 for
        none."""
        first = np.flatnonzero(np.r_[True, self.group[1:] != self.group[:-1]])
        i = np.searchsorted(self.start[first], t, side="right") - 1
        inside = (i >= 0) & (t <= self.end[first[np.maximum(i, 0)]])
        return np.where(inside, first[np.maximum(i, 0)], -1)

    def split_overlaps(self, named: np.ndarray, at: np.ndarray, classes: np.ndarray) -> np.ndarray:
        """``named`` (:meth:`during` of rows started ``at``, of ``classes``: :func:`row_classes`) with each row of an
        overlapped action given the sub-action it ran in: they ran in order, and a sub-action of the other direction
        than the one before it starts at the first row of its direction after that one began (a backward at the
        first row inside a backward operator). Rows before any such turn stay with the first sub-action."""
        sizes = np.bincount(self.group)
        overlapped = np.flatnonzero(sizes[self.group] >= 2)
        if not len(overlapped):  # every schedule but DualPipeV's
            return named
        out = named.copy()
        for first in np.intersect1d(np.unique(named[named >= 0]), overlapped).tolist():
            rows = np.flatnonzero(named == first)
            rows = rows[np.argsort(at[rows], kind="stable")]
            cls, begin = classes[rows], 0
            for sub in range(first + 1, first + int(sizes[self.group[first]])):
                if self.backward[sub] == self.backward[sub - 1]:
                    continue  # no turn of direction tells where it began: its rows stay with the one before
                wanted = 1 if self.backward[sub] else -1
                turn = np.flatnonzero(cls[begin:] == wanted)
                if not len(turn):
                    break
                begin += int(turn[0])
                out[rows[begin:]] = sub
        return out


def _parse_actions(name: str) -> list[tuple[int, str, int]]:
    """The (stage, kind, micro-batch) of a schedule's compute action, or of each sub-action of an overlapped one;
    [] for any other name."""
    one = PIPELINING_COMPUTE.match(name)
    if one:
        return [(int(one.group(1)), one.group(2), int(one.group(3)))]
    both = PIPELINING_OVERLAP.match(name)
    if both:
        return [(int(a), k, int(m)) for a, k, m in _SUB_ACTION.findall(both.group(1))]
    return []


def annotated_actions(events: pa.Table) -> Actions | None:
    """The compute actions a pipeline schedule names on one rank's host (:data:`PIPELINING_COMPUTE`, the sub-actions
    of :data:`PIPELINING_OVERLAP`; the names its rows hold, not a dictionary's, which keeps those of rows filtered
    out): each pass's stage (so its model chunk) and micro-batch, as the schedule ran them. A V-shaped schedule
    (rank r holds stages r and 2p - 1 - r) runs its chunks in an order no counting of passes can tell
    (:func:`chunk_and_micro_batch` is Megatron's interleaved order); the names tell it. None without them
    (single-stage schedules name none)."""
    names = events.column("name")
    found = [n for n in pc.unique(names).to_pylist() if n and _parse_actions(n)]
    if not found:
        return None
    mine = events.filter(
        pc.is_in(names.cast(pa.string()) if pa.types.is_dictionary(names.type) else names, pa.array(found))
    )
    start = mine.column("start_ns").to_numpy(zero_copy_only=False).astype(np.int64)
    end = start + mine.column("dur_ns").to_numpy(zero_copy_only=False).astype(np.int64)
    parsed = [_parse_actions(n) for n in mine.column("name").cast(pa.string()).to_pylist()]
    order = np.argsort(start, kind="stable")
    rows = [(int(i), sub) for i in order for sub in parsed[i]]
    index = np.array([i for i, _ in rows], np.int64)
    kind = np.array([sub[1] for _, sub in rows])
    return Actions(
        start[index],
        end[index],
        np.array([sub[0] for _, sub in rows], np.int64),
        np.array([sub[2] for _, sub in rows], np.int64),
        kind != "F",
        np.cumsum(np.r_[True, index[1:] != index[:-1]]) - 1,
    )


def annotated_schedule(actions: Actions | None) -> tuple[int, int] | None:
    """Model chunks and micro-batches of one rank as its schedule names them: the distinct stages and micro-batches
    of its forward actions (``actions``: :func:`annotated_actions`), where it holds two chunks or more; None
    without them. A V-shaped schedule (ScheduleZBVZeroBubble: rank r holds stages r and 2p - 1 - r) feeds rank 0's
    second chunk from rank 1 straight into its loss and backward, and a zero-bubble one splits each backward in
    two: their passes cannot be counted as :func:`model_chunks` and :func:`stage_metrics` count them."""
    if actions is None:
        return None
    forward = ~actions.backward
    chunks = len(np.unique(actions.stage[forward]))
    return (chunks, len(np.unique(actions.micro_batch[forward]))) if chunks >= 2 else None


def rank_pass_table(frame: Frame, events: pa.Table | None = None, host_lanes: bool = True) -> pa.Table:
    """The per-rank part of the passes table: one rank's passes (``frame``: its device events), step by step in
    time order (step, direction, start, end, compute, and the schedule's stage and micro-batch where its actions
    are named: :data:`ACTION_COLUMNS`), and on each row the model chunks its first step shows
    (:func:`model_chunks`) and the micro-batches the schedule's annotations name (``micro_batches``, 0 where none
    do). ``events``: all the rank's events (its host's annotations). ``host_lanes``: a CPU rank, whose
    operators' direction is that of the autograd node they run in (:func:`inside_backward`) and whose compute
    counts them at their typical durations (``operators.typical_durations``), as the findings do."""
    host_lanes = host_lanes and events is not None
    classes = row_classes(
        frame,
        name_classes(frame.names),
        inside_backward(frame, events) if host_lanes and events is not None else None,
    )
    durations = typical_durations(frame) if host_lanes else None
    named = annotated_actions(events) if events is not None else None
    schedule = annotated_schedule(named)
    rows: dict[str, list[Any]] = {k: [] for k in ("step", *PASS_COLUMNS, *ACTION_COLUMNS)}
    for step in np.unique(frame.step[frame.step >= 0]).tolist():
        for p in rank_passes(frame, step, classes, durations, named):
            rows["step"].append(step)
            for key in (*PASS_COLUMNS, *ACTION_COLUMNS):
                rows[key].append(p[key])
    table = pa.table(
        rows, schema=pa.schema([(k, pa.string() if k == "direction" else pa.int64()) for k in rows])
    )
    chunks, micro = schedule or (model_chunks(frame, classes, durations), 0)
    table = table.append_column("chunks", pa.array(np.full(table.num_rows, chunks, np.int64)))
    return table.append_column("micro_batches", pa.array(np.full(table.num_rows, micro, np.int64)))


def number_passes(passes: pa.Table, stage_of: dict[int, int], virtual: int, stages: int) -> pa.Table:
    """Every pass of every rank and step (rank, stage, step, micro_batch, chunk, direction, start, end, compute):
    the passes of :func:`rank_pass_table` (a ``rank`` column added, ranks in order) with each rank's stage and each
    pass's micro-batch and model chunk, which need the job's stages and virtual stages: as the schedule names them
    where it does (:data:`ACTION_COLUMNS`: the chunk is the place of the action's stage among the rank's), else
    counted in Megatron's interleaved order (:func:`chunk_and_micro_batch`)."""
    named = all(k in passes.column_names for k in ACTION_COLUMNS)
    cols = passes.select(["rank", "step", *PASS_COLUMNS]).to_pydict()
    action_stage = passes.column("action_stage").to_pylist() if named else [-1] * passes.num_rows
    action_mb = passes.column("action_micro_batch").to_pylist() if named else [-1] * passes.num_rows
    own: dict[int, list[int]] = {}  # per rank, the stages its actions name, in order
    for rank, stage in zip(cols["rank"], action_stage, strict=True):
        if stage >= 0:
            own.setdefault(rank, []).append(stage)
    chunks_of = {rank: sorted(set(named_stages)) for rank, named_stages in own.items()}
    rows: dict[str, list[Any]] = {
        k: [] for k in ("rank", "stage", "step", "micro_batch", "chunk", *PASS_COLUMNS)
    }
    counters: dict[tuple[int, int, str], int] = {}
    for i, (rank, step, direction, *times) in enumerate(zip(*cols.values(), strict=True)):
        k = counters.get((rank, step, direction), 0)
        counters[(rank, step, direction)] = k + 1
        chunk, mb = chunk_and_micro_batch(k, stages, virtual, direction == "backward")
        if action_stage[i] >= 0:
            chunk, mb = chunks_of[rank].index(action_stage[i]), action_mb[i]
        for key, value in zip(
            rows, (rank, stage_of.get(rank, 0), step, mb, chunk, direction, *times), strict=True
        ):
            rows[key].append(value)
    return pa.table(
        rows, schema=pa.schema([(k, pa.string() if k == "direction" else pa.int64()) for k in rows])
    )


def model_chunks(frame: Frame, classes: np.ndarray, durations: np.ndarray | None = None) -> int:
    """Model chunks of one rank (``frame``: its events), from its first step. In interleaved 1F1B, stage 0 also
    receives activations (from the last stage, for its later chunks): with m x v forward passes of which
    m (v - 1) start after a receive, v = F / (F - R). Meaningful on a rank of stage 0 (:func:`virtual_stages`)."""
    steps = np.unique(frame.step[frame.step >= 0])
    if len(steps) == 0:
        return 1
    step = int(steps[0])
    passes = rank_passes(frame, step, classes, durations)
    forward = [p for p in passes if p["direction"] == "forward"]
    recv = frame.code("collectives", "recv")
    recv_ends = np.sort(frame.end[(frame.step == step) & (frame.collective == recv) & (recv >= 0)])
    # A forward pass fed by a receive: some receive ended between the previous pass's end and this pass's start.
    fed, previous_end = 0, -1
    for p in passes:
        if p["direction"] == "forward" and np.any((recv_ends > previous_end) & (recv_ends <= p["start_ns"])):
            fed += 1
        previous_end = p["end_ns"]
    f = len(forward)
    return max(1, round(f / (f - fed))) if f > fed else 1


def virtual_stages(passes: pa.Table, stage0_ranks: list[int], stages: int) -> int:
    """Model chunks per rank: those the first rank of stage 0 shows (``passes``: :func:`rank_pass_table`'s, a
    ``rank`` column added); 1 without a pipeline."""
    if stages <= 1 or not stage0_ranks:
        return 1
    mine = passes.filter(pc.equal(passes.column("rank"), stage0_ranks[0])).column("chunks")
    return int(mine[0].as_py()) if len(mine) else 1


def theoretical_bubble(stages: int, micro_batches: int, virtual: int = 1) -> float:
    """(p - 1) / (v m + p - 1); 0 without a pipeline."""
    if stages <= 1 or micro_batches <= 0:
        return 0.0
    return (stages - 1) / (virtual * micro_batches + stages - 1)


def schedule_kind(passes: pa.Table, stages: int, virtual: int) -> str:
    """gpipe when every forward pass of a rank precedes all its backward passes, else 1f1b; interleaved with
    virtual stages; none without a pipeline."""
    if stages <= 1:
        return "none"
    if virtual > 1:
        return "interleaved"
    cols = passes.select(["rank", "step", "direction", "start_ns"]).to_pydict()
    last_forward: dict[tuple[int, int], int] = {}
    first_backward: dict[tuple[int, int], int] = {}
    for rank, step, direction, start in zip(*cols.values(), strict=True):
        key = (rank, step)
        if direction == "forward":
            last_forward[key] = max(last_forward.get(key, start), start)
        else:
            first_backward[key] = min(first_backward.get(key, start), start)
    gpipe = all(last_forward[k] < first_backward[k] for k in first_backward if k in last_forward)
    return "gpipe" if gpipe else "1f1b"


def annotated_micro_batches(passes: pa.Table) -> int:
    """The micro-batches the schedule's annotations name (:func:`rank_pass_table`'s ``micro_batches``; the
    most any rank names), 0 where none does."""
    if "micro_batches" not in passes.column_names or not passes.num_rows:
        return 0
    return int(pc.max(passes.column("micro_batches")).as_py() or 0)


def stage_metrics(
    passes: pa.Table,
    stages: list[list[int]],
    virtual: int,
    step_time_ns: float,
    compute_scale: float = 1.0,
    micro_batches: int = 0,
) -> dict[str, Any]:
    """Per stage: compute per micro-batch (median over steps, the least loaded of its ranks, so that one slow rank
    does not make its stage look heavy), the measured bubble; imbalance = max / mean; the bottleneck stage; the
    step time a balanced split would give, estimating the pipeline as (m + (p - 1) / v) slots of the slowest
    stage's per-micro-batch time. ``compute_scale``: the clock's time per ns of the passes' compute (CPU ranks
    count it at typical durations while a busy host runs it slower, ``diagnose._host_stretch``; 1 elsewhere): the
    time a balanced split saves on the clock's step is the saving in compute at that speed. ``micro_batches``:
    as the schedule's annotations name them (:func:`annotated_micro_batches`), else counted from the passes."""
    cols = passes.to_pydict()
    per_rank_step: dict[tuple[int, int], list[int]] = {}
    spans: dict[tuple[int, int], list[int]] = {}
    forward_count: dict[tuple[int, int], int] = {}
    for rank, step, direction, start, end, compute in zip(
        cols["rank"],
        cols["step"],
        cols["direction"],
        cols["start_ns"],
        cols["end_ns"],
        cols["compute_ns"],
        strict=True,
    ):
        per_rank_step.setdefault((rank, step), []).append(compute)
        span = spans.setdefault((rank, step), [start, end, 0])
        span[0], span[1] = min(span[0], start), max(span[1], end)
        span[2] += end - start
        forward_count[(rank, step)] = forward_count.get((rank, step), 0) + (direction == "forward")
    if not per_rank_step or len(stages) < 2:
        return {}  # no pipeline: nothing to report (the report's ``pipeline`` is null)
    passes_per_step = statistics.median(forward_count.values())
    micro_batches = micro_batches or max(1, round(passes_per_step / max(virtual, 1)))
    out_stages = []
    for s, ranks in enumerate(stages):
        per_rank = []
        bubbles = []
        for r in ranks:
            keys = [k for k in per_rank_step if k[0] == r]
            if keys:
                per_rank.append(statistics.median(sum(per_rank_step[k]) for k in keys) / micro_batches)
                # Passes that overlap (kernels of two passes interleaved on streams) cannot make the bubble negative.
                bubbles.append(
                    statistics.median(
                        min(max(1 - spans[k][2] / max(spans[k][1] - spans[k][0], 1), 0.0), 1.0) for k in keys
                    )
                )
        if per_rank:
            out_stages.append(
                {
                    "stage": s,
                    "ranks": ranks,
                    "compute_per_micro_batch_ns": int(min(per_rank)),
                    "compute_per_micro_batch_median_ns": int(statistics.median(per_rank)),
                    "bubble_ratio": round(statistics.median(bubbles), 4),
                }
            )
    return _stage_summary(out_stages, micro_batches, virtual, step_time_ns, compute_scale)


def _stage_summary(
    stages: list[dict[str, Any]],
    micro_batches: int,
    virtual: int,
    step_time_ns: float,
    compute_scale: float = 1.0,
) -> dict[str, Any]:
    p = len(stages)
    times = [s["compute_per_micro_batch_ns"] for s in stages]
    mean = statistics.fmean(times) if times else 0.0
    worst = max(range(p), key=lambda i: times[i]) if times else None
    slots = micro_batches + (p - 1) / max(virtual, 1)
    saved = slots * (max(times) - mean) * compute_scale if times else 0.0
    return {
        "stages": stages,
        "num_stages": p,
        "micro_batches": micro_batches,
        "virtual_stages": virtual,
        "imbalance": round(max(times) / mean, 4) if mean else None,
        "bottleneck_stage": stages[worst]["stage"] if worst is not None else None,
        "bubble_ratio_measured": round(statistics.median(s["bubble_ratio"] for s in stages), 4)
        if stages
        else None,
        "bubble_ratio_theoretical": round(theoretical_bubble(p, micro_batches, virtual), 4),
        "step_time_ns": int(step_time_ns),
        "balanced_step_time_ns": int(max(step_time_ns - saved, 0)) if p > 1 else int(step_time_ns),
    }


def _within(at: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Whether each instant of ``at`` lies inside one of the spans ``start``-``end`` (in any order)."""
    if not len(start):
        return np.zeros(len(at), bool)
    order = np.argsort(start, kind="stable")
    s, e = start[order], np.maximum.accumulate(end[order])
    i = np.searchsorted(s, at, side="right") - 1
    return (i >= 0) & (at < e[np.maximum(i, 0)])


def recomputed(frame: Frame, passes: pa.Table | None) -> np.ndarray:
    """Per row of ``frame``, whether it is a forward call made again inside a backward pass: a call of a name and
    caller (``frame.work``) that the rank's forward passes make, inside one of its backward passes (``passes``:
    :func:`number_passes`'s). That is activation checkpointing's recomputation: how often a layer's forward runs
    again is the schedule's and the checkpointing policy's, not the layer's (a zero-bubble schedule's ranks
    recomputed 3 or 4 times a micro-batch, its input and weight gradients apart), so stage work leaves it out.
    Every rank's or none: where some rank's forward passes are not told from its backward ones (a 1F1B last
    stage runs each micro-batch's forward straight into its backward, one pass), its recomputation stays in its
    work, and leaving it out of the others' would make them lighter than it (a clean dp2 x pp2 job's last stage
    1.30x the first)."""
    out = np.zeros(len(frame), bool)
    if passes is None or not passes.num_rows or not len(frame):
        return out
    mid = (frame.start + frame.end) // 2
    pair = (frame.name.astype(np.int64) << 32) | (frame.work.astype(np.int64) & 0xFFFFFFFF)
    p_rank = passes.column("rank").to_numpy()
    backward = np.asarray(passes.column("direction").to_pylist()) == "backward"
    forwards = np.bincount(p_rank[~backward], minlength=int(p_rank.max()) + 1)[np.unique(p_rank)]
    if forwards.min() < 0.5 * forwards.max():
        return out
    p_start, p_end = passes.column("start_ns").to_numpy(), passes.column("end_ns").to_numpy()
    order, firsts = group_bounds(frame.rank)  # each rank's rows once (a mask per rank: ranks x rows)
    ends = np.append(firsts[1:], len(order))
    bounds = {r: (a, b) for r, a, b in zip(frame.rank[order[firsts]].tolist(), firsts, ends, strict=True)}
    for rank in np.unique(p_rank).tolist():
        if rank not in bounds:
            continue
        rows = order[slice(*bounds[rank])]
        mine = p_rank == rank
        back = _within(mid[rows], p_start[mine & backward], p_end[mine & backward])
        fore = _within(mid[rows], p_start[mine & ~backward], p_end[mine & ~backward])
        if back.any() and fore.any():
            out[rows] = back & np.isin(pair[rows], pair[rows][fore])
    return out


def stage_work(
    frame: Frame, stages: list[list[int]], host_ranks: frozenset[int], skip: np.ndarray | None = None
) -> list[float]:
    """Per stage, the work its ranks do per step, counted in calls, not time: each operator's calls (per step,
    ``operators.call_counts``) priced at one job-wide price, the median over the ranks of its typical call
    (``operators.typical_durations`` on ``host_ranks``; the median call elsewhere), of the operators that every
    stage calls (by operator and caller; and a stage's calls from the top of an operator that every stage calls,
    whatever from); a stage's work is the median of its ranks'. A stage that holds more layers makes more calls of
    the same operators, so its work is more whatever its cores did; a rank slower at some operators (a busier core,
    an allocator's page faults on large outputs, a hot operator) makes the same calls and does the same work.
    Operators are told apart by their caller too. ``skip``: rows not counted (:func:`recomputed`'s). [] when a
    stage has no compute."""
    ranks = sorted({r for stage in stages for r in stage})
    host = np.array([r for r in ranks if r in host_ranks], dtype=np.int64)
    mine = frame.take(np.isin(frame.rank, ranks) & (True if skip is None else ~skip))
    typical = typical_durations(mine, host) if len(host) else None
    # An operator is counted per caller (the frame's ``work``): a call re-entered under a dispatch mode (an op
    # called by itself) is a caller no other stage has, not a second call of the layer's work.
    pair = (mine.name.astype(np.int64) << 32) | (mine.work.astype(np.int64) & 0xFFFFFFFF)
    pairs, inverse = np.unique(pair, return_inverse=True)
    base_name = (pairs >> 32).astype(np.int64)  # per pair code, its operator's name code
    top_level = (pairs & 0xFFFFFFFF) == 0xFFFFFFFF  # called by no operator (work -1)
    mine.name = inverse.reshape(-1).astype(mine.name.dtype)
    times = operator_time(mine, typical)
    counts = call_counts(mine)
    per_call: dict[int, list[float]] = {}
    for (rank, name), t in times.items():
        calls = counts.get((rank, name), 0.0)
        if calls > 0:
            per_call.setdefault(name, []).append(float(np.median(t)) / calls)
    # Only the operators every stage calls: a stage's own (the loss on the last, the embedding on the first) are
    # work no split of the layers moves.
    callers = [{n for (r, n), c in counts.items() if c > 0 and r in stage} for stage in stages]
    common = set.intersection(*callers) if callers else set()
    # ... and a stage's calls from the top of an operator every stage calls, from whatever caller (the matmuls of
    # a forward hook, where the layers' ``aten::mm`` is called by ``linear`` or ``AddmmBackward0``): more of the
    # work every stage does, not a stage's own kind of work as a loss or an embedding (which no other stage calls)
    # is; a call re-entered under a dispatch mode has an operator for its caller and stays out.
    shared = (
        set.intersection(*({int(base_name[n]) for n in stage} for stage in callers)) if callers else set()
    )
    common |= {n for stage in callers for n in stage if top_level[n] and int(base_name[n]) in shared}
    price = {name: float(np.median(v)) for name, v in per_call.items() if name in common}
    work: dict[int, float] = {}
    for (rank, name), calls in counts.items():
        work[rank] = work.get(rank, 0.0) + calls * price.get(name, 0.0)
    out = []
    for stage in stages:
        mine_work = [work[r] for r in stage if work.get(r)]
        if not mine_work:
            return []
        out.append(float(np.median(mine_work)))
    return out
