"""Parsing a job's ranks on a Dask distributed cluster: ``paradiag ingest FOLDER --dask ADDRESS``.

One task per source, each :func:`paradiag.parse_worker.parse_in_worker` (the parse and the per-rank part of the
analysis, the same function the local pool runs): the worker writes the rank's Parquet parts straight into the
ingest's temporary folder and sends back only the small result (metadata, steps, groups, the collectives used
for clock alignment). The client then aligns, reduces the analysis and renames the folder into place, as a local
ingest does: so the temporary folder, and therefore the cache, must be on storage every worker mounts at the same
path (NFS, Lustre, a shared volume), and so must the trace folder; both are checked before any task is sent.
A cache at a URL (``s3://…``, paradiag.remote) lifts the first condition: each worker parses into a scratch
folder of its own and uploads the rank's files to the cache's new generation; the client downloads them (one
batch) for the reduce, and every worker is first checked to reach the store.

A task that raises (a storage error) is retried once by the scheduler, and so is a task whose worker died (for
``local:N``; a cluster of one's own follows its ``distributed.scheduler.allowed-failures``, 3 by default);
failing again, its source becomes a :class:`~paradiag.job.Problem` naming it, its partial files are removed
and the rest of the job loads. A parser's verdict on a broken file is not retried: parsing it again says the same.

``dask`` and ``distributed`` are an optional extra (``pip install 'paradiag[dask]'``), imported only here.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from paradiag import remote
from paradiag.cache import JobError
from paradiag.discover import Source
from paradiag.parse_worker import Parsed, ProgressCallback, failed_parse, largest_first, parse_in_worker

if TYPE_CHECKING:
    from distributed import Client

LOCAL = re.compile(r"^local:(?P<workers>[0-9]+)$")
ADDRESS = re.compile(r"^[a-z][a-z0-9+.-]*://\S+$")  # tcp://host:8786, tls://..., ws://...
CONNECT_TIMEOUT_S = 30
WORKER_TIMEOUT_S = 60  # how long a scheduler may have no worker before the ingest gives up
RETRIES = 1  # as a local ingest's (paradiag.pool.RETRIES)


def check_address(spec: str) -> str:
    """``spec`` if it names a cluster (``local:N`` with N >= 1, or a scheduler address), else a JobError."""
    local = LOCAL.match(spec)
    if (local and int(local["workers"]) >= 1) or (not local and ADDRESS.match(spec)):
        return spec
    raise JobError(
        f"--dask {spec!r}: expected a scheduler address (tcp://HOST:8786) or local:N (N worker processes)"
    )


@contextlib.contextmanager
def connect(spec: str) -> Iterator[Client]:
    """A client of the cluster ``spec`` names; ``local:N`` starts (and afterwards stops) N worker processes."""
    check_address(spec)
    try:
        import dask
        from distributed import Client, LocalCluster
    except ImportError:
        raise JobError(
            "--dask needs Dask: install paradiag's dask extra (pip install 'paradiag[dask]')"
        ) from None
    local = LOCAL.match(spec)
    if local:
        # One thread per worker: parsing holds the GIL, so threads would only share one core. The scheduler runs
        # here: a rank whose worker dies is tried on another once, as a rank whose task raises (not 3 times).
        with (
            dask.config.set({"distributed.scheduler.allowed-failures": RETRIES}),
            LocalCluster(
                n_workers=int(local["workers"]), threads_per_worker=1, processes=True, dashboard_address=":0"
            ) as cluster,
            Client(cluster) as client,
        ):
            yield client
        return
    try:
        client = Client(spec, timeout=CONNECT_TIMEOUT_S)
    except (OSError, TimeoutError) as exc:
        raise JobError(f"--dask {spec}: cannot reach the Dask scheduler ({exc})") from None
    except ValueError as exc:  # a scheme Dask does not know, a port that is not a number
        raise JobError(f"--dask {spec}: not a scheduler address Dask can use ({exc})") from None
    except Exception as exc:  # distributed's own failures (its event loop not starting on a loaded machine)
        raise JobError(
            f"--dask {spec}: the Dask client did not start ({type(exc).__name__}: {exc})"
        ) from None
    with client:
        yield client


def parse_all(
    spec: str,
    sources: list[Source],
    root: Path,
    tmp: Path,
    progress: ProgressCallback | None,
    upload: remote.Upload | None = None,
) -> list[Parsed]:
    """Parse ``sources`` on the cluster ``spec``, writing into ``tmp`` (or, with ``upload``, into the workers'
    own scratch folders, uploaded to the cache's URL and downloaded here); results in the order of ``sources``."""
    tmp = tmp.resolve()  # the workers' working folder is not ours
    with connect(spec) as client:
        _check_workers(client, spec, root, tmp, upload)
        parsed = _run(client, sources, root, tmp, progress, upload)
    if upload is not None:
        remote.get_files(upload, [f for p in parsed for f in p.uploaded], tmp)
    return parsed


def _sees(*paths: str) -> list[str]:
    """The ``paths`` this worker cannot see (runs on each worker)."""
    return [p for p in paths if not Path(p).exists()]


def _check_workers(
    client: Client, spec: str, root: Path, tmp: Path, upload: remote.Upload | None = None
) -> None:
    """At least one worker, and every worker sees the trace folder and the temporary cache folder (or, for a
    cache at a URL, reaches its store)."""
    try:
        client.wait_for_workers(1, timeout=WORKER_TIMEOUT_S)
    except TimeoutError:
        raise JobError(f"--dask {spec}: no worker joined the scheduler within {WORKER_TIMEOUT_S} s") from None
    if upload is not None:
        cut = {worker: why for worker, why in client.run(remote.worker_check, upload.url).items() if why}
        if cut:
            worker, why = sorted(cut.items())[0]
            raise JobError(
                f"--dask {spec}: worker {worker} (and {len(cut) - 1} more) cannot use the cache: {why}"
            )
    seen = (str(root),) if upload is not None else (str(root), str(tmp))
    blind = {worker: missing for worker, missing in client.run(_sees, *seen).items() if missing}
    if blind:
        worker, missing = sorted(blind.items())[0]
        raise JobError(
            f"--dask {spec}: worker {worker} (and {len(blind) - 1} more) cannot see {missing[0]}: the trace folder and"
            " the cache must be on storage every worker mounts at the same path (give --cache a shared path, or a URL)"
        )


def _run(
    client: Client,
    sources: list[Source],
    root: Path,
    tmp: Path,
    progress: ProgressCallback | None,
    upload: remote.Upload | None,
) -> list[Parsed]:
    from distributed import as_completed

    results: list[Parsed | None] = [None] * len(sources)
    futures: dict[Any, int] = {}
    order = largest_first(sources)
    for priority, i in enumerate(reversed(order)):  # the scheduler runs higher priorities first
        out = (
            None if upload is not None else tmp
        )  # writing to a URL, each worker parses into a folder of its own
        futures[
            client.submit(
                parse_in_worker,
                sources[i],
                root,
                out,
                i,
                upload,
                retries=RETRIES,
                pure=False,
                priority=priority,
            )
        ] = i
    try:
        for done, future in enumerate(as_completed(futures), start=1):
            i = futures[future]
            results[i] = (
                future.result()
                if future.status == "finished"
                else _failed(sources[i], root, tmp, i, future.exception())
            )
            if progress:
                progress(done, len(sources), results[i].result.source)  # type: ignore[union-attr]
    finally:  # on an interrupt, no worker goes on writing into a folder that is about to be removed
        client.cancel(list(futures))
    return [r for r in results if r is not None]


def _failed(source: Source, root: Path, tmp: Path, index: int, exc: BaseException | None) -> Parsed:
    """A source whose task failed twice: its partial files removed, its error the exception's."""
    why = f"{type(exc).__name__}: {exc}" if exc is not None else "cancelled"
    return failed_parse(
        source,
        root,
        tmp,
        index,
        f"its task failed on the Dask cluster twice (retried once); last error: {why}",
    )
