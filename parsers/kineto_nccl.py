"""NCCL work known only from its kernel and the host operators around its launch (no ``record_param_comms`` args).

Older PyTorch (and a profile whose ``record_param_comms`` carries no collective args) leaves a collective as three
things: the ``ncclDevKernel_*`` / ``ncclKernel_*`` kernel with launch args only, the c10d operator that launched it
(``c10d::allreduce_``, ``c10d::_allgather_base_``, ``c10d::send``, ...; the kernel's correlation id names its
launch inside that operator on the same thread, and its External id is the launching operator's), and ProcessGroupNCCL's
``nccl:<op>`` annotation inside the operator (``nccl:all_reduce``, ``nccl:_all_gather_base``, ``nccl:send 0->1``),
mirrored on the kernel's stream by a ``gpu_user_annotation`` of the same name and External id spanning the kernel.
From them, as record_param_comms would give them:

* the **collective**: the annotation's name, else the operator's, else the kernel's (NCCL runs all-to-all and
  send/recv both as SendRecv kernels: only the host side tells them apart);
* the **size**: the largest tensor among the operator's and the annotation's inputs (``Input Dims``), in the
  first concrete ``Input type`` (the annotation's: an operator's tensor list has no type): all-gather's output,
  reduce-scatter's input, as record_param_comms' ``max(in, out)`` elements;
* a **send/recv's peer**: ``nccl:send A->B`` / ``nccl:recv A<-B`` hold the rank's own index ``A`` and the peer's
  ``B`` in the group; a ``c10d::send`` / ``c10d::recv_`` alone holds ``B`` (third input);
* the **group**, from the rank's own groups (``distributedInfo.pg_config``): for a send/recv the group in which
  ``A`` is this rank and ``B`` another one (a pipeline group first, then the default group, where several fit);
  for collectives, NCCL runs each group on its own stream, so a stream is one group: the group whose size fits
  every all-gather's output/input and reduce-scatter's input/output ratio on the stream, a stream left with one
  candidate taking it from the others, and a pipeline group only where no other group fits (pipeline groups send
  and receive). A stream this leaves with several candidates keeps them in its label
  (``stream:13?5|13``), without members: no two ranks then take it for one collective by a stream id they share.
  Without any pg_config the stream stands in for the group (``stream:13``) and a peer index for a global rank.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np

from paradiag import schema
from paradiag.parsers.base import (
    Group,
    collective_from_kernel_name,
    group_role,
    normalize_collective,
    ranks_key,
)
from paradiag.parsers.kineto_decode import (
    DTYPE_BYTES,
    INT64_MAX,
    CommMeta,
    OperatorInputs,
    int_or_none,
    numel,
)

# nccl:all_reduce, nccl:_all_gather_base, nccl:send 0->1, nccl:recv 1<-0
NCCL_ANNOTATION = re.compile(r"^nccl:_*([A-Za-z_]+?)(?:_base)?_*(?:\s+(\d+)\s*(->|<-)\s*(\d+))?\s*$")
HOST_OPERATOR = re.compile(
    r"^c10d::_*([A-Za-z_]+?)(?:_base)?_*$"
)  # c10d::allreduce_, c10d::_allgather_base_, c10d::recv_


@dataclass
class Rows:
    """The columns of a file's events the inference reads (every row, before invalid ones are dropped)."""

    words: list[str]  # distinct names
    codes: np.ndarray  # name code per row
    on_device: np.ndarray
    correlation: np.ndarray
    external_id: np.ndarray
    ts: np.ndarray
    dur: np.ndarray
    tid: np.ndarray  # host thread
    track: np.ndarray  # device rows: the stream
    device: np.ndarray


@dataclass
class _Kernel:
    row: int
    collective: str | None = None
    nbytes: int | None = None
    size_hint: int | None = None  # group size implied by an all-gather's or reduce-scatter's shapes
    own: int | None = None  # send/recv: this rank's index in the group
    peer: int | None = None  # send/recv: the peer's index in the group
    inputs: list[OperatorInputs] = field(default_factory=list)


def infer(
    rows: Rows, pending: list[int], inputs: dict[int, OperatorInputs], groups: list[Group], rank: int | None
) -> dict[int, CommMeta]:
    """Kernel row -> its collective metadata, for the communication kernels ``pending`` that no record_param_comms
    describes (``inputs``: row -> the recorded inputs of ``c10d::`` and ``nccl:`` host events)."""
    if not pending:
        return {}
    kernels = [_describe(k, rows, inputs) for k in _link(rows, pending)]
    out: dict[int, CommMeta] = {}
    mine = [g for g in groups if len(g.ranks) > 1 and (rank is None or rank in g.ranks)]
    stream_group = _stream_groups(
        [k for k in kernels if k.collective not in schema.P2P_COLLECTIVES], rows, mine
    )
    for k in kernels:
        if k.collective is None:
            continue
        if k.collective in schema.P2P_COLLECTIVES:
            group, peer = _p2p_group(k, mine, rank, bool(groups))
            label = group.group if group is not None else _unresolved(rows, k.row, groups, [], rank)
        else:
            found = stream_group.get(int(rows.track[k.row]))
            group = found if isinstance(found, Group) else None
            label = (
                group.group
                if group is not None
                else _unresolved(rows, k.row, groups, found if isinstance(found, list) else [], rank)
            )
            peer = None
        members = ranks_key(group.ranks) if group is not None else None
        out[k.row] = CommMeta(k.collective, label, members, peer, k.nbytes)
    return out


