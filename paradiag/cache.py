"""The cache of a job on disk, below everything that reads or writes one: its format and versions, where it lives,
the folders of its profiling windows, the scratch folders an ingest builds it in (named by host and process, so
that a later ingest knows a killed one's), and the error a job that cannot be opened raises.

``paradiag.dataset`` (the read API and the ingest) and ``paradiag.remote`` (a cache at a URL) both stand on it.
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
from pathlib import Path
from typing import Any

CACHE_FORMAT = "paradiag.cache/1"
PARSER_VERSION = (
    8  # bump when a parser (or the cache's layout) changes what is written: every cache is then rebuilt
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
