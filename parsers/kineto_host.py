"""Host lanes: the device of a rank that has none (a CPU job on gloo), made of its own threads.

A rank whose trace holds no device activity computes on its threads: the main thread (and, on CPU, autograd runs
backward there too) runs the ``cpu_op``s, and gloo runs collectives on its ``pt_gloo_runloop`` threads, recording
each as a ``gloo:all_reduce`` / ``gloo:all_gather`` / ... ``user_annotation`` that lasts as long as the slowest
member makes it last (synchronous ``gloo:send`` / ``gloo:recv`` run on the calling thread). The host operators
``c10d::allreduce_``, ``c10d::send``, ... only enqueue that work. So the rank gets device-like rows (device 0, one
track per thread), which the whole analysis then measures as it measures a GPU:

* **compute**: each operator's *self* time on its thread (its span less its children's): operators nest, and
  their self times tile the thread's busy time once (the sum of nested spans would count a GEMM inside
  ``aten::linear`` twice). The time inside ``c10d::*`` operators (enqueueing), functional collectives
  (``_c10d_functional::wait_tensor``: waiting) and gloo annotations an operator waits in is not
  compute.
* **memory**: the self time of the operators that only move or allocate memory (DATA_MOVEMENT: ``aten::copy_``,
  ``aten::cat``, ``aten::empty``, FSDP's copy-in and chunk_cat, ...), as a GPU's memcpy and memset are
  memory, not compute: they run at the speed of the host's memory and page faults, which the other processes on
  the host share (on a clean FSDP2 job two of eight ranks' copies ran 3x their peers' in every step).
* **communication**: each gloo annotation, linked to the ``c10d::*`` operator that enqueued it (the earliest
  one not yet linked, of the same collective, started before it: gloo runs a group's work first in, first out;
  the annotations' External ids are the runloop thread's own; an operator re-entered under a dispatch mode is
  one enqueue, its outermost: :func:`_outermost`); a send that gloo annotates at the end of its
  ``c10d::send`` begins at the ``c10d::send`` (:func:`_began`). The link gives the step (the enqueue's), the
  group, and for send/recv the peer: ``Concrete Inputs`` holds the peer's index *in the group*, mapped to a
  global rank through the group's members. Sizes come from ``Input Dims`` and ``Input type``.

gloo does not record which process group ran a collective. The group is the rank's one group that fits: for
send/recv the pipeline group (by name) where the peer index names another rank, else the default group; for
collectives the rank's groups other than pipeline groups, a named (DeviceMesh, Megatron, ...) group before the
default one. Where several such groups remain, the runloop threads are given to them in the order the groups were
created (gloo starts the same number of threads for each), which is the order of their thread ids.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pyarrow as pa

from paradiag import schema
from paradiag.intervals import merge
from paradiag.parsers.base import Group, group_role, normalize_collective, ranks_key
from paradiag.parsers.kineto_decode import OperatorInputs, int_or_none, tensor_bytes

GLOO_ANNOTATION = re.compile(r"^gloo:([A-Za-z_]+)$")
OVERRUN_NS = 1_000  # an operator ending this much after the one it began in is not its call (_self_time)
P2P_WORK = ("send", "recv")  # gloo's point-to-point work, on the calling thread
HOST_COLLECTIVE = re.compile(
    r"^c10d::_*([A-Za-z_]+?)_*$"
)  # c10d::allreduce_, c10d::_allgather_base_, c10d::recv_
# Functional collectives (DTensor, torch.compile): ``_c10d_functional::all_reduce`` enqueues through c10d, and
# ``_c10d_functional::wait_tensor`` blocks the thread until the transfer is done: waiting, not compute.
FUNCTIONAL_COLLECTIVE = re.compile(r"^_?c10d_functional::")
COMPUTE_CATEGORIES = ("cpu_op", "Operator")
# A dispatcher operator (``aten::mm``, ``fsdp::chunk_cat``, ``c10d::send``, ``mylib::op.overload``) does the work
# it is named for; anything else a ``cpu_op`` names is a wrapper (an autograd node ``AddmmBackward0``,
# ``autograd::engine::evaluate_function: ...``, FSDP's ``RegisterPostBackwardFunctionBackward``,
# ``Optimizer.step#SGD.step``, a module's ``forward``) whose self time is glue, or the thread blocked in a wait.
# Operators that only move or allocate memory: on a host lane, memory work, not compute (see the module's text).
DATA_MOVEMENT = frozenset(
    {
        "aten::copy_",
        "aten::_foreach_copy_",
        "aten::cat",
        "aten::_chunk_cat",
        "aten::split_with_sizes_copy",
        "aten::clone",
        "aten::empty",
        "aten::empty_strided",
        "aten::empty_like",
        "aten::zero_",
        "aten::fill_",
        "aten::resize_",
        "fsdp::chunk_cat",
        "fsdp::all_gather_copy_in",
        "fsdp::split_with_sizes_copy",
    }
)
DISPATCHER_OP = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*::[A-Za-z_][A-Za-z0-9_.]*$")
NOT_AN_OP_LIBRARY = ("autograd", "torch", "profiler")


def is_operator(name: str) -> bool:
    """Whether a ``cpu_op`` name is a dispatcher operator (DISPATCHER_OP), not a wrapper."""
    return bool(DISPATCHER_OP.match(name)) and name.split("::")[0] not in NOT_AN_OP_LIBRARY


# c10d operator -> the gloo work that runs it, where the names differ (gloo reduce-scatters by all-reducing).
RUNS_AS = {"reduce_scatter": ("reduce_scatter", "all_reduce")}


def host_lanes(
    table: pa.Table, inputs: dict[int, OperatorInputs], groups: list[Group], rank: int | None
) -> tuple[pa.Table, np.ndarray]:
    """The device-like rows of a rank without device activity (``table``: its events; ``inputs``: row -> the
    recorded inputs of its ``c10d::``/``gloo:`` events): compute slices and gloo communication, and for each new
    row the row of ``table`` whose step it takes (its enqueue), -1 where its own time decides. Each compute slice
    carries its caller (:func:`callers`)."""
    names = table.column("name").combine_chunks()
    words = [w or "" for w in names.dictionary.to_pylist()]
    codes = names.indices.to_numpy(zero_copy_only=False)
    category = table.column("category").combine_chunks()
    cat_words = category.dictionary.to_pylist()
    cat_codes = category.indices.to_numpy(zero_copy_only=False)
    is_op = np.isin(cat_codes, [i for i, c in enumerate(cat_words) if c in COMPUTE_CATEGORIES])
    host = table.column("device").to_numpy() < 0
    gloo_of_word = {i: GLOO_ANNOTATION.match(w) for i, w in enumerate(words)}
    enqueue_word = {i: HOST_COLLECTIVE.match(w) for i, w in enumerate(words)}
    is_gloo = host & np.isin(codes, [i for i, m in gloo_of_word.items() if m])
    # gloo's collectives (not its send/recv, which run on the calling thread) run on its runloop threads
    is_gloo_collective = host & np.isin(
        codes, [i for i, m in gloo_of_word.items() if m and m.group(1) not in P2P_WORK]
    )
    is_enqueue = host & is_op & np.isin(codes, [i for i, m in enqueue_word.items() if m])
    start = table.column("start_ns").to_numpy()
    end = start + table.column("dur_ns").to_numpy()
    track = table.column("track").to_numpy()
    external = table.column("external_id").to_numpy()

    is_functional = (
        host & is_op & np.isin(codes, [i for i, w in enumerate(words) if FUNCTIONAL_COLLECTIVE.match(w)])
    )
    is_wrapper = ~np.isin(codes, [i for i, w in enumerate(words) if is_operator(w)])
    parent = np.full(len(start), -1, np.int64)
    pieces = _compute_pieces(
        np.flatnonzero(host & is_op),
        is_enqueue | is_functional,
        np.flatnonzero(is_gloo),
        np.flatnonzero(is_gloo_collective),
        start,
        end,
        track,
        is_wrapper,
        parent,
    )
    comm = _communication(
        np.flatnonzero(is_gloo),
        _outermost(np.flatnonzero(is_enqueue), is_enqueue, parent),
        codes,
        words,
        start,
        end,
        track,
        inputs,
        groups,
        rank,
    )
    n_pieces, n_comm = len(pieces[0]), len(comm["rows"])
    rows = np.concatenate([pieces[2], comm["rows"]]).astype(np.int64)
    moves = np.isin(codes[pieces[2]], [i for i, w in enumerate(words) if w in DATA_MOVEMENT])
    kinds = np.concatenate(
        [
            np.where(moves, schema.KINDS.index(schema.MEMORY), schema.KINDS.index(schema.COMPUTE)),
            np.full(n_comm, schema.KINDS.index(schema.COMMUNICATION)),
        ]
    ).astype(np.int8)
    lane_start = np.concatenate([pieces[0], _began(comm, start, end, track)]).astype(np.int64)
    lane_end = np.concatenate([pieces[1], end[comm["rows"]]]).astype(np.int64)
    n = n_pieces + n_comm
    lanes = schema.build(
        schema.EVENTS,
        {
            "rank": np.full(n, -1, np.int32),
            "device": np.zeros(n, np.int8),
            "track": track[rows],
            "kind": schema.dictionary_array(kinds, schema.KINDS, pa.int8()),
            "category": category.take(pa.array(rows)),
            "name": names.take(pa.array(rows)),
            "start_ns": lane_start,
            "dur_ns": lane_end - lane_start,
            "step": np.full(n, -1, np.int32),
            # A compute slice's correlation is the External id of its operator's caller (-1 at the top): what
            # launched it, as a kernel's correlation is its launch. It tells calls of one name apart by caller
            # (``analysis.frame``'s ``work``).
            "correlation": np.r_[callers(pieces[2], parent, external), np.full(n_comm, -1)].astype(np.int32),
            "external_id": external[rows],
            "collective": [None] * n_pieces + comm["collective"],
            "group": [None] * n_pieces + comm["group"],
            "group_ranks": [None] * n_pieces + comm["group_ranks"],
            "peer": pa.array([None] * n_pieces + comm["peer"], pa.int32()),
            # A compute slice's bytes: its operator's tensor inputs (the parser's operand bytes), the same on
            # every slice of one call.
            "bytes": pa.concat_arrays(
                [
                    table.column("bytes").combine_chunks().take(pa.array(pieces[2], pa.int64())),
                    pa.array(comm["bytes"], pa.int64()),
                ]
            ),
        },
        n,
    )
    return lanes, np.concatenate([np.full(n_pieces, -1, np.int64), np.array(comm["enqueue"], dtype=np.int64)])


def _outermost(rows: np.ndarray, is_enqueue: np.ndarray, parent: np.ndarray) -> np.ndarray:
    """The enqueues of ``rows`` that no other enqueue encloses (``parent``: each operator's caller). A dispatch
    mode or tensor subclass re-enters the operator it handles: ``c10d::send`` > ``PythonDispatchMode`` >
    ``c10d::send`` is one send, and gloo runs it once; linked first in, first out, the inner one would take the
    next send's annotation."""
    keep = np.ones(len(rows), dtype=bool)
    for i, row in enumerate(rows.tolist()):
        up = int(parent[row])
        while up >= 0 and keep[i]:
            keep[i] = not is_enqueue[up]
            up = int(parent[up])
    return rows[keep]


def callers(owner: np.ndarray, parent: np.ndarray, external: np.ndarray) -> np.ndarray:
    """Per compute piece (``owner``: its operator's row), the External id of the operator that called it
    (``parent`` by row), -1 at the top or where it has none."""
    up = parent[owner]
    return np.where(up >= 0, external[np.maximum(up, 0)], -1) if len(owner) else np.zeros(0, np.int64)


def _compute_pieces(
    ops: np.ndarray,
    is_enqueue: np.ndarray,
    gloo: np.ndarray,
    collectives: np.ndarray,
    start: np.ndarray,
    end: np.ndarray,
    track: np.ndarray,
    is_wrapper: np.ndarray,
    parent: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(start, end, operator row) of the operators' self time, thread by thread, less enqueues, the gloo work
    an operator waits in, the operators gloo runs inside a collective (``collectives``: rows of gloo's collective
    annotations, on its runloop threads: its copies in and out of the buffers it sends, its reductions), and the
    time wrappers (``is_wrapper`` by row) spend while the rank's collectives are in flight
    (:func:`_without_waits`). ``parent`` is filled with each operator's caller (:func:`_self_time`).

    The operators inside a collective are the collective's work, as a communication kernel's own copies are: kept
    as the rank's, they were work of their own in the replay, released by the rank's work before the collective
    began (a FSDP1 all-gather's copies into its flat parameter, at its end, 56 ms after it started waiting for a
    stalled peer), and the stall's replay left the next all-gather, behind them on the runloop thread, in place."""
    parts: list[tuple[np.ndarray, ...]] = []
    in_flight = merge(start[gloo], end[gloo])
    for tid in np.unique(track[ops]).tolist():
        mine = ops[track[ops] == tid]
        s, e, owner = _self_time(mine, start, end, is_enqueue, parent, is_wrapper)
        g = gloo[track[gloo] == tid]
        if len(g):
            s, e, owner = _subtract(s, e, owner, start[g], end[g], start, end)
        c = collectives[track[collectives] == tid]
        if len(c):
            s, e, owner = _subtract(s, e, owner, start[c], end[c], start, end, enclosed=False)
        s, e, owner = _without_waits(s, e, owner, is_wrapper, in_flight)
        parts.append((s, e, owner))
    if not parts:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64)
    return tuple(np.concatenate(p) for p in zip(*parts, strict=True))  # type: ignore[return-value]


def _self_time(
    rows: np.ndarray,
    start: np.ndarray,
    end: np.ndarray,
    excluded: np.ndarray,
    parent: np.ndarray | None = None,
    is_wrapper: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The self-time pieces of nested operators on one thread: each instant belongs to the innermost operator
    running then. ``excluded`` operators and everything inside them yield no piece. ``parent`` (by row), where
    given, gets each operator's enclosing one.

    A thread's operators nest (a call returns before its caller does); one that begins inside another and ends
    more than OVERRUN_NS after it is no call of it but the thread's next, and the other is taken to have ended
    where it began (rounding's overruns are cut at the caller's end, as nested). No real trace here has one (0
    of 390,000 operators of the real CPU jobs of every API); a writer that lengthened an enqueue over the thread's
    next call (the simulator's held sends, once) had that call, counted inside the enqueue, yield no piece.

    A wrapper (``is_wrapper`` by row) running inside a dispatcher operator is that operator's work, and its pieces
    are the operator's: a tensor subclass or dispatch mode (DTensor's ``PythonSubclass``, a
    ``PythonDispatchMode``: sharding propagation, a quantized or instrumented kernel) runs the operator's call in
    Python, and its time is the call's, not glue between calls, until the call waits for communication (an
    ``excluded`` operator inside it: DTensor's loss enqueues an all-reduce and blocks in a functional wait): the
    wrapper's time after that is the thread resuming from the wait and handling its result, not compute (as a
    wrapper's after a wait outside operators is: :func:`_without_waits`). Pieces of a wrapper inside an operator
    are that operator's, never cut by work in flight on other threads."""
    order = rows[np.lexsort((-end[rows], start[rows]))]
    out_s: list[int] = []
    out_e: list[int] = []
    out_o: list[int] = []
    stack: list[tuple[int, int, bool, int]] = []  # (row, end, excluded, the row its pieces belong to)
    waited: set[int] = set()  # the operators whose call has waited for communication inside it
    cursor = 0

    def emit(top: tuple[int, int, bool, int], until: int) -> None:
        if not top[2] and until > cursor and not (top[3] != top[0] and top[3] in waited):
            out_s.append(cursor)
            out_e.append(until)
            out_o.append(top[3])

    for row in order.tolist():
        s, e = int(start[row]), int(end[row])
        while stack and stack[-1][1] <= s:
            top = stack.pop()
            emit(top, top[1])
            cursor = max(cursor, top[1])
        # Running past it: not its caller but the thread's previous call, ended here.
        while stack and e > stack[-1][1] + OVERRUN_NS:
            emit(stack.pop(), s)
            cursor = s
        if stack:
            emit(stack[-1], s)
            e = min(e, stack[-1][1])
            if parent is not None:
                parent[row] = stack[-1][0]
        owner = row
        if is_wrapper is not None and stack and is_wrapper[row] and not is_wrapper[stack[-1][3]]:
            owner = stack[-1][3]
        if excluded[row]:
            waited.update(entry[3] for entry in stack)
        stack.append((row, e, bool(excluded[row]) or (bool(stack) and stack[-1][2]), owner))
        cursor = s
    while stack:
        top = stack.pop()
        emit(top, top[1])
        cursor = max(cursor, top[1])
    return np.array(out_s, np.int64), np.array(out_e, np.int64), np.array(out_o, np.int64)


def _without_waits(
    s: np.ndarray,
    e: np.ndarray,
    owner: np.ndarray,
    is_wrapper: np.ndarray,
    in_flight: tuple[np.ndarray, np.ndarray],
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The pieces less the time a *wrapper* operator (``is_wrapper`` by row: not a dispatcher operator) spends
    while work of the rank's gloo is in flight (``in_flight``: the union of its gloo work on every thread): a
    wrapper with no child running is the thread blocked in a ``Work.wait()``, which records no event (FSDP2 waits
    for each reduce-scatter inside ``RegisterPostBackwardFunctionBackward``, for each all-gather inside the
    autograd node that needs it), or Python glue; not computing. A dispatcher operator's own time (``aten::mm``
    while DDP all-reduces a bucket on the runloop thread, or a pipeline stage's ``isend`` transfers) is compute,
    in flight or not, and so is a wrapper's inside one (its pieces are the operator's: :func:`_self_time`). The
    wrapper's piece is waiting from the in-flight work's start to the piece's end: a thread blocked in a wait
    resumes when the scheduler runs it, after the work completed."""
    lo, hi = in_flight
    gap = is_wrapper[owner]
    if not len(lo) or not gap.any():
        return s, e, owner
    # The windows a piece may overlap: from the last one starting before its end, back to the first ending after its start.
    first = np.searchsorted(hi, s, side="right")
    last = np.searchsorted(lo, e, side="left")
    hit = gap & (last > first)
    if not hit.any():
        return s, e, owner
    # The thread blocked in the wait stays blocked after the work completes, until the scheduler runs it again (ms on
    # a busy host): the piece is waiting from the first window it overlaps to its end.
    cut = np.maximum(lo[np.minimum(first, len(lo) - 1)], s)
    keep = ~hit | (cut > s)
    return s[keep], np.where(hit, cut, e)[keep], owner[keep]


def _subtract(
    s: np.ndarray,
    e: np.ndarray,
    owner: np.ndarray,
    cut_s: np.ndarray,
    cut_e: np.ndarray,
    op_start: np.ndarray,
    op_end: np.ndarray,
    enclosed: bool = True,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The pieces [s, e) (with their owner rows) less the intervals [cut_s, cut_e) (a piece cut in
    the middle becomes two) that their owner operator (``op_start``/``op_end`` by row) encloses: an operator that
    waits for a synchronous gloo transfer inside it. An asynchronous one (``isend``: its ``gloo:send`` lasts on the
    calling thread until the transfer completes, while the thread runs on) does not stop the operators that start
    after it. ``enclosed=False``: every piece within an interval is cut, whatever its operator's span."""
    pieces = list(zip(s.tolist(), e.tolist(), owner.tolist(), strict=True))
    for a, b in zip(cut_s.tolist(), cut_e.tolist(), strict=True):
        kept: list[tuple[int, int, int]] = []
        for ps, pe, po in pieces:
            if pe <= a or ps >= b or (enclosed and (op_start[po] > a or op_end[po] < b)):
                kept.append((ps, pe, po))
                continue
            if ps < a:
                kept.append((ps, a, po))
            if pe > b:
                kept.append((b, pe, po))
        pieces = kept
    out = ([p[i] for p in pieces] for i in range(3))
    return tuple(np.array(v, np.int64) for v in out)  # type: ignore[return-value]


def _communication(
    gloo: np.ndarray,
    enqueues: np.ndarray,
    codes: np.ndarray,
    words: list[str],
    start: np.ndarray,
    end: np.ndarray,
    track: np.ndarray,
    inputs: dict[int, OperatorInputs],
    groups: list[Group],
    rank: int | None,
) -> dict[str, list[Any]]:
    """One record per gloo annotation: its collective, group, peer, bytes and the enqueue it links to."""
    kind_of = {int(r): _collective(HOST_COLLECTIVE, words[codes[r]]) for r in enqueues}
    pending = sorted((int(start[r]), int(r)) for r in enqueues if kind_of[int(r)])
    runloop = sorted(
        {
            int(track[r])
            for r in gloo
            if _collective(GLOO_ANNOTATION, words[codes[r]]) not in schema.P2P_COLLECTIVES
        }
    )
    thread_group = _runloop_groups(runloop, groups, rank)
    out: dict[str, list[Any]] = {
        k: [] for k in ("rows", "collective", "group", "group_ranks", "peer", "bytes", "enqueue")
    }
    for row in sorted(gloo.tolist(), key=lambda r: (int(start[r]), r)):
        collective = _collective(GLOO_ANNOTATION, words[codes[row]]) or "other"
        nbytes = tensor_bytes(inputs.get(row))
        link = _link(row, collective, nbytes, pending, kind_of, start, inputs)
        p2p = collective in schema.P2P_COLLECTIVES
        local = _peer_index(inputs.get(link)) if p2p and link >= 0 else None
        group = _p2p_group(groups, rank, local) if p2p else thread_group.get(int(track[row]))
        peer = None
        if group is not None and local is not None and 0 <= local < len(group.ranks):
            peer = group.ranks[local]
        elif group is None and local is not None:
            peer = local  # no group known: the default group, whose indices are global ranks
        out["rows"].append(row)
        out["collective"].append(collective)
        out["group"].append(group.group if group is not None else "0")
        out["group_ranks"].append(ranks_key(group.ranks) if group is not None and group.ranks else None)
        out["peer"].append(peer)
        out["bytes"].append(
            nbytes if nbytes is not None else tensor_bytes(inputs.get(link)) if link >= 0 else None
        )
        out["enqueue"].append(link)
    return out


def _began(comm: dict[str, list[Any]], start: np.ndarray, end: np.ndarray, track: np.ndarray) -> np.ndarray:
    """When each gloo record began: its annotation's start, or, for a send or receive that gloo ran inside its
    enqueue on the calling thread (the annotation starts within the ``c10d::`` operator, on its thread), the
    enqueue's. The host asked for the transfer then: a ``c10d::send`` that blocks 3.8 ms before its
    ``gloo:send`` starts (gloo holding the pair for an earlier send) is time spent sending, not a host late to
    send. A receive annotated when it is waited on, after the enqueue ended, begins at its annotation."""
    rows = np.asarray(comm["rows"], np.int64)
    link = np.asarray(comm["enqueue"], np.int64)
    began = start[rows]  # a copy (fancy indexing)
    p2p = np.array([c in schema.P2P_COLLECTIVES for c in comm["collective"]], bool)
    ok = p2p & (link >= 0)
    safe = np.where(ok, link, 0)
    inside = ok & (track[safe] == track[rows]) & (start[safe] <= began) & (began <= end[safe])
    began[inside] = start[safe[inside]]
    return began


def _collective(pattern: re.Pattern[str], name: str) -> str | None:
    match = pattern.match(name)
    return normalize_collective(match.group(1)) if match else None


def _link(
    row: int,
    collective: str,
    nbytes: int | None,
    pending: list[tuple[int, int]],
    kind_of: dict[int, str | None],
    start: np.ndarray,
    inputs: dict[int, OperatorInputs],
) -> int:
    """The enqueue of a gloo annotation: the earliest pending ``c10d::`` operator of its collective that started
    before it, one of the same size first; removed from ``pending``. -1 when none (enqueued before the window)."""
    fits = [
        i
        for i, (s, op) in enumerate(pending)
        if s <= int(start[row])
        and (kind_of[op] == collective or collective in RUNS_AS.get(kind_of[op] or "", ()))
    ]
    if not fits:
        return -1
    same = [i for i in fits if nbytes is not None and tensor_bytes(inputs.get(pending[i][1])) == nbytes]
    return pending.pop((same or fits)[0])[1]


def _peer_index(op: OperatorInputs | None) -> int | None:
    """The peer of ``c10d::send(tensors, group, dst, tag)`` / ``c10d::recv_(tensors, group, src, tag)``: the third
    input, an index in the group."""
    if op is None or len(op.concrete) < 3:
        return None
    value = int_or_none(op.concrete[2])
    return value if value is not None and value >= 0 else None


def _is_default(group: Group, world: int | None) -> bool:
    return (
        group_role(group.description) == "world"
        or group.group == "0"
        or (world is not None and len(group.ranks) == world)
    )


def _p2p_group(groups: list[Group], rank: int | None, local: int | None) -> Group | None:
    """The group of a send/recv: a pipeline group in which the peer index names another rank, else the default
    group, else any group where it does."""
    mine = [g for g in groups if rank is None or rank in g.ranks]
    fits = [g for g in mine if local is None or (0 <= local < len(g.ranks) and g.ranks[local] != rank)]
    world = max((len(g.ranks) for g in groups), default=None)
    for wanted in (
        lambda g: group_role(g.description) == "pp",
        lambda g: _is_default(g, world),
        lambda g: True,
    ):
        found = sorted((g for g in fits if wanted(g)), key=lambda g: len(g.ranks))
        if found:
            return found[0]
    return None


def _runloop_groups(threads: list[int], groups: list[Group], rank: int | None) -> dict[int, Group]:
    """runloop thread id -> the group whose collectives it runs (see the module's docstring)."""
    mine = [g for g in groups if rank is None or rank in g.ranks or not g.ranks]
    candidates = [g for g in mine if group_role(g.description) != "pp"] or mine
    world = max((len(g.ranks) for g in groups), default=None)
    named = [g for g in candidates if not _is_default(g, world)]
    candidates = named or candidates
    if not candidates:
        return {}
    candidates.sort(key=lambda g: (int(g.group) if g.group.isdigit() else 2**31, g.group))
    per_group = max(len(threads) // len(candidates), 1)
    return {tid: candidates[min(i // per_group, len(candidates) - 1)] for i, tid in enumerate(threads)}
