"""Pipeline schedules: the order in which one stage runs forward and backward passes of its micro-batches.

Each entry is ``(phase, micro_batch, chunk)`` with phase "F" (forward), "B" (the whole backward), or, in the
zero-bubble schedules, "I" (the backward for the inputs' gradients, what the previous stage waits for) and "W" (the
weights' gradients, which nothing downstream waits for: run where the pipeline would idle); ``chunk`` is the
virtual stage (model chunk) on this device, 0 but in the interleaved and zero-bubble schedules with several.

Where the model chunks sit (``holder``, ``chunk_of``): looped, global chunk ``g`` on stage ``g % pp`` (Megatron's
interleaved, torch's ScheduleInterleavedZeroBubble); V-shaped (``zbv``, torch's ScheduleZBVZeroBubble and
ScheduleDualPipeV), stage ``s`` holds chunks ``s`` and ``2 pp - 1 - s``: the first and the last chunk (the loss) on
stage 0, the turn on the last stage, which hands its data on to itself.
"""

from __future__ import annotations

from collections import deque
from functools import lru_cache

Task = tuple[str, int, int]
V_SHAPED = ("zbv",)
ZERO_BUBBLE = ("zb", *V_SHAPED)


def gpipe(stages: int, stage: int, microbatches: int) -> list[Task]:
    """All forwards, then all backwards."""
    return [("F", m, 0) for m in range(microbatches)] + [("B", m, 0) for m in range(microbatches)]


def one_f_one_b(stages: int, stage: int, microbatches: int) -> list[Task]:
    """PipeDream-flush 1F1B: warm-up forwards, one forward one backward in the steady state, cool-down."""
    warmup = min(stages - stage - 1, microbatches)
    order: list[Task] = [("F", m, 0) for m in range(warmup)]
    for i in range(microbatches - warmup):
        order += [("F", warmup + i, 0), ("B", i, 0)]
    order += [("B", m, 0) for m in range(microbatches - warmup, microbatches)]
    return order


