"""The cache of a job on disk, below everything that reads or writes one: its format and versions, where it lives,
the folders of its profiling windows, whether it is current (its source files unchanged), the scratch folders an
ingest builds it in (named by host and process, so that a later ingest knows a killed one's), the atomic move
into place, and the error a job that cannot be opened raises.

Layout (one folder per job)::

    manifest.json             written last: source files (size, mtime, hash), versions, sources, problems
    ranks.parquet             one row per rank, with the clock offset applied on load
    steps.parquet             per rank and step, on the aligned clock
    groups.parquet            communication groups
    events/part-NNNNN.parquet one file per rank, rows sorted by start time (rank's own clock)
    extra/<table>/part-NNNNN.parquet   format-specific tables (e.g. NPU link traffic)
    analysis/<table>/part-NNNNN.arrow  the per-rank part of the analysis (diagnose.rank_tables), computed where
                              the rank was parsed (by the analysis version the manifest names), Arrow IPC files
    diagnosis/                the analysis of the job (paradiag.analysis.diagnosis_types), computed at ingest
    strategy.parquet, .json   side inputs found beside the traces (paradiag.side_inputs)

A cache is built in a temporary sibling folder and renamed into place (:func:`move_into_place`), so a killed
ingest never leaves a folder that opens as a valid cache. Nothing is ever written inside the source folder.

Above it: ``paradiag.job`` (the read API), ``paradiag.ingest`` (writing one), ``paradiag.remote`` (a cache at a
URL) and ``paradiag.dataset`` (opening a job: which cache, current or not).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import socket
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from paradiag import schema
from paradiag.discover import Source, discover, file_hash

CACHE_FORMAT = "paradiag.cache/1"
PARSER_VERSION = (
    15  # bump when a parser (or the cache's layout) changes what is written: every cache is then rebuilt
)
MANIFEST = "manifest.json"


class JobError(Exception):
    """A job that cannot be opened at all (no readable trace, or --strict and a problem)."""


def default_cache_root() -> Path:
    env = os.environ.get("PARADIAG_CACHE_DIR")
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "paradiag"


def cache_dir_for(source: Path, cache_root: Path | None = None) -> Path:
    """Where the cache of a source folder lives by default: outside the folder, keyed by its absolute path."""
    resolved = source.resolve()
    digest = hashlib.sha256(str(resolved).encode()).hexdigest()[:16]
    return (cache_root or default_cache_root()) / f"{resolved.name}-{digest}"


def window_cache(cache: Path, window: int | None) -> Path:
    """The cache folder of profiling window ``window`` of a job whose cache is ``cache``: ``cache`` itself for the
    default (the latest window), a sibling ``<cache>.window<N>`` for another, so that each window is parsed once
    and switching windows reparses none (paradiag.windows)."""
    name = _WINDOW_SUFFIX.sub("", cache.name)
    return cache.with_name(name if window is None else f"{name}.window{window}")


_WINDOW_SUFFIX = re.compile(r"\.window\d+$")


def window_url(url: str, window: int | None) -> str:
    """The cache URL of profiling window ``window`` of a job whose cache is at ``url`` (as :func:`window_cache`)."""
    base = _WINDOW_SUFFIX.sub("", url.rstrip("/"))
    return base if window is None else f"{base}.window{window}"


def cached_window(manifest: dict[str, Any]) -> tuple[int | None, int | None]:
    """(the window a cache holds, the window it was asked for: None for the latest)."""
    w = manifest.get("window") or {}
    index, asked = w.get("index"), w.get("asked")
    return (index if isinstance(index, int) else None), (asked if isinstance(asked, int) else None)


def is_cache(path: Path) -> bool:
    manifest = path / MANIFEST
    if not manifest.is_file():
        return False
    try:
        return json.loads(manifest.read_text()).get("format") == CACHE_FORMAT
    except (OSError, ValueError):
        return False


HOST = re.sub(r"[^A-Za-z0-9.-]", "_", socket.gethostname()) or "host"
SCRATCH = re.compile(r"^\..+\.(?:tmp|old)-(?P<host>[A-Za-z0-9._-]+)-(?P<pid>\d+)-[0-9a-f]{8}$")


def scratch_name(cache: Path, kind: str) -> str:
    """A hidden sibling of the cache, named by host and pid so that a later ingest knows when it is stale."""
    return f".{cache.name}.{kind}-{HOST}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


def remove_stale(folder: Path) -> list[Path]:
    """Remove the scratch folders of ingests on this host whose process is gone (killed mid-way); return them."""
    removed = []
    with contextlib.suppress(OSError):
        for entry in folder.iterdir():
            match = SCRATCH.match(entry.name)
            if match and match["host"] == HOST and not alive(int(match["pid"])) and entry.is_dir():
                shutil.rmtree(entry, ignore_errors=True)
                removed.append(entry)
    return removed


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, owned by another user
        return True
    return True


def holds(manifest: dict[str, Any], window: int | None) -> bool:
    """Whether a cache of ``manifest`` is the one asked for ``window`` (None: the latest)."""
    index, asked = cached_window(manifest)
    return asked is None if window is None else window in (index, asked) or (index is None and window == 0)


def stat_entry(path: Path, root: Path) -> dict[str, Any]:
    st = path.stat()
    rel = str(path.relative_to(root)) if path != root else path.name
    return {"path": rel, "size": st.st_size, "mtime_ns": st.st_mtime_ns}


def source_files(root: Path, sources: Sequence[Source], others: Sequence[Path]) -> list[Path]:
    files = {f for s in sources for f in s.files} | set(others)
    return sorted(files)


def is_current(manifest: dict[str, Any], root: Path, verify: bool = False) -> bool:
    """Whether the cached source files are exactly those in ``root`` now. A file whose size and mtime are
    unchanged is taken as unchanged (hashed only when its mtime differs), unless ``verify`` hashes every file:
    a rewrite that keeps both (a copy with ``cp -p`` or ``rsync -t`` of other content) is only noticed then."""
    if manifest.get("format") != CACHE_FORMAT or manifest.get("parser_version") != PARSER_VERSION:
        return False
    if manifest.get("schema_version") != schema.SCHEMA_VERSION:
        return False
    sources, others = discover(root)
    now = source_files(root, sources, others)
    cached = {f["path"]: f for f in manifest.get("files", [])}
    if len(now) != len(cached):
        return False
    base = root if root.is_dir() else root.parent
    for path in now:
        entry = stat_entry(path, base)
        old = cached.get(entry["path"])
        if old is None or old["size"] != entry["size"]:
            return False
        if (verify or old["mtime_ns"] != entry["mtime_ns"]) and old["hash"] != file_hash(path):
            return False
    return True


def move_into_place(tmp: Path, cache: Path) -> None:
    """Move the finished cache into place; the old one (if any) is removed only after the new one is there."""
    old = None
    if cache.exists():
        old = cache.parent / scratch_name(cache, "old")
        cache.rename(old)
    tmp.rename(cache)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
