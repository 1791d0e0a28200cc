"""The local process pool that parses a job's sources (``paradiag.ingest``'s map when no Dask cluster is
given): its workers' life cycle (they die with the ingest, share the parent's imports), and the retries of a
parse whose worker died or whose storage failed.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import importlib
import os
import signal
import threading
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from multiprocessing import get_context
from multiprocessing.context import BaseContext
from pathlib import Path
from typing import Any

import pyarrow as pa

from paradiag import remote
from paradiag.cache import alive
from paradiag.discover import PARSER_MODULES, Source
from paradiag.parse_worker import (
    IN_PROCESS_BYTES,
    Parsed,
    ProgressCallback,
    failed_parse,
    largest_first,
    parse_and_upload,
    parse_in_worker,
)

_STARTED: Any = None  # in a worker process: per source, 1 once a worker of the pool began parsing it


def _worker_init(owner: int, started: Any) -> None:
    global _STARTED
    _STARTED = started
    # The objects inherited from the parent stay shared: a collection would write to every one of them and copy
    # their pages into this worker (about 30 MB for two workers).
    gc.freeze()
    # The system allocator hands memory back between slices; Arrow's default (mimalloc) kept ~20% more resident.
    pa.set_memory_pool(pa.system_memory_pool())
    _die_with(owner)


PR_SET_PDEATHSIG = 1


def _die_with(owner: int) -> None:
    """End this worker when the ingest process ``owner`` dies, even by SIGKILL: otherwise it blocks forever
    writing its result to a pipe nobody reads, holding its memory. Under fork, Linux kills the worker with its
    parent (prctl). Under forkserver the parent is the fork server, which outlives the ingest as long as a worker
    holds its liveness pipe; so a thread also polls the owner."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if not alive(owner):  # it died before the signal was armed
        os._exit(1)
    threading.Thread(target=_watch, args=(owner,), daemon=True).start()


def _watch(owner: int) -> None:
    while alive(owner):
        time.sleep(0.5)
    os._exit(1)


RETRIES = 1  # a parse that fails for another reason than its input (a storage error, a killed worker) runs once more


def parse_all(
    sources: list[Source],
    root: Path,
    tmp: Path,
    workers: int | None,
    progress: ProgressCallback | None,
    dask: str | None,
    upload: remote.Upload | None = None,
) -> list[Parsed]:
    if dask is not None:
        from paradiag import distributed

        return distributed.parse_all(dask, sources, root, tmp, progress, upload)
    total_bytes = sum(s.size() for s in sources)
    n_workers = workers if workers is not None else min(os.cpu_count() or 1, len(sources))
    results: list[Parsed | None] = [None] * len(sources)

    finished = iter(range(1, len(sources) + 1))

    def done(i: int, parsed: Parsed) -> None:
        results[i] = parsed
        if progress:
            progress(next(finished), len(sources), parsed.result.source)

    if n_workers <= 1 or len(sources) == 1 or total_bytes < IN_PROCESS_BYTES:
        for i, src in enumerate(sources):
            done(i, _parse_here(src, root, tmp, i, upload))
    else:
        _parse_in_pool(sources, root, tmp, n_workers, done, upload)
    return [r for r in results if r is not None]


def _parse_here(
    source: Source, root: Path, tmp: Path, index: int, upload: remote.Upload | None = None
) -> Parsed:
    """parse_rank in this process, run once more when writing the cache fails (a bad file never raises: its
    parse is a problem of its own); failing again, a problem naming the source."""
    for _ in range(RETRIES + 1):
        try:
            return parse_and_upload(source, root, tmp, index, upload)
        except OSError as exc:
            error: BaseException = exc
    return failed_parse(
        source, root, tmp, index, f"its parse failed twice (retried once); last error: {_why(error)}"
    )


