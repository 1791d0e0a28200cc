"""Computed aggregates, shared by every worker through files, keyed by the job (as the server opened it) and the
code that computed them: paradiag's version, the analysis sources and the sources of the module that defines the
compute function and of every paradiag module it imports, directly or not (:func:`code_version`), so an upgrade or
a changed function computes afresh instead of serving what the old code made, and no key holds a number to bump.

Nothing read back can run code: an entry is data only (MessagePack for plain values, Arrow IPC for tables,
NumPy's ``.npy`` without pickles for arrays; see :func:`encode`), and it is used only when its HMAC-SHA256, keyed by the
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
import functools
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
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import msgspec
import numpy as np
import pyarrow as pa

import paradiag
from paradiag import __version__
from paradiag.analysis.diagnosis_types import analysis_version
from paradiag.app.config import Config, private_dir
from paradiag.cache import default_cache_root

if TYPE_CHECKING:
    from flask import Flask

    from paradiag.job import Job

T = TypeVar("T")
MAX_ENTRIES = 2000
MAX_ENTRY_BYTES = 512 << 20
PRUNE_EVERY = 32  # writes of one worker between two counts of the entries (so a cap may be passed by that many per worker)
MAGIC = b"paradiag-aggregate/1\n"
_HEAD = struct.Struct(">dQ")  # expiry (Unix seconds), length of the encoded value
_ENTRY = re.compile(r"^[0-9a-f]{64}$")
log = logging.getLogger("paradiag.app.store")


class Unstorable(TypeError):
    """A value that has no data-only encoding (it is then computed again each time, never pickled)."""


@dataclass
class _Store:
    folder: Path
    mac_key: bytes
    timeout_s: int
    writes: int = 0


_bound: list[_Store] = []


def init_cache(server: Flask | None, config: Config) -> None:
    """Keep aggregates under ``config.app_cache_dir``, authenticated with a key derived from the server's
    secret key. Refuses (ValueError) a cache folder inside the upload folder, or the other way round."""
    folder = config.app_cache_dir / "aggregates"
    _apart(config.app_cache_dir, config.upload_dir)
    jobs_root, uploads = default_cache_root().resolve(), config.upload_dir.resolve()
    if (
        jobs_root == uploads or uploads in jobs_root.parents
    ):  # it may hold the uploads (the default), not lie in them
        raise ValueError(
            f"PARADIAG_CACHE_DIR ({jobs_root}) must not lie inside PARADIAG_UPLOAD_DIR ({uploads})"
        )
    private_dir(folder)
    secret = (
        config.secret_key.encode() if config.secret_key else secrets.token_bytes(32)
    )  # no key: this process only
    mac_key = hmac.new(secret, b"paradiag aggregates", hashlib.sha256).digest()
    _bound[:] = [_Store(folder, mac_key, config.cache_timeout_s)]
    hash_loaded_code()
    for (
        entry
    ) in folder.iterdir():  # another format's entries (Flask-Caching's pickles) are never read: removed
        if not _ENTRY.match(entry.name) and not entry.name.startswith("."):
            with contextlib.suppress(OSError):
                entry.unlink()


def _apart(cache: Path, uploads: Path) -> None:
    a, b = cache.resolve(), uploads.resolve()
    if a == b or a in b.parents or b in a.parents:
        raise ValueError(
            f"PARADIAG_APP_CACHE_DIR ({cache}) and PARADIAG_UPLOAD_DIR ({uploads}) must not lie one inside the other"
        )


def scope(job: Job) -> str:
    """What identifies ``job`` for its aggregates: the content hash its server-made cache holds, and where that
    cache is (an upload's own, a sample's shared one, the served job's)."""
    where = [job.content_hash, str(job.cache_dir.resolve()), job.url or ""]
    return hashlib.sha256(json.dumps(where).encode()).hexdigest()[:32]


def key_of(kind: str, job_scope: str, params: Any, code: str = "") -> str:
    """The key of an aggregate: also of paradiag's and the analysis version, as aggregates are shaped from the
    job's Diagnosis by this version's code, and of the code that computes it (``code``: :func:`code_version`)."""
    blob = json.dumps(params, sort_keys=True, default=str)
    return f"paradiag:{__version__}:{kind}:{job_scope}:{analysis_version()}:{code}:{hashlib.sha256(blob.encode()).hexdigest()[:24]}"


def memo_key(kind: str, job: Job, params: Any, compute: Callable[[], Any]) -> str:
    """The key under which :func:`memo` keeps ``compute()`` for ``job``."""
    return key_of(kind, scope(job), params, code_version(compute))


def memo(kind: str, job: Job, params: Any, compute: Callable[[], T]) -> T:
    """``compute()`` once per (kind, job, params, the code behind ``compute``) for all workers; computed directly
    without a store. ``params`` holds what the value depends on besides the job and the code (a step, a rank,
    the folds opened): never a version number, as a change to the code makes a new key by itself."""
    if not _bound:
        return compute()
    store = _bound[0]
    key = memo_key(kind, job, params, compute)
    found = get(store, key)
    if found is not None:
        return found
    value = compute()
    if value is not None:
        put(store, key, value)
    return value


def code_version(compute: Callable[..., Any]) -> str:
    """What identifies the code behind ``compute`` (a function, a lambda, a ``functools.partial`` or a bound
    method): its module and qualified name, and the sources of that module and of every paradiag module it
    imports, directly or through others (:func:`sources_of`). Hashed once per module and process, as the sources
    of the code it runs (as ``analysis_version``)."""
    fn: Any = compute
    while isinstance(fn, functools.partial):
        fn = fn.func
    fn = getattr(fn, "__func__", fn)
    module = getattr(fn, "__module__", None) or ""
    name = getattr(fn, "__qualname__", type(fn).__qualname__)
    return hashlib.sha256(f"{module}:{name}:{_module_hash(module)}".encode()).hexdigest()[:16]


@functools.cache
def _module_hash(module: str) -> str:
    digest = hashlib.sha256()
    for name, path in sources_of(module).items():
        digest.update(f"{name}\0{_file_digest(path)}\0".encode())
    return digest.hexdigest()


@functools.cache
def _file_digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def hash_loaded_code() -> None:
    """Hash the sources of the app's modules loaded now (the server's, as it starts), so that an entry's key
    names the code this process runs even if a file changes while it runs (a module loaded later is hashed when
    its first aggregate is asked for)."""
    for name in sorted(m for m in sys.modules if m.startswith("paradiag.app.")):
        _module_hash(name)


def sources_of(module: str) -> dict[str, Path]:
    """The source file of ``module`` and of each paradiag module its code imports (at the top, inside functions or
    for type checking alike), followed through their imports, by module name; read from the files, so nothing is
    imported (a module of the web extra needs no Dash to be hashed). A module with no source file (a built-in one)
    has none."""
    found: dict[str, Path] = {}
    todo = [module]
    while todo:
        name = todo.pop()
        if name in found:
            continue
        path = _source_file(name)
        if path is None:
            continue
        found[name] = path
        todo += [m for m in _imported(path, name) if m not in found]
    return dict(sorted(found.items()))


def _source_file(name: str) -> Path | None:
    """Where module ``name``'s source is: a paradiag module's under the package's folder (without importing it),
    another's where it was loaded from."""
    if name == "paradiag" or name.startswith("paradiag."):
        base = _PACKAGE.joinpath(*name.split(".")[1:])
        for path in (base.with_suffix(".py"), base / "__init__.py"):
            if path.is_file():
                return path
        return None
    file = getattr(sys.modules.get(name), "__file__", None)
    return Path(file) if file and file.endswith(".py") else None


# An import statement (its names in parentheses may span lines); read as text, not parsed: a name in a docstring
# that reads like an import only adds a module to hash.
_IMPORT = re.compile(
    r"^[ \t]*(?:from[ \t]+(\.*[\w.]*)[ \t]+import[ \t]+(\([^)]*\)|[^\n]*)|import[ \t]+([^\n]*))", re.MULTILINE
)


@functools.cache
def _imported(path: Path, name: str) -> list[str]:
    """The paradiag modules that module ``name`` (its source at ``path``) imports: ``import paradiag.x``, and
    ``from paradiag.x import y`` (paradiag.x, and paradiag.x.y where that is a module)."""
    out: list[str] = []
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for source, names, plain in _IMPORT.findall(path.read_text(encoding="utf-8")):
        if plain:
            out += [part.split()[0] for part in plain.split("#")[0].split(",") if part.strip()]
            continue
        base = source.lstrip(".")
        if level := len(source) - len(base):
            parts = package.split(".")
            base = ".".join([*parts[: len(parts) - level + 1], *([base] if base else [])])
        out.append(base)
        for part in re.sub(r"#[^\n]*", "", names).strip("()").split(","):
            item = part.split()[0] if part.split() else ""
            if item.isidentifier() and _source_file(f"{base}.{item}") is not None:
                out.append(f"{base}.{item}")
    return [m for m in out if m == "paradiag" or m.startswith("paradiag.")]


_PACKAGE = Path(
    paradiag.__file__
).parent  # paradiag's folder (its app, analysis, ... through it, as imported)


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
        return loads(data[start : start + doc_len])
    except (
        ValueError,
        KeyError,
        IndexError,
        TypeError,
        struct.error,
        pa.ArrowException,
        msgspec.DecodeError,
    ) as exc:  # our own bug
        log.error("aggregate %s: cannot be decoded (%s): computed again", path.name, exc)
        return None


def put(store: _Store, key: str, value: Any) -> None:
    """Store ``value`` for ``key`` (atomically); a value without a data-only encoding, or a too big one, is not kept."""
    try:
        doc = dumps(value)
    except (Unstorable, ValueError, pa.ArrowException) as exc:
        log.warning("aggregate %s: not stored (%s)", key.split(":")[2], exc)
        return
    body = io.BytesIO()
    body.write(_HEAD.pack(time.time() + store.timeout_s, len(doc)))
    body.write(doc)
    payload = body.getbuffer()
    if len(payload) > MAX_ENTRY_BYTES:
        log.warning("aggregate %s: not stored (%d MB)", key.split(":")[2], len(payload) >> 20)
        return
    path = _path(store, key)
    tmp = store.folder / f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp"
    try:
        fd = os.open(
            tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0), 0o600
        )
        with os.fdopen(fd, "wb") as f:
            f.write(MAGIC)
            f.write(_mac(store, key, payload))
            f.write(payload)
        os.replace(tmp, path)
    except OSError as exc:  # a full disk: the value is still answered, just not shared
        log.warning("aggregate %s: not stored (%s)", key.split(":")[2], exc)
        _remove(tmp)
        return
    store.writes += 1
    if (store.writes - 1) % PRUNE_EVERY == 0:  # this worker's first write, then every PRUNE_EVERY-th
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


