"""``stages=balanced``: the pipeline's layers moved, whole, to the split whose replay takes the least time
(:func:`best_split`, from the split that minimises the slowest stage: :func:`layer_split`), and the replay's
timings scaled as the layers moved take their work with them (:func:`balance`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from paradiag.analysis.depgraph import Graph
from paradiag.analysis.edit import EditError, Peers
from paradiag.analysis.replay import Timing, after_first_step, replay, step_times


@dataclass(frozen=True)
class LayerSplit:
    """The pipeline's transformer layers per stage as profiled (``now``) and the whole-layer split that minimises
    the slowest stage (``balanced``), from each stage's compute per micro-batch: ``layer_ns`` per layer, the rest
    (embedding, LM head, loss: work that does not move with a layer) ``fixed_ns``. ``factor``: per stage (row) and
    place (column 0: outside the pipeline passes; 1 + c: model chunk c), new layers over old: what the host gaps
    and collectives there are scaled by; ``kernels``: per stage, place and kernel name, what the kernels' time is
    scaled by (their layer part by ``factor``, the rest kept: the LM head's matmul among the layers' ones)."""

    now: tuple[int, ...]
    balanced: tuple[int, ...]
    layer_ns: float
    fixed_ns: tuple[float, ...]
    factor: np.ndarray  # (stage index, place)
    kernels: np.ndarray  # (stage index, place, kernel name)


def layer_split(g: Graph, peers: Peers, balanced: Sequence[int] | None = None) -> LayerSplit:
    """Count each stage's layers by the kernel that runs once per layer per micro-batch (of the names every stage
    runs at least once per micro-batch and not equally often, the one run the fewest times: attention, say), take a
    layer's compute as the median over the stages of their per-name-shared compute per layer (a stage's own kernels,
    such as the embedding or the loss, are fixed work), and hand out the layers one at a time to the stage that
    would then be least loaded (each stage keeps one per model chunk). A stage's layers are spread evenly over its
    model chunks (the first ones take the remainder), as Megatron's interleaved schedule lays them out: where the
    passes tell the chunks apart, each chunk's kernels are scaled by its own new layers over old. ``balanced``:
    that split instead (a candidate of :func:`best_split`)."""
    runs, time = _per_micro_batch(g, peers)  # (stage index, place, name)
    stage_runs = runs.sum(axis=1)
    common = (stage_runs > 0).all(axis=0)
    per_layer = np.flatnonzero(common & (stage_runs.min(axis=0) >= 1))
    if not len(per_layer):
        raise EditError(
            "stages=balanced: no kernel runs once per layer on every stage (are these transformer layers?)"
        )
    # A kernel run as often on every stage is per pass or per step (a copy, the optimizer), not per layer, unless
    # every stage has as many layers; and it is one of the names that split their runs over the stages alike
    # (:func:`_alike`).
    marker = min(
        _alike(stage_runs, per_layer).tolist(),
        key=lambda n: (len(set(stage_runs[:, n].tolist())) == 1, float(stage_runs[:, n].sum()), n),
    )
    now = np.rint(stage_runs[:, marker]).astype(np.int64)
    # A name run q times per layer (q: the fewest whole times per layer any stage runs it) is layer work for q of
    # every k runs on a stage (the LM head's matmul among the layers' is the rest); the other names are fixed work.
    q = np.where(common, np.floor(stage_runs / now[:, None]).min(axis=0), 0)
    tau = _layer_run_ns(stage_runs, time.sum(axis=1), q, now)
    share = _layer_share(stage_runs, time.sum(axis=1), q, now, tau)
    layer_work = (time.sum(axis=1) * share).sum(axis=1)
    per_layer_ns = layer_work / now
    fixed = time.sum(axis=(1, 2)) - layer_work
    if balanced is None:
        layers = [least_layers(peers, now)] * len(now)
        for _ in range(int(now.sum()) - sum(layers)):
            i = min(range(len(now)), key=lambda k: (fixed[k] + (layers[k] + 1) * per_layer_ns[k], k))
            layers[i] += 1
    else:
        layers = [int(n) for n in balanced]
    factor, shares = _place_factors(runs, time, now, np.array(layers), marker, q, share, tau)
    per_step = _parameter_factors(time.sum(axis=1), stage_runs, now, np.array(layers))
    kernels = np.where(
        np.isnan(per_step)[:, None, :], 1 + (factor[:, :, None] - 1) * shares, per_step[:, None, :]
    )
    return LayerSplit(
        tuple(now.tolist()),
        tuple(layers),
        float(np.median(per_layer_ns)),
        tuple(fixed.tolist()),
        factor,
        kernels,
    )


def least_layers(peers: Peers, now: Sequence[int]) -> int:
    """The layers a stage keeps in any split: one per model chunk, but no more than the fewest a stage has now (a
    zero-bubble pp2 job of two blocks and two chunks a rank counted one layer a stage: a floor of two a stage made
    its "balanced" split four layers, 2/2, and replayed it 77 % slower)."""
    return max(1, min(max(peers.virtual, 1), int(min(now))))


ALIKE = 0.02  # two names split their runs alike when each stage's share of them differs by at most this


def _alike(stage_runs: np.ndarray, names: np.ndarray) -> np.ndarray:
    """Of ``names`` (run on every stage), those that split their runs over the stages as most of them do: a layer's
    kernels all run in the proportion of the stages' layers, while a kernel of the parallel wrapper or the
    optimizer may not (a real dp4 x pp2 job under FSDP2, checkpointing and AdamW, stages of 4 and 6 blocks: its
    ``aten::detach_`` ran 1 and 5 times a micro-batch, the fewest of any name, and was taken for the layers; its
    GELU, backward nodes, optimizer steps and views ran 1 : 1.5)."""
    share = stage_runs[:, names] / stage_runs[:, names].sum(axis=0)
    near = (np.abs(share[:, :, None] - share[:, None, :]) <= ALIKE).all(axis=0)  # (name, name)
    center = int(np.argmax(near.sum(axis=1)))  # the name most others split alike; the names alike to it
    return names[near[center]]


def _stage_index(g: Graph, peers: Peers) -> np.ndarray:
    """Per event, the index of its rank's stage among the stages in order (-1 for none)."""
    stage_index = np.full(int(g.rank.max()) + 1 if len(g) else 0, -1)
    for i, stage in enumerate(sorted(peers.stage_compute)):
        stage_index[peers.stages[stage]] = i
    return stage_index[g.rank]


