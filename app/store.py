"""Computed aggregates, shared by every worker through files, keyed by the job (as the server opened it) and
paradiag's version (an upgrade computes afresh instead of serving what the old code made).

Nothing read back can run code: an entry is data only (JSON for plain values, Arrow IPC for tables, NumPy's
``.npy`` without pickles for arrays; see :func:`encode`), and it is used only when its HMAC-SHA256, keyed by the
server's secret key and bound to the entry's key, is right: a planted or altered file (or one moved to another
key's name) is a miss, computed again. The folder (``PARADIAG_APP_CACHE_DIR/aggregates``) lies outside every
upload folder; entries are written to a temporary file and renamed into place (readers never see half of
one), at most ``MAX_ENTRIES`` of them (the oldest go first) and ``MAX_ENTRY_BYTES`` each, for
``PARADIAG_CACHE_TIMEOUT`` seconds.

A job's aggregates are keyed by what the server knows of it, never by what a file claims: the content hash the
server's own ingest computed, and the folder of the cache it opened (an upload's cache is its own, under the
server's cache root, named after the user's upload folder), so one user's job never stands in for another's.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import io
import json
import logging
import os
import re
import secrets
import stat
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np
import pyarrow as pa

from paradiag import __version__
from paradiag.analysis.diagnosis_types import analysis_version
from paradiag.app.config import Config, private_dir
from paradiag.dataset import default_cache_root

if TYPE_CHECKING:
    from flask import Flask

    from paradiag.dataset import Job

T = TypeVar("T")
MAX_ENTRIES = 2000
MAX_ENTRY_BYTES = 512 << 20
MAGIC = b"paradiag-aggregate/1\n"
_HEAD = struct.Struct(">dQ")  # expiry (Unix seconds), length of the JSON document
_LEN = struct.Struct(">Q")
_ENTRY = re.compile(r"^[0-9a-f]{64}$")
log = logging.getLogger("paradiag.app.store")


class Unstorable(TypeError):
    """A value that has no data-only encoding (it is then computed again each time, never pickled)."""


@dataclass
class _Store:
    folder: Path
    mac_key: bytes
    timeout_s: int


_bound: list[_Store] = []


def init_cache(server: Flask | None, config: Config) -> None:
    """Keep aggregates under ``config.app_cache_dir``, authenticated with a key derived from the server's
    secret key. Refuses (ValueError) a cache folder inside the upload folder, or the other way round."""
    folder = config.app_cache_dir / "aggregates"
    _apart(config.app_cache_dir, config.upload_dir)
    jobs_root, uploads = default_cache_root().resolve(), config.upload_dir.resolve()
    if jobs_root == uploads or uploads in jobs_root.parents:  # it may hold the uploads (the default), not lie in them
        raise ValueError(f"PARADIAG_CACHE_DIR ({jobs_root}) must not lie inside PARADIAG_UPLOAD_DIR ({uploads})")
    private_dir(folder)
    secret = config.secret_key.encode() if config.secret_key else secrets.token_bytes(32)  # no key: this process only
    mac_key = hmac.new(secret, b"paradiag aggregates", hashlib.sha256).digest()
    _bound[:] = [_Store(folder, mac_key, config.cache_timeout_s)]
    for entry in folder.iterdir():  # another format's entries (Flask-Caching's pickles) are never read: removed
        if not _ENTRY.match(entry.name) and not entry.name.startswith("."):
            with contextlib.suppress(OSError):
                entry.unlink()


def _apart(cache: Path, uploads: Path) -> None:
    a, b = cache.resolve(), uploads.resolve()
    if a == b or a in b.parents or b in a.parents:
        raise ValueError(f"PARADIAG_APP_CACHE_DIR ({cache}) and PARADIAG_UPLOAD_DIR ({uploads}) must not lie one inside the other")


def scope(job: Job) -> str:
    """What identifies ``job`` for its aggregates: the content hash its server-made cache holds, and where that
    cache is (an upload's own, a sample's shared one, the served job's)."""
    where = [job.content_hash, str(job.cache_dir.resolve()), job.url or ""]
    return hashlib.sha256(json.dumps(where).encode()).hexdigest()[:32]


def key_of(kind: str, job_scope: str, params: Any) -> str:
    """The key of an aggregate: also of paradiag's and the analysis version, as aggregates are shaped from the
    job's Diagnosis by this version's code."""
    blob = json.dumps(params, sort_keys=True, default=str)
    return f"paradiag:{__version__}:{kind}:{job_scope}:{analysis_version()}:{hashlib.sha256(blob.encode()).hexdigest()[:24]}"


def memo(kind: str, job: Job, params: Any, compute: Callable[[], T]) -> T:
    """``compute()`` once per (kind, job, params) for all workers; computed directly without a store."""
    if not _bound:
        return compute()
    store = _bound[0]
    key = key_of(kind, scope(job), params)
    found = get(store, key)
    if found is not None:
        return found
    value = compute()
    if value is not None:
        put(store, key, value)
    return value


def _path(store: _Store, key: str) -> Path:
    return store.folder / hashlib.sha256(key.encode()).hexdigest()


def _mac(store: _Store, key: str, body: bytes | memoryview) -> bytes:
    h = hmac.new(store.mac_key, key.encode() + b"\0", hashlib.sha256)
    h.update(body)
    return h.digest()


def get(store: _Store, key: str) -> Any:
    """The value stored for ``key``, or None: none there, expired, too big, or not authentic (then removed)."""
    path = _path(store, key)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
    except OSError:  # none, or a link planted in its place
        return None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_ENTRY_BYTES + 4096:
            return None
        data = memoryview(f.read())
    n, m = len(MAGIC), len(MAGIC) + 32
    if bytes(data[:n]) != MAGIC or not hmac.compare_digest(bytes(data[n:m]), _mac(store, key, data[m:])):
        log.warning("aggregate %s: not authentic (planted or altered): removed and computed again", path.name)
        _remove(path)
        return None
    expiry, doc_len = _HEAD.unpack_from(data, m)
    if expiry < time.time():
        _remove(path)
        return None
    start = m + _HEAD.size
    try:
        return decode(json.loads(bytes(data[start : start + doc_len])), _blobs(data, start + doc_len))
    except (ValueError, KeyError, IndexError, TypeError, struct.error, pa.ArrowException) as exc:  # our own bug
        log.error("aggregate %s: cannot be decoded (%s): computed again", path.name, exc)
        return None


def _blobs(data: memoryview, at: int) -> list[memoryview]:
    out = []
    while at < len(data):
        (size,) = _LEN.unpack_from(data, at)
        out.append(data[at + _LEN.size : at + _LEN.size + size])
        at += _LEN.size + size
    return out


def put(store: _Store, key: str, value: Any) -> None:
    """Store ``value`` for ``key`` (atomically); a value without a data-only encoding, or a too big one, is not kept."""
    try:
        blobs: list[bytes] = []
        doc = json.dumps(encode(value, blobs), separators=(",", ":")).encode()
    except (Unstorable, ValueError, pa.ArrowException) as exc:
        log.warning("aggregate %s: not stored (%s)", key.split(":")[2], exc)
        return
    body = io.BytesIO()
    body.write(_HEAD.pack(time.time() + store.timeout_s, len(doc)))
    body.write(doc)
    for blob in blobs:
        body.write(_LEN.pack(len(blob)))
        body.write(blob)
    payload = body.getbuffer()
    if len(payload) > MAX_ENTRY_BYTES:
        log.warning("aggregate %s: not stored (%d MB)", key.split(":")[2], len(payload) >> 20)
        return
    path = _path(store, key)
    tmp = store.folder / f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0), 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(MAGIC)
            f.write(_mac(store, key, payload))
            f.write(payload)
        os.replace(tmp, path)
    except OSError as exc:  # a full disk: the value is still answered, just not shared
        log.warning("aggregate %s: not stored (%s)", key.split(":")[2], exc)
        _remove(tmp)
        return
    _prune(store)