# The encoding: MessagePack (msgspec) as it is for None, booleans, numbers, strings, lists and dicts with such
# keys; what it cannot say is an extension type of ours, whose data is again this encoding, or a NumPy ``.npy``
# (never with pickles) or an Arrow IPC stream. Decoding builds data only: no class is looked up, no code is run.
_TUPLE, _DICT, _SET, _ARRAY, _OBJECTS, _TABLE = 1, 2, 3, 4, 5, 6
_PLAIN = frozenset({str, int, float, bool, type(None)})
_encoder = msgspec.msgpack.Encoder()


def dumps(value: Any) -> bytes:
    """``value`` as bytes; Unstorable for what has no data form (a class instance, an int beyond 64 bits)."""
    try:
        return _encoder.encode(encode(value))
    except (OverflowError, TypeError, msgspec.EncodeError) as exc:
        raise Unstorable(str(exc)) from None


def loads(data: bytes | memoryview) -> Any:
    """The value :func:`dumps` wrote."""
    return _decoder.decode(data)


def encode(value: Any) -> Any:
    """``value`` with what MessagePack cannot say as it is (tuples, sets, dicts with other keys, arrays, tables)
    made extension types. Unstorable for anything else."""
    if type(value) in _PLAIN:
        return value
    if isinstance(value, np.generic):
        return encode(value.item())
    if isinstance(value, str):  # a subclass (a StrEnum, an IntEnum): the plain value it holds
        return str.__str__(value)
    if isinstance(value, int | float):
        return (int if isinstance(value, int) else float)(value)
    if isinstance(value, list):
        if _PLAIN.issuperset(map(type, value)):  # most lists (coordinates, names): as they are
            return value
        return [encode(v) for v in value]
    if isinstance(value, dict):
        if _PLAIN.issuperset(map(type, value)):
            return {k: v if type(v) in _PLAIN else encode(v) for k, v in value.items()}
        return _ext(_DICT, [[encode(k), encode(v)] for k, v in value.items()])
    if isinstance(value, tuple):
        return _ext(_TUPLE, [encode(v) for v in value])
    if isinstance(value, set | frozenset):
        return _ext(_SET, [encode(v) for v in value])
    if isinstance(value, np.ndarray):
        if value.dtype.hasobject:
            return _ext(_OBJECTS, [encode(value.ravel().tolist()), list(value.shape)])
        out = io.BytesIO()
        np.save(out, value, allow_pickle=False)
        return msgspec.msgpack.Ext(_ARRAY, out.getvalue())
    if isinstance(value, pa.Table):
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, value.schema) as writer:
            writer.write_table(value)
        return msgspec.msgpack.Ext(_TABLE, sink.getvalue().to_pybytes())
    raise Unstorable(f"a {type(value).__name__} has no data-only encoding")


def _ext(code: int, inner: Any) -> msgspec.msgpack.Ext:
    return msgspec.msgpack.Ext(code, _encoder.encode(inner))


def _untag(code: int, data: memoryview) -> Any:
    if code == _ARRAY:
        return np.load(io.BytesIO(data), allow_pickle=False)
    if code == _TABLE:
        return pa.ipc.open_stream(pa.py_buffer(data)).read_all()
    inner = _decoder.decode(data)
    if code == _TUPLE:
        return tuple(inner)
    if code == _DICT:
        return {_hashable(k): v for k, v in inner}
    if code == _SET:
        return {_hashable(v) for v in inner}
    if code == _OBJECTS:
        items, shape = inner
        out = np.empty(len(items), dtype=object)
        out[:] = items
        return out.reshape(shape)
    raise ValueError(f"an unknown extension type {code}")


_decoder = msgspec.msgpack.Decoder(ext_hook=_untag)


def _hashable(key: Any) -> Any:
    if isinstance(key, list | dict | set):
        raise TypeError("an unhashable key")
    return key
