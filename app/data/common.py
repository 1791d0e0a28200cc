"""Small facts about a job that several views share: its Diagnosis, time origin, steps and step spans.

``diagnosis(job)`` is the views' one way to the analysis (layout, per-(rank, step) figures and z-scores, culprits,
findings, collective and send/recv tables, passes, stage and operator figures): computed at ingest and stored in
the job's cache, so the views filter and shape it and never derive it again.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any, TypeVar, cast

import pyarrow as pa
import pyarrow.compute as pc

from paradiag.analysis.diagnosis_types import Diagnosis
from paradiag.app import store
from paradiag.job import Job
from paradiag.side_inputs import parallel_strategy

DEVICE_KINDS = ("compute", "communication", "memory", "sync")
KEPT_JOBS = 8  # jobs whose Diagnosis (and tables shaped from it) a worker keeps in memory

T = TypeVar("T")


class Kept:
    """A worker's last ``size`` values by key, in memory, for all its threads (the least recently used go first).
    ``get(key, compute)`` computes outside the lock: two threads may both compute a value that is missing."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._values: OrderedDict[Any, Any] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: Any, compute: Callable[[], T]) -> T:
        with self._lock:
            if key in self._values:
                self._values.move_to_end(key)
                return cast(T, self._values[key])
        value = compute()
        with self._lock:
            self._values[key] = value
            while len(self._values) > self.size:
                self._values.popitem(last=False)
        return value


_kept = Kept(KEPT_JOBS * 2)  # the Diagnosis and the collectives table of each job


def per_job(kind: str, job: Job, compute: Callable[[], T]) -> T:
    """``compute()`` once per worker, job content and ``kind``, kept in memory for the last KEPT_JOBS jobs: for
    Arrow tables read from the cache, which a worker reads faster than it would unpickle them from the shared
    store."""
    return _kept.get((kind, str(job.cache_dir), job.content_hash), compute)


def diagnosis(job: Job) -> Diagnosis:
    """The job's :class:`Diagnosis`, read from its cache once per worker and job content."""
    return per_job("diagnosis", job, job.diagnosis)


def strategy(job: Job) -> dict[str, Any]:
    """The MindSpore parallel strategy read at ingest (``side_inputs.parallel_strategy``): ``files``, ``ops``
    (rank -> op rows), ``stage_of`` and ``problems``; it needs no source folder."""
    return store.memo("strategy", job, None, lambda: parallel_strategy(job.cache_dir))


def origin_ns(job: Job) -> int:
    """The job's time zero: the earliest step start (x axes show ms since then)."""
    value = pc.min(job.steps.column("start_ns")).as_py()
    return int(value) if value is not None else 0


def clock_window(job: Job, window: Sequence[float] | None) -> tuple[int, int] | None:
    """A selection's window (ms since the job's time zero, as the x axes show it) on the trace's clock (ns); None
    for none (the whole step)."""
    if not window:
        return None
    t0 = origin_ns(job)
    return t0 + int(window[0] * 1e6), t0 + int(window[1] * 1e6)


def steps_of(job: Job) -> list[int]:
    return sorted(set(job.steps.column("step").to_pylist()))


def step_span(job: Job, step: int, ranks: list[int] | None = None) -> tuple[int, int]:
    """[first start, last end] of a step over ``ranks`` (host span and device span together)."""
    steps = job.steps.filter(pc.equal(job.steps.column("step"), step))
    if ranks:
        steps = steps.filter(pc.is_in(steps.column("rank"), value_set=pa.array(ranks, pa.int32())))
    starts = [
        v
        for v in steps.column("start_ns").to_pylist() + steps.column("device_start_ns").to_pylist()
        if v is not None
    ]
    ends = [
        v
        for v in steps.column("end_ns").to_pylist() + steps.column("device_end_ns").to_pylist()
        if v is not None
    ]
    if not starts:
        return origin_ns(job), origin_ns(job) + 1
    return min(starts), max(ends)


def slowest_step(job: Job) -> int | None:
    """The step with the longest median step time: the default one to look at."""
    steps = job.steps
    if steps.num_rows == 0:
        return None
    dur = pc.subtract(steps.column("end_ns"), steps.column("start_ns"))
    table = (
        steps.select(["step"])
        .append_column("dur", dur)
        .group_by("step")
        .aggregate([("dur", "approximate_median")])
    )
    best = max(
        zip(table.column("dur_approximate_median").to_pylist(), table.column("step").to_pylist(), strict=True)
    )
    return int(best[1])


def read_events(
    job: Job,
    ranks: list[int] | None = None,
    start_ns: int | None = None,
    end_ns: int | None = None,
    columns: list[str] | None = None,
) -> pa.Table:
    """``job.events`` for the views. Parts of ranks with and without a clock offset can differ in the nullability
    of ``start_ns`` and then fail to concatenate; those are read one rank at a time and promoted."""
    try:
        return job.events(ranks=ranks, start_ns=start_ns, end_ns=end_ns, columns=columns)
    except pa.ArrowInvalid:
        parts = [
            job.events(ranks=[r], start_ns=start_ns, end_ns=end_ns, columns=columns)
            for r in (ranks if ranks is not None else job.rank_ids)
        ]
        return pa.concat_tables(parts, promote_options="permissive").unify_dictionaries()