def _remove(path: Path) -> None:
    with contextlib.suppress(OSError):
        path.unlink()


def _prune(store: _Store) -> None:
    """Keep at most MAX_ENTRIES: the expired ones go first, then the least recently written."""
    try:
        entries = [e for e in os.scandir(store.folder) if _ENTRY.match(e.name)]
    except OSError:
        return
    if len(entries) <= MAX_ENTRIES:
        return
    stamped = []
    for e in entries:
        with contextlib.suppress(OSError):
            stamped.append((e.stat(follow_symlinks=False).st_mtime, e.path))
    stamped.sort()
    for _, path in stamped[: len(stamped) - MAX_ENTRIES * 9 // 10]:  # a tenth free: not pruned on every write
        _remove(Path(path))


# The encoding: JSON as it is for None, booleans, numbers, strings, lists and dicts with text keys; what JSON
# cannot say is an object with one key that starts with NUL (no plain dict key read from data does).
_TUPLE, _DICT, _SET, _ARRAY, _OBJECTS, _TABLE = "\0t", "\0d", "\0s", "\0n", "\0o", "\0a"


def encode(value: Any, blobs: list[bytes]) -> Any:
    """``value`` as JSON data, its arrays and tables appended to ``blobs`` (NumPy ``.npy`` with no pickle,
    Arrow IPC streams). Unstorable for anything else (a class instance, a function)."""
    if value is None or isinstance(value, str | bool | int | float):
        return value
    if isinstance(value, np.generic):
        return encode(value.item(), blobs)
    if isinstance(value, list):
        return [encode(v, blobs) for v in value]
    if isinstance(value, tuple):
        return {_TUPLE: [encode(v, blobs) for v in value]}
    if isinstance(value, dict):
        if all(isinstance(k, str) and not k.startswith("\0") for k in value):
            return {k: encode(v, blobs) for k, v in value.items()}
        return {_DICT: [[encode(k, blobs), encode(v, blobs)] for k, v in value.items()]}
    if isinstance(value, set | frozenset):
        return {_SET: [encode(v, blobs) for v in value]}
    if isinstance(value, np.ndarray):
        if value.dtype.hasobject:
            return {_OBJECTS: encode(value.ravel().tolist(), blobs), "shape": list(value.shape)}
        out = io.BytesIO()
        np.save(out, value, allow_pickle=False)
        blobs.append(out.getvalue())
        return {_ARRAY: len(blobs) - 1}
    if isinstance(value, pa.Table):
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, value.schema) as writer:
            writer.write_table(value)
        blobs.append(sink.getvalue().to_pybytes())
        return {_TABLE: len(blobs) - 1}
    raise Unstorable(f"a {type(value).__name__} has no data-only encoding")