@dataclass
class _Links:
    row: int
    operator: int = -1  # the c10d operator
    annotation: int = -1  # the host nccl: annotation


def _link(rows: Rows, pending: list[int]) -> list[_Links]:
    """Each pending kernel's c10d operator and nccl annotation: around its launch (same correlation id) on the
    launching thread; else the operator with the kernel's External id; else the annotation whose device-side
    copy spans the kernel on its stream."""
    words, codes = rows.words, rows.codes
    is_op_word = np.array([bool(HOST_OPERATOR.match(w)) for w in words], dtype=bool)
    is_ann_word = np.array([bool(NCCL_ANNOTATION.match(w)) for w in words], dtype=bool)
    host = ~rows.on_device
    ops = np.flatnonzero(host & is_op_word[codes])
    anns = np.flatnonzero(host & is_ann_word[codes])
    device_anns = np.flatnonzero(rows.on_device & is_ann_word[codes])
    launch_rows = np.flatnonzero(host & (rows.correlation >= 0))
    launch_rows = launch_rows[np.argsort(rows.correlation[launch_rows], kind="stable")]
    launch_ids = rows.correlation[launch_rows]
    by_external = {int(rows.external_id[r]): int(r) for r in ops if rows.external_id[r] >= 0}
    ann_by_external = {int(rows.external_id[r]): int(r) for r in anns if rows.external_id[r] >= 0}
    end = rows.ts + rows.dur
    out = []
    for row in pending:
        link = _Links(row)
        at = int(np.searchsorted(launch_ids, rows.correlation[row], side="right")) - 1
        if rows.correlation[row] >= 0 and at >= 0 and launch_ids[at] == rows.correlation[row]:
            launch = launch_rows[at]
            link.operator = _innermost(ops, rows, launch, end)
            link.annotation = _innermost(anns, rows, launch, end)
        if link.operator < 0:
            link.operator = by_external.get(int(rows.external_id[row]), -1)
        if link.annotation < 0 and len(device_anns):
            span = device_anns[
                (rows.device[device_anns] == rows.device[row])
                & (rows.track[device_anns] == rows.track[row])
                & (rows.ts[device_anns] <= rows.ts[row])
                & (end[device_anns] >= end[row])
            ]
            if len(span):
                inner = span[np.argmin(rows.dur[span])]
                link.annotation = ann_by_external.get(int(rows.external_id[inner]), int(inner))
        if link.annotation < 0 and link.operator >= 0:  # an annotation inside the operator, on its thread
            link.annotation = _innermost(anns, rows, link.operator, end, inside=True)
        out.append(link)
    return out


def _innermost(candidates: np.ndarray, rows: Rows, at: int, end: np.ndarray, inside: bool = False) -> int:
    """The shortest of ``candidates`` on row ``at``'s thread that holds its start (``inside``: its whole span)."""
    if not len(candidates):
        return -1
    same = candidates[(rows.tid[candidates] == rows.tid[at]) & (rows.ts[candidates] <= rows.ts[at])]
    same = same[end[same] >= (end[at] if inside else rows.ts[at])]
    same = same[same != at]
    return int(same[np.argmin(rows.dur[same])]) if len(same) else -1


def _describe(link: _Links, rows: Rows, inputs: dict[int, OperatorInputs]) -> _Kernel:
    k = _Kernel(link.row)
    ann = NCCL_ANNOTATION.match(rows.words[rows.codes[link.annotation]]) if link.annotation >= 0 else None
    op = HOST_OPERATOR.match(rows.words[rows.codes[link.operator]]) if link.operator >= 0 else None
    named = [normalize_collective(m.group(1)) for m in (ann, op) if m is not None]
    k.collective = next((c for c in named if c is not None), None) or collective_from_kernel_name(
        rows.words[rows.codes[link.row]]
    )
    ann_inputs = inputs.get(link.annotation) if link.annotation >= 0 else None
    op_inputs = inputs.get(link.operator) if link.operator >= 0 else None
    k.inputs = [i for i in (ann_inputs, op_inputs) if i is not None]
    k.nbytes = _bytes(k.inputs)
    if op_inputs is not None and k.collective in ("all_gather", "reduce_scatter"):
        k.size_hint = _ratio(op_inputs, k.collective)
    if k.collective in schema.P2P_COLLECTIVES:
        if ann is not None and ann.group(2) is not None:
            k.own, k.peer = int(ann.group(2)), int(ann.group(4))
        elif op_inputs is not None and len(op_inputs.concrete) >= 3:
            peer = int_or_none(op_inputs.concrete[2])
            k.peer = peer if peer is not None and peer >= 0 else None
    return k