def _units(g: Graph, peers: Peers, sel: np.ndarray) -> np.ndarray:
    """Per stage index, its ranks x profiled steps x micro-batches: what makes a count per rank and micro-batch."""
    ranks = np.array([len(peers.stages[s]) for s in sorted(peers.stage_compute)], float)
    return ranks * max(len(np.unique(g.step[sel])), 1) * max(peers.micro_batches, 1)


def _per_micro_batch(g: Graph, peers: Peers) -> tuple[np.ndarray, np.ndarray]:
    """Runs and time of each compute kernel name per rank and micro-batch, by stage index and place (0: outside
    the pipeline passes, 1 + c: model chunk c)."""
    si = _stage_index(g, peers)
    places = max(peers.virtual, 1) + 1
    sel = g.compute & (si >= 0) & (g.name >= 0)
    chunk = g.chunk[sel]
    place = np.where((chunk >= 0) & (chunk < places - 1), chunk + 1, 0)
    names = int(g.name.max()) + 1 if len(g) else 0
    cell = (si[sel] * places + place) * names + g.name[sel]
    shape = (len(peers.stage_compute), places, names)
    units = _units(g, peers, sel)
    runs = np.bincount(cell, minlength=int(np.prod(shape))).reshape(shape) / units[:, None, None]
    time = (
        np.bincount(cell, weights=(g.end - g.start)[sel], minlength=int(np.prod(shape))).reshape(shape)
        / units[:, None, None]
    )
    return runs, time


def _layer_run_ns(runs: np.ndarray, time: np.ndarray, q: np.ndarray, layers: np.ndarray) -> np.ndarray:
    """Per name, what one of its layer runs takes: the median, over the stages where every run of it is a layer's
    (``q`` runs per layer, as many as its ``layers`` make), of its time per run; NaN where no stage is so."""
    pure = (q > 0) & (runs > 0) & (np.abs(runs - q * layers[:, None]) < 1e-9)
    per_run = np.where(pure, time / np.maximum(runs, 1e-12), np.nan)
    out = np.full(runs.shape[1], np.nan)
    some = pure.any(axis=0)
    out[some] = np.nanmedian(per_run[:, some], axis=0)
    return out


