"""Which job a request means, and opening it.

A job is named by a token that any worker can resolve from disk alone: ``served`` (the folder given to
``paradiag serve``; ``served:1``, ``served:2``, ... the further folders it was given), ``sample:<name>`` (a bundled sample) or ``upload:<id>`` (an upload of the current user whose
parse has finished). Opened jobs are kept per process only as a memo of what is on disk; losing it costs a
re-open, never data.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import paradiag
from paradiag.app.config import Config
from paradiag.cache import JobError, cache_dir_for, window_cache
from paradiag.job import Job, load_cache
from paradiag.remote import is_url

SAFE_NAME = re.compile(r"^[A-Za-z0-9_-][A-Za-z0-9_.-]{0,127}$")  # no leading dot: never "." or ".."
_OPEN: OrderedDict[tuple[str, int | None], Job] = OrderedDict()  # (path, profiling window) -> the open job
WINDOW_MARK = "@w"  # a job token's profiling window: ``sample:name@w0`` (none: the latest)
_LOCK = threading.Lock()
_KEEP = 8
log = logging.getLogger("paradiag.app.jobs")


class JobNotFound(LookupError):
    """The token names no job this user may open."""


def samples(config: Config) -> list[str]:
    """The bundled sample jobs (folders with a ground_truth.json)."""
    root = config.samples_dir
    if not root.is_dir():
        return []
    return sorted(p.name for p in root.iterdir() if (p / "ground_truth.json").is_file())


def served(config: Config) -> list[tuple[str, str]]:
    """(token, shown name) of every job folder or cache the server was started on: ``served`` first, then
    ``served:1``, ``served:2``, ... for the further ones."""
    paths = ([config.job] if config.job else []) + list(config.more_jobs)
    tokens = (
        ["served"] + [f"served:{i}" for i in range(1, len(config.more_jobs) + 1)]
        if config.job
        else [f"served:{i}" for i in range(1, len(paths) + 1)]
    )
    return [(t, p.rstrip("/").rsplit("/", 1)[-1] or p) for t, p in zip(tokens, paths, strict=True)]


def user_upload_root(config: Config, user: str) -> Path:
    """The user's own uploads folder: named after the user, or after a hash of a name that is no safe folder
    name (sign-in names come from the users file, which may hold "j. doe" or "j@team")."""
    if not user:
        raise JobNotFound("no user")
    folder = user if SAFE_NAME.match(user) else "user-" + hashlib.sha256(user.encode()).hexdigest()[:24]
    return config.upload_dir / folder


def read_status(upload: Path) -> dict[str, Any]:
    """An upload's ``status.json`` (any worker wrote it); ``{"state": "unknown"}`` when there is none."""
    try:
        return dict(json.loads((upload / "status.json").read_text()))
    except (OSError, ValueError):
        return {"state": "unknown"}


def path_of(token: str, config: Config, user: str) -> Path | str:
    """The folder (or cache) a job token names; raises JobNotFound when it names nothing this user may see.
    An upload counts only once its parse is done: opening it earlier would parse it here, in the web worker,
    without the limits its own parse process runs under."""
    token, _ = split_window(token)
    kind, _, name = token.partition(":")
    served_path = config.job if kind == "served" and not name else None
    if kind == "served" and name.isdigit() and len(name) <= 4 and 1 <= int(name) <= len(config.more_jobs):
        served_path = config.more_jobs[int(name) - 1]
    if served_path:
        return served_path if is_url(served_path) else Path(served_path)  # a cache's URL stays a string
    if kind == "sample" and SAFE_NAME.match(name) and name in samples(config):
        return config.samples_dir / name
    if kind == "upload" and SAFE_NAME.match(name):
        upload = user_upload_root(config, user) / name
        if read_status(upload).get("state") == "done" and (upload / "files").is_dir():
            return upload / "files"
    raise JobNotFound(f"no job {token!r}")


def open_token(token: str, config: Config, user: str) -> Job:
    path = path_of(token, config, user)
    window = split_window(token)[1]
    if token.startswith("upload:") and isinstance(path, Path):
        return _remember((_key(path), window), path.parent.name, lambda: open_upload(path.parent, window))
    return open_path(path, window)


def split_window(token: str) -> tuple[str, int | None]:
    """(the job part of a token, its profiling window: None for the latest)."""
    job, mark, number = token.rpartition(WINDOW_MARK)
    if mark and number.isdigit() and len(number) <= 6:
        return job, int(number)
    return token, None


def with_window(token: str, window: int | None) -> str:
    """The token of another profiling window of the same job."""
    job = split_window(token)[0]
    return job if window is None else f"{job}{WINDOW_MARK}{window}"


def upload_cache(upload: Path, window: int | None = None) -> Path:
    """Where the parse of ``upload`` keeps its cache (of profiling ``window``, None: the latest): under the
    server's cache root (the same for every worker and the parse process), never inside an upload folder."""
    return window_cache(cache_dir_for(upload / "files"), window)


def open_upload(upload: Path, window: int | None = None) -> Job:
    """The job of a parsed upload, from the cache its limited parse process wrote, read as it is
    (job.load_cache): never parsed here, whatever the upload's files hold or claim."""
    try:
        return load_cache(upload_cache(upload, window), source=upload / "files")
    except JobError as exc:
        log.warning("upload %s (window %s): its cache cannot be opened: %s", upload.name, window, exc)
        what = f"upload:{upload.name}" + ("" if window is None else f" window {window}")
        raise JobNotFound(
            f"{what} (its parse is gone, was made by another version, or this window was not parsed: upload it again)"
        ) from None


def _key(path: Path | str) -> str:
    return path if isinstance(path, str) else str(path.resolve())


def open_path(path: Path | str, window: int | None = None) -> Job:
    shown = path if isinstance(path, str) else path.name
    return _remember((_key(path), window), shown, lambda: paradiag.open(path, window=window))


def _remember(key: tuple[str, int | None], shown: str, opener: Callable[[], Job]) -> Job:
    with _LOCK:
        job = _OPEN.get(key)
        if job is not None:
            _OPEN.move_to_end(key)
            return job
    start = time.perf_counter()
    job = opener()
    log.info(
        "opened job %s (%d ranks) in %.0f ms",
        job.url or shown,
        len(job.rank_ids),
        1000 * (time.perf_counter() - start),
    )
    with _LOCK:
        _OPEN[key] = job
        while len(_OPEN) > _KEEP:
            _OPEN.popitem(last=False)
    return job


def forget(path: Path | str) -> None:
    with _LOCK:
        for key in [k for k in _OPEN if k[0] == _key(path)]:
            _OPEN.pop(key)