def _bytes(ops: list[OperatorInputs]) -> int | None:
    """The largest tensor among the inputs, in the first concrete element type they name (None if none does)."""
    elements = max((numel(d) for op in ops for d in op.dims), default=0)
    size = next(
        (
            DTYPE_BYTES[t.lower()]
            for op in ops
            for t in op.types
            if isinstance(t, str) and t.lower() in DTYPE_BYTES
        ),
        None,
    )
    if elements <= 0 or size is None or elements * size > INT64_MAX:
        return None
    return elements * size


def _ratio(op: OperatorInputs, collective: str) -> int | None:
    """The group size an all-gather's (output, input) or a reduce-scatter's (output, input) shapes imply."""
    if len(op.dims) < 2:
        return None
    out, inp = numel(op.dims[0]), numel(op.dims[1])
    big, small = (out, inp) if collective == "all_gather" else (inp, out)
    if small <= 0 or big % small or big // small < 2:
        return None
    return big // small


def _p2p_group(
    k: _Kernel, mine: list[Group], rank: int | None, has_groups: bool
) -> tuple[Group | None, int | None]:
    """The group of a send/recv and the peer's global rank (see the module's docstring)."""
    if not has_groups:
        return None, k.peer  # no group known: the default group, whose indices are global ranks
    peer, own = k.peer, k.own
    if peer is None:
        return None, None

    def fits(g: Group) -> bool:
        if not peer < len(g.ranks) or g.ranks[peer] == rank:
            return False
        return own is None or (own < len(g.ranks) and (rank is None or g.ranks[own] == rank))

    found = [g for g in mine if fits(g)]
    world = max((len(g.ranks) for g in mine), default=0)
    for wanted in (
        lambda g: True,
        lambda g: group_role(g.description) == "pp",
        lambda g: len(g.ranks) == world or g.group == "0",
    ):
        chosen = [g for g in found if wanted(g)]
        if len(chosen) == 1:
            return chosen[0], chosen[0].ranks[peer]
    return None, None


def _stream_groups(kernels: list[_Kernel], rows: Rows, mine: list[Group]) -> dict[int, Group | list[Group]]:
    """Stream -> its group, or the groups it may be (one group a stream; a stream with one candidate takes it)."""
    if not mine:
        return {}
    hints: dict[int, set[int]] = {}
    for k in kernels:
        hints.setdefault(int(rows.track[k.row]), set()).update([k.size_hint] if k.size_hint else [])
    candidates = {s: [g for g in mine if all(len(g.ranks) == h for h in h_set)] for s, h_set in hints.items()}
    resolved: dict[int, Group | list[Group]] = {}
    _eliminate(candidates, resolved)
    for (
        s,
        cands,
    ) in candidates.items():  # pipeline groups send and receive: a collective is another group's first
        others = [g for g in cands if group_role(g.description) != "pp"]
        if s not in resolved and others and len(others) < len(cands):
            candidates[s] = others
    _eliminate(candidates, resolved)
    for s, cands in candidates.items():
        resolved.setdefault(s, cands)
    return resolved


def _eliminate(candidates: dict[int, list[Group]], resolved: dict[int, Group | list[Group]]) -> None:
    """Streams left with one candidate take it; it is then no other stream's (in place)."""
    changed = True
    while changed:
        changed = False
        for s, cands in candidates.items():
            if s not in resolved and len(cands) == 1:
                resolved[s] = cands[0]
                for t in candidates:
                    if t != s and t not in resolved and cands[0] in candidates[t]:
                        candidates[t] = [g for g in candidates[t] if g is not cands[0]]
                changed = True


def _unresolved(
    rows: Rows, row: int, groups: list[Group], candidates: list[Group], rank: int | None
) -> str | None:
    """The label of a group not known: the stream alone without any pg_config (the old behaviour), else the stream
    and the groups it may be (``stream:13?5|13``), which no rank in another group shares, or the rank itself
    where no group fits (``stream:13?rank4``)."""
    if not groups:
        return None  # the caller's fallback: stream:<id>
    names = "|".join(sorted((g.group for g in candidates), key=lambda n: (len(n), n))) or f"rank{rank}"
    return f"stream:{int(rows.track[row])}?{names}"