def _layer_share(
    runs: np.ndarray, time: np.ndarray, q: np.ndarray, layers: np.ndarray, tau: np.ndarray
) -> np.ndarray:
    """Per stage (or stage and chunk) and name, the layers' part of its time: all of it where every run is a
    layer's; else its layer runs (``q`` per layer) at what a layer run takes on the stages that run only those
    (``tau``), by their length, not their number (a last stage's 10 matmuls, 8 of its one layer's and 2
    vocabulary-wide of the LM head's, were 0.8 layer work by count and 0.63 by time); by number where no stage
    tells a layer run's length."""
    count = np.minimum(q * layers[..., None] / np.maximum(runs, 1e-12), 1)
    timed = np.divide(q * layers[..., None] * tau, time, out=count.copy(), where=(time > 0) & ~np.isnan(tau))
    return np.where(count >= 1, 1.0, np.minimum(timed, 1.0))


def _place_factors(
    runs: np.ndarray,
    time: np.ndarray,
    now: np.ndarray,
    balanced: np.ndarray,
    marker: int,
    q: np.ndarray,
    share: np.ndarray,
    tau: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """Per stage and place, new layers over old, and per stage, place and name the layer part of the kernels'
    time. Outside the passes, or where the passes do not count each chunk's layers (every chunk has one at least,
    and they add up to the stage's), a stage's factor and shares hold for all of it."""
    places = runs.shape[1]
    factor = np.repeat((balanced / now)[:, None], places, axis=1)
    shares = np.repeat(share[:, None, :], places, axis=1)
    chunk_now = np.rint(runs[:, 1:, marker]).astype(np.int64)
    v = places - 1
    if v < 2 or (chunk_now < 1).any() or (chunk_now.sum(axis=1) != now).any():
        return factor, shares
    chunk_new = balanced[:, None] // v + (np.arange(v)[None, :] < balanced[:, None] % v)
    factor[:, 1:] = chunk_new / chunk_now
    shares[:, 1:, :] = _layer_share(runs[:, 1:, :], time[:, 1:, :], q, chunk_now, tau)
    return factor, shares


def _parameter_factors(work: np.ndarray, runs: np.ndarray, now: np.ndarray, new: np.ndarray) -> np.ndarray:
    """Per stage and name (``work``, ``runs``: per rank and micro-batch), what work that comes once per step or so
    is scaled by: a name every stage runs less than once per micro-batch, for longer (or more bytes) on some
    stages than on others (the optimizer, the gradients' all-reduce). Such work follows the stage's parameters: a
    fixed part (the embedding, the LM head) and one per layer, taken as the least per layer of any stage (one that
    holds no fixed parameters). NaN for the other names."""
    out = np.full(work.shape, np.nan)
    names = np.flatnonzero(
        (runs > 0).all(axis=0)
        & (runs.max(axis=0) < 1)
        & (work.min(axis=0) > 0)
        & (work.max(axis=0) > 1.01 * work.min(axis=0))
    )
    if len(names):
        w = work[:, names]
        out[:, names] = 1 + (new - now)[:, None] * (w / now[:, None]).min(axis=0) / w
    return out


def _gradient_factors(g: Graph, peers: Peers, split: LayerSplit, si: np.ndarray) -> np.ndarray:
    """Per event, what the transfer of a collective that comes once per step or so is scaled by (its bytes follow
    the stage's parameters: :func:`_parameter_factors`); NaN for the other events."""
    out = np.full(len(g), np.nan)
    sel = (g.instance >= 0) & (si >= 0) & (g.name >= 0)
    sel &= g.inst_key[np.maximum(g.instance, 0), 0] >= 0
    if not sel.any():
        return out
    names = int(g.name.max()) + 1
    cell = si[sel] * names + g.name[sel]
    units = _units(g, peers, sel)[:, None]
    shape = (len(split.now), names)
    runs = np.bincount(cell, minlength=shape[0] * names).reshape(shape) / units
    nbytes = (
        np.bincount(
            cell, weights=g.inst_key[g.instance[sel], 1].astype(float), minlength=shape[0] * names
        ).reshape(shape)
        / units
    )
    out[sel] = _parameter_factors(nbytes, runs, np.array(split.now), np.array(split.balanced))[
        si[sel], g.name[sel]
    ]
    return out


def balance(g: Graph, t: Timing, peers: Peers, steps: np.ndarray) -> LayerSplit:
    """Whole layers moved as :func:`best_split` says: each stage's layer work (the layer part of the kernels of
    names every stage runs), the host gaps between its kernels and its collectives' transfers (a layer moved takes
    its launches and its tensor-parallel traffic with it) scaled by the factor of its stage and model chunk; the
    work of each step that follows the parameters (the optimizer, the gradients' all-reduce) as they do. Sends and
    receives carry one activation whatever the split, and the gap after one is a pass boundary, the gap before a
    step's first kernel the step boundary: they stay."""
    split = best_split(g, peers, steps)
    _move_layers(g, t, peers, steps, split)
    return split


# The layer split of least slowest stage is no pipeline's best: with few micro-batches a step is mostly fill and
# drain, and the last stage (the LM head's) runs each micro-batch's forward and backward back to back on the
# critical path. A PanGu pipeline of 4/2/1/1 layers, 4 micro-batches, "balanced" to 2/2/2/2 (each stage 0.55 to
# 0.73 ms a micro-batch) replayed at 6.0 ms against 5.7 profiled, and at 5.5 with 3/2/2/1. So the split is
# searched on the replay itself, from that one: each round moves one layer to or from the first or the last stage
# or between the stages next to each other, and keeps the best replayed step, while REPLAY_BUDGET events' worth of
# replays last (a 256-rank pipeline, 530 k events: 0.2 s a replay).
REPLAY_BUDGET = 12_000_000
SEARCH_ROUNDS = 3


def best_split(g: Graph, peers: Peers, steps: np.ndarray) -> LayerSplit:
    """The whole-layer split whose replay (``steps`` edited) takes the least time over the ranks' steps the
    what-if counts a split's saving over (``replay.after_first_step``), on device ranks: :func:`layer_split`'s,
    bettered by single-layer moves on the replay while the budget lasts; the profiled split where nothing
    replays faster."""

    first = layer_split(g, peers)
    if peers.host_ranks:
        # On CPU ranks the replay runs the clock's durations, which the scheduler moves more than the work does: a
        # split searched on it found 5.6 % in a 1F1B job's LM-head stage and ranked it above the job's slow link.
        return first
    now = list(first.now)
    least = least_layers(peers, first.now)
    evaluations = max(REPLAY_BUDGET // max(len(g), 1), 2)
    cache: dict[tuple[int, ...], tuple[float, LayerSplit]] = {}

    def cost(split: Sequence[int]) -> float:
        key = tuple(split)
        if key not in cache:
            candidate = first if key == first.balanced else layer_split(g, peers, key)
            ends = g.end  # the profiled split: the replay without edits gives back the measured ends
            if key != tuple(now):
                t = Timing.of(g)
                _move_layers(g, t, peers, steps, candidate)
                ends = replay(g, t)
            times = step_times(g, ends)
            # As the what-if counts a split's saving.
            counted = [times[k] for k in after_first_step(list(times))]
            cache[key] = (float(np.mean(counted)) if counted else 0.0, candidate)
        return cache[key][0]

    best = min((tuple(now), first.balanced), key=cost)
    p = len(now)
    moves = [
        (i, j) for i in range(p) for j in range(p) if i != j and (abs(i - j) == 1 or {0, p - 1} & {i, j})
    ]
    for _ in range(SEARCH_ROUNDS):
        start = best
        for i, j in moves:
            if len(cache) >= evaluations:
                break
            if start[i] > least:
                moved = list(start)
                moved[i] -= 1
                moved[j] += 1
                best = min(best, tuple(moved), key=cost)
        if best == start:
            break
    return cache[best][1]


def _move_layers(g: Graph, t: Timing, peers: Peers, steps: np.ndarray, split: LayerSplit) -> None:
    """``t`` changed as ``split`` moves the layers (:func:`balance`)."""
    si = _stage_index(g, peers)
    v = split.factor.shape[1] - 1
    place = np.where((g.chunk >= 0) & (g.chunk < v), g.chunk + 1, 0)
    f = np.where(si >= 0, split.factor[np.maximum(si, 0), place], 1.0)
    sel = steps & g.compute & (si >= 0) & (g.name >= 0)
    t.own("dur")[sel] = np.rint(t.dur[sel] * split.kernels[si[sel], place[sel], g.name[sel]]).astype(np.int64)
    a = np.maximum(g.anchor, 0)
    p2p = (g.instance[a] >= 0) & (g.inst_key[np.maximum(g.instance[a], 0), 0] < 0)
    inside = steps & (g.anchor >= 0) & (g.step[a] == g.step) & (t.gap > 0) & ~p2p
    t.own("gap")[inside] = np.rint(t.gap[inside] * f[inside]).astype(np.int64)
    collective = steps & (g.instance >= 0) & (g.inst_key[np.maximum(g.instance, 0), 0] >= 0)
    gradients = _gradient_factors(g, peers, split, si)
    f = np.where(np.isnan(gradients), f, gradients)
    t.own("tail")[collective] = np.rint(t.tail[collective] * f[collective]).astype(np.int64)