def decode(doc: Any, blobs: list[memoryview]) -> Any:
    """The value :func:`encode` wrote: never more than data (no class is looked up, no code run)."""
    if isinstance(doc, list):
        return [decode(v, blobs) for v in doc]
    if not isinstance(doc, dict):
        return doc
    if len(doc) in (1, 2):
        tag = next(iter(doc))
        if tag == _TUPLE:
            return tuple(decode(v, blobs) for v in doc[tag])
        if tag == _DICT:
            return {_hashable(decode(k, blobs)): decode(v, blobs) for k, v in doc[tag]}
        if tag == _SET:
            return {_hashable(decode(v, blobs)) for v in doc[tag]}
        if tag == _ARRAY:
            return np.load(io.BytesIO(blobs[doc[tag]]), allow_pickle=False)
        if tag == _OBJECTS:
            items = decode(doc[tag], blobs)
            out = np.empty(len(items), dtype=object)
            out[:] = items
            return out.reshape(doc["shape"])
        if tag == _TABLE:
            return pa.ipc.open_stream(pa.py_buffer(blobs[doc[tag]])).read_all()
    return {k: decode(v, blobs) for k, v in doc.items()}


def _hashable(key: Any) -> Any:
    if isinstance(key, list | dict | set):
        raise TypeError("an unhashable key")
    return key
