"""Opening a job: the one place every front end (the library's ``paradiag.open``, the CLI, the snapshot, the
export, the web app) turns a trace folder, a trace file, a cache folder or a cache's URL into a
:class:`~paradiag.job.Job`. The cache is read when it is current (paradiag.cache), otherwise the source is
ingested again (paradiag.ingest); which source a cache may be rebuilt from is :func:`followed_source`'s rule.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from paradiag import remote
from paradiag.cache import JobError, cache_dir_for, cached_window, holds, is_cache, is_current
from paradiag.ingest import ingest
from paradiag.job import Job
from paradiag.parse_worker import ProgressCallback
from paradiag.place import LocalPlace, Place, place_of


def followed_source(job: Job, cache_dir: Path) -> Path | None:
    """The source folder of the cache ``cache_dir`` that opening it by its path may parse again when changed, or
    None. The rule: a cache's ``source`` is only ever followed when its caller opened the cache folder itself
    (the command line, the library: the caller reads the source with its own rights, for itself), never for a
    folder opened as a source (``as_source``: the team server's uploads) nor by :func:`load_cache`; and only
    when it names an existing folder or file by an absolute path that neither is nor holds nor lies inside the
    cache folder (an ingest never writes a cache into its source)."""
    text = job.source
    if not text or not os.path.isabs(text) or "\0" in text:
        return None
    origin = Path(text)
    if not origin.exists():
        return None
    here, there = cache_dir.resolve(), origin.resolve()
    if here == there or here in there.parents or there in here.parents:
        return None
    return origin


def open_job(
    path: str | os.PathLike[str],
    cache_dir: str | os.PathLike[str] | None = None,
    *,
    strict: bool = False,
    workers: int | None = None,
    refresh: bool = False,
    progress: ProgressCallback | None = None,
    verify: bool = False,
    dask: str | None = None,
    window: int | None = None,
    as_source: bool = False,
) -> Job:
    """Open a trace folder (or one trace file, or a cache folder): read the cache when it is current,
    otherwise parse and cache. ``strict`` turns any problem with a source into a :class:`JobError`;
    ``verify`` hashes every source file to decide whether the cache is current (see :func:`paradiag.cache.is_current`);
    ``dask`` parses on a Dask cluster (see :func:`paradiag.ingest.ingest`). ``path`` may also be the URL of a cache, and
    ``cache_dir`` one to read or write (``s3://bucket/job``; paradiag.remote). ``window``: the profiling window
    to open (:attr:`Job.windows`; default the latest), each cached on its own (:func:`window_cache`).
    ``as_source``: ``path`` is a folder of traces, never taken for a cache whatever it holds (a manifest in it is
    no trace and is left out), its cache ``cache_dir`` or the default one (how the team server parses an upload)."""
    if window is not None and (isinstance(window, bool) or not isinstance(window, int) or window < 0):
        raise JobError(f"window {window!r}: a window is a number from 0 (see Job.windows)")
    options: dict[str, Any] = {
        "strict": strict,
        "workers": workers,
        "progress": progress,
        "dask": dask,
        "window": window,
    }
    if remote.is_url(path) and cache_dir is not None:
        raise JobError(
            f"{remote.shown(str(path))}: a cache's URL is opened as it is: give no other cache (-o {cache_dir})"
        )
    if remote.is_url(path) or (not as_source and Path(path).is_dir() and is_cache(Path(path))):
        return _open_cache(place_of(path), refresh, verify, options)
    target = Path(path)
    if not target.exists():
        raise JobError(f"{target}: no such file or folder")
    home = place_of(cache_dir) if cache_dir is not None else LocalPlace(cache_dir_for(target))
    return _open_source(target, home, refresh, verify, options)


def _open_cache(place: Place, refresh: bool, verify: bool, options: dict[str, Any]) -> Job:
    """A cache opened itself (its folder or its URL): as it is, or ingested again into the same place when its
    source folder is here (:func:`followed_source`) and changed; another window's cache beside it."""
    job = place.open()
    origin = followed_source(job, job.cache_dir)
    window = options["window"]
    if window is not None and not holds(
        job.manifest, window
    ):  # another window: its own cache beside this one
        if origin is None:
            raise JobError(
                f"{place.name}: this cache holds window {job.window} of {job.source!r}, which is not here to read window {window} from"
            )
        return _open_source(origin, place, refresh, verify, options)
    if refresh and origin is None:
        raise JobError(
            f"{place.name}: cannot be parsed again: its source {job.source!r} is no folder it may be rebuilt from (see followed_source)"
        )
    if origin is not None and (
        refresh or not is_current(job.manifest, origin, verify)
    ):  # the window it was made for
        return ingest(origin, place, **{**options, "window": cached_window(job.manifest)[1]})
    return _check_strict(job, options["strict"])


def _open_source(target: Path, home: Place, refresh: bool, verify: bool, options: dict[str, Any]) -> Job:
    """A trace folder whose cache is at ``home`` (the default window's; another window's lies beside it): the
    cache when it is that folder's, of the window asked and current, otherwise the folder ingested into it."""
    window = options["window"]
    caches = [(home.window(window), lambda m: holds(m, window))]
    if window is not None:  # the default cache may hold that window already (the latest, asked by its number)
        caches.insert(0, (home, lambda m: cached_window(m)[0] == window))
    if not refresh:
        for place, fits in caches:
            manifest = place.peek()
            if (
                manifest is not None
                and manifest.get("source") == str(target.resolve())
                and fits(manifest)
                and is_current(manifest, target, verify)
            ):
                return _check_strict(place.open(), options["strict"])
    return ingest(target, caches[-1][0], **options)


def _check_strict(job: Job, strict: bool) -> Job:
    if strict and job.problems:
        raise JobError("; ".join(str(p) for p in job.problems))
    return job
