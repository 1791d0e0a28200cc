"""Which job a request means, and opening it.

A job is named by a token that any worker can resolve from disk alone: ``served`` (the folder given to
``paradiag serve``), ``sample:<name>`` (a bundled sample) or ``upload:<id>`` (an upload of the current user).
Opened jobs are kept per process only as a memo of what is on disk; losing it costs a re-open, never data.
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from pathlib import Path

import paradiag
from paradiag.app.config import Config
from paradiag.dataset import Job

SAFE_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")
_OPEN: OrderedDict[str, Job] = OrderedDict()
_LOCK = threading.Lock()
_KEEP = 8


class JobNotFound(LookupError):
    """The token names no job this user may open."""


def samples(config: Config) -> list[str]:
    """The bundled sample jobs (folders with a ground_truth.json)."""
    root = config.samples_dir
    if not root.is_dir():
        return []
    return sorted(p.name for p in root.iterdir() if (p / "ground_truth.json").is_file())


def user_upload_root(config: Config, user: str) -> Path:
    if not SAFE_NAME.match(user):
        raise JobNotFound(f"bad user id {user!r}")
    return config.upload_dir / user


def path_of(token: str, config: Config, user: str) -> Path:
    """The folder (or cache) a job token names; raises JobNotFound when it names nothing this user may see."""
    kind, _, name = token.partition(":")
    if kind == "served" and config.job:
        return Path(config.job)
    if kind == "sample" and SAFE_NAME.match(name) and name in samples(config):
        return config.samples_dir / name
    if kind == "upload" and SAFE_NAME.match(name):
        folder = user_upload_root(config, user) / name / "files"
        if folder.is_dir():
            return folder
    raise JobNotFound(f"no job {token!r}")


def open_token(token: str, config: Config, user: str) -> Job:
    return open_path(path_of(token, config, user))


def open_path(path: Path) -> Job:
    key = str(path.resolve())
    with _LOCK:
        job = _OPEN.get(key)
        if job is not None:
            _OPEN.move_to_end(key)
            return job
    job = paradiag.open(path)
    with _LOCK:
        _OPEN[key] = job
        while len(_OPEN) > _KEEP:
            _OPEN.popitem(last=False)
    return job


def forget(path: Path) -> None:
    with _LOCK:
        _OPEN.pop(str(path.resolve()), None)