def _parse_in_pool(
    sources: list[Source],
    root: Path,
    tmp: Path,
    workers: int,
    done: Callable[[int, Parsed], None],
    upload: remote.Upload | None = None,
) -> None:
    """Parse ``sources`` in local worker processes. A killed worker breaks its pool: the ranks that had not started
    go to a new pool, those it was parsing (and those whose parse raised an OSError) run once more, each alone in
    a pool of its own (so that a second death is that rank's own); failing again, a problem naming the source."""
    todo, failed = largest_first(sources), dict[int, BaseException]()
    while todo:
        left, failures = _pool_round(sources, root, tmp, workers, todo, done, upload)
        if len(left) == len(todo):  # the pool broke before it started any (a worker that cannot start)
            failures.update({i: BrokenProcessPool() for i in left})
            left = []
        todo = left
        failed.update(failures)
    for i, error in failed.items():
        left, failures = _pool_round(sources, root, tmp, 1, [i], done, upload)
        if left or failures:
            why = f"its parse failed twice (retried once); last error: {_why(failures.get(i, error))}"
            done(i, failed_parse(sources[i], root, tmp, i, why))


def _pool_round(
    sources: list[Source],
    root: Path,
    tmp: Path,
    workers: int,
    todo: list[int],
    done: Callable[[int, Parsed], None],
    upload: remote.Upload | None = None,
) -> tuple[list[int], dict[int, BaseException]]:
    """One pool over ``todo``: the sources it did not start (its worker killed, the pool broke) and those whose
    parse failed (source -> error)."""
    ctx = pool_context()
    started = ctx.RawArray("b", len(sources))
    not_started: list[int] = []
    failed: dict[int, BaseException] = {}
    with ProcessPoolExecutor(
        max_workers=workers, mp_context=ctx, initializer=_worker_init, initargs=(os.getpid(), started)
    ) as pool:
        futures = {pool.submit(_parse_tracked, sources[i], root, tmp, i, upload): i for i in todo}
        for future in as_completed(futures):
            i, error = futures[future], future.exception()
            if error is None:
                done(i, future.result())
            elif isinstance(error, BrokenProcessPool) and not started[i]:
                not_started.append(i)
            elif isinstance(error, BrokenProcessPool | OSError):
                failed[i] = error
            else:
                raise error
    return not_started, failed


# What a worker imports on its first rank besides the parsers: the per-rank analysis (parse_rank imports it) and
# Arrow's query engine (Table.group_by loads pyarrow.acero and pyarrow.dataset). Imported before the workers
# start, as the parsers are, so that they share them instead of each importing them (about 0.15 CPU-second per
# worker, and their objects then sit outside gc.freeze()). Under fork the parent, which needs them for the reduce
# anyway, imports them; under forkserver the fork server does.
WORKER_MODULES = ("paradiag.analysis.diagnose", "pyarrow.acero")


def pool_context() -> BaseContext:
    """fork shares the parent's imported modules with the workers (no extra process, least memory); from a
    threaded parent (the web app) forking is unsafe, so a forkserver starts the workers there (see _forkable)."""
    if _forkable():
        for name in WORKER_MODULES:
            importlib.import_module(name)
        return get_context("fork")
    ctx = get_context("forkserver")
    # pyarrow imports pandas, when installed, in any process that converts Python values (pa.array asks whether
    # they are pandas objects): imported once in the fork server, every worker shares it (+40 MB and 0.2
    # CPU-seconds per worker otherwise). A module that is not installed is skipped.
    ctx.set_forkserver_preload(["paradiag.discover", *PARSER_MODULES, *WORKER_MODULES, "pandas"])
    return ctx


def _forkable() -> bool:
    """No thread but the main one, or only fsspec's: its I/O thread and its event loop's executor threads
    (``asyncio_N``), which an ingest to a cache at a URL starts (paradiag.remote) and which wait idle between
    transfers. fsspec resets its loop and its file systems in a forked child (os.register_at_fork), so a fork is
    safe there; a forkserver would cost each worker its own import of the store's client (at 256 ranks to s3://:
    20 against 14 CPU-seconds, 410 against 290 MB, benchmarks/remote_cache.py)."""
    names = [t.name for t in threading.enumerate() if t is not threading.main_thread()]
    return all(n == "fsspecIO" or (n.startswith("asyncio_") and "fsspecIO" in names) for n in names)


def _parse_tracked(
    source: Source, root: Path, out_dir: Path, index: int, upload: remote.Upload | None = None
) -> Parsed:
    """parse_in_worker, marked as started (for the pool to know which ranks a killed worker took with it)."""
    _STARTED[index] = 1
    return parse_in_worker(source, root, out_dir, index, upload)


def _why(error: BaseException) -> str:
    if isinstance(error, BrokenProcessPool):
        return "its worker process died (killed, or out of memory)"
    return f"{type(error).__name__}: {error}"