def _interleaved_task(k: int, stages: int, chunks: int, forward: bool) -> tuple[int, int]:
    group = k % (stages * chunks)
    chunk = group // stages
    micro_batch = (k // (stages * chunks)) * stages + k % stages
    return micro_batch, chunk if forward else chunks - 1 - chunk


def interleaved(stages: int, stage: int, microbatches: int, chunks: int) -> list[Task]:
    """Megatron's interleaved 1F1B over ``chunks`` virtual stages per device (micro-batches a multiple of stages)."""
    total = microbatches * chunks
    warmup = min((stages - stage - 1) * 2 + (chunks - 1) * stages, total)
    order: list[Task] = []
    for k in range(warmup):
        order.append(("F", *_interleaved_task(k, stages, chunks, True)))
    for k in range(total - warmup):
        order.append(("F", *_interleaved_task(warmup + k, stages, chunks, True)))
        order.append(("B", *_interleaved_task(k, stages, chunks, False)))
    for k in range(total - warmup, total):
        order.append(("B", *_interleaved_task(k, stages, chunks, False)))
    return order


def holder(schedule: str, stages: int, g: int) -> int:
    """The stage (pipeline rank) that holds global chunk ``g``."""
    if schedule in V_SHAPED:
        return g if g < stages else 2 * stages - 1 - g
    return g % stages


def chunk_of(schedule: str, stages: int, stage: int, chunk: int) -> int:
    """The global chunk that is ``stage``'s ``chunk``-th."""
    if schedule in V_SHAPED:
        return stage if chunk == 0 else 2 * stages - 1 - stage
    return chunk * stages + stage


def _in_flight_cap(schedule: str, stages: int, stage: int, chunks: int) -> int:
    """Forwards a stage may run ahead of their backwards (activations kept), as the 1F1B family bounds memory:
    1F1B's ``stages - stage``, the interleaved warm-up's, and ZB-V's 1F1B-like peak (``2 stages`` chunks)."""
    if schedule in V_SHAPED:
        return 2 * stages
    if chunks == 1:
        return stages - stage
    return (stages - stage - 1) * 2 + (chunks - 1) * stages + 1


@lru_cache(maxsize=32)
def zero_bubble(schedule: str, stages: int, microbatches: int, chunks: int) -> tuple[tuple[Task, ...], ...]:
    """Every stage's order under a zero-bubble schedule (``zb``: looped, ZB-H1 with one chunk; ``zbv``: V-shaped,
    two chunks), from a list schedule in unit time: at each tick each stage runs, of what its data allow, an "I"
    first (the previous stage waits for it), else an "F" while its forwards in flight and its weights' gradients
    put off are each under the cap (deepest chunk first), else a "W" (a bubble filled, or the oldest put off),
    else nothing: the last stage runs each "W" right after its "I", the first puts off the most (ZB-H1). Each
    stage runs a chunk's passes of one kind in micro-batch order. An order so made never deadlocks: every
    receive's send comes earlier in the unit-time run."""
    total = stages * chunks
    done: dict[tuple[str, int, int], int] = {}  # (phase, micro-batch, global chunk) -> tick it ended
    nxt = {(p, g): 0 for p in "FI" for g in range(total)}  # next micro-batch of each kind per chunk
    orders: list[list[Task]] = [[] for _ in range(stages)]
    in_flight = [0] * stages
    put_off: list[deque[tuple[int, int]]] = [
        deque() for _ in range(stages)
    ]  # weights' gradients, oldest first
    caps = [_in_flight_cap(schedule, stages, s, chunks) for s in range(stages)]
    mine = [[chunk_of(schedule, stages, s, c) for c in range(chunks)] for s in range(stages)]
    local = {g: c for held in mine for c, g in enumerate(held)}  # a chunk's place on its stage
    left, tick = 3 * total * microbatches, 0

    def ended(key: tuple[str, int, int]) -> bool:
        return done.get(key, tick + 1) <= tick

    while left:
        ran = []
        for s in range(stages):
            pick = None
            for g in sorted(mine[s]):
                mb = nxt[("I", g)]
                if mb < microbatches and ended(("F", mb, g)) and (g == total - 1 or ended(("I", mb, g + 1))):
                    pick = ("I", mb, g)
                    break
            if pick is None and len(put_off[s]) < caps[s] and in_flight[s] < caps[s]:
                for g in sorted(mine[s], reverse=True):
                    mb = nxt[("F", g)]
                    if mb < microbatches and (g == 0 or ended(("F", mb, g - 1))):
                        pick = ("F", mb, g)
                        break
            if pick is None and put_off[s]:
                pick = ("W", *put_off[s].popleft())
            if pick is not None:
                ran.append((s, pick))
        if not ran and tick > 4 * total * microbatches + 4 * total:
            raise RuntimeError(
                f"the {schedule} schedule of {stages} stages x {chunks} chunks does not progress"
            )
        for s, (phase, mb, g) in ran:
            done[(phase, mb, g)] = tick + 1
            if phase != "W":
                nxt[(phase, g)] += 1
            in_flight[s] += {"F": 1, "I": -1, "W": 0}[phase]
            if phase == "I":
                put_off[s].append((mb, g))
            orders[s].append((phase, mb, local[g]))
            left -= 1
        tick += 1
    return tuple(tuple(o) for o in orders)


def order(schedule: str, stages: int, stage: int, microbatches: int, chunks: int = 1) -> list[Task]:
    """The task order of ``stage`` under ``schedule`` (gpipe, 1f1b, interleaved, zb, zbv)."""
    if schedule == "gpipe":
        return gpipe(stages, stage, microbatches)
    if schedule == "interleaved":
        return interleaved(stages, stage, microbatches, chunks)
    if schedule in ZERO_BUBBLE:
        return list(zero_bubble(schedule, stages, microbatches, chunks)[stage])
    return one_f_one_b(stages, stage, microbatches)
