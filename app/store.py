"""Computed aggregates, shared by every worker through Flask-Caching (filesystem), keyed by the job's content hash
and paradiag's version (an upgrade computes afresh instead of serving what the old code made)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from typing import Any, TypeVar

from flask import Flask
from flask_caching import Cache

from paradiag import __version__
from paradiag.analysis.diagnosis_types import analysis_version
from paradiag.app.config import Config, private_dir

T = TypeVar("T")
cache = Cache()
_bound: list[Flask] = []


def init_cache(server: Flask, config: Config) -> None:
    private_dir(config.app_cache_dir)
    cache.init_app(
        server,
        config={
            "CACHE_TYPE": "FileSystemCache",
            "CACHE_DIR": str(config.app_cache_dir / "aggregates"),
            "CACHE_DEFAULT_TIMEOUT": config.cache_timeout_s,
            "CACHE_THRESHOLD": 2000,
        },
    )
    cache.app = server
    _bound[:] = [server]


def key_of(kind: str, content_hash: str, params: Any) -> str:
    """The key of an aggregate: also of paradiag's and the analysis version, as aggregates are shaped from the
    job's Diagnosis by this version's code."""
    blob = json.dumps(params, sort_keys=True, default=str)
    return f"paradiag:{__version__}:{kind}:{content_hash}:{analysis_version()}:{hashlib.sha256(blob.encode()).hexdigest()[:24]}"


def memo(kind: str, content_hash: str, params: Any, compute: Callable[[], T]) -> T:
    """``compute()`` once per (kind, job content, params) for all workers; computed directly without an app."""
    if not _bound:
        return compute()
    key = key_of(kind, content_hash, params)
    value = cache.get(key)
    if value is None:
        value = compute()
        cache.set(key, value)
    return value
