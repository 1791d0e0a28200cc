"""Pipeline schedules: the order in which one stage runs forward and backward passes of its micro-batches.

Each entry is ``(phase, micro_batch, chunk)`` with phase "F" or "B"; ``chunk`` is the virtual stage (model
chunk) on this device, always 0 except for the interleaved schedule.
"""

from __future__ import annotations

Task = tuple[str, int, int]


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


def order(schedule: str, stages: int, stage: int, microbatches: int, chunks: int = 1) -> list[Task]:
    """The task order of ``stage`` under ``schedule`` (gpipe, 1f1b, interleaved)."""
    if schedule == "gpipe":
        return gpipe(stages, stage, microbatches)
    if schedule == "interleaved":
        return interleaved(stages, stage, microbatches, chunks)
    return one_f_one_b(stages, stage, microbatches)
