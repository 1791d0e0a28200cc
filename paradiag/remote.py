"""A job's cache at an fsspec URL (``s3://bucket/job42``, ``gs://…``, any file system fsspec knows).

An object store has no atomic folder rename, so the rule "a reader never sees a half-written cache" is kept
another way: each ingest writes its files under a fresh **generation** prefix (``URL/.gen-TIME-HOST-PID-ID/``,
laid out as a local cache folder) and commits by writing one small **pointer** object last
(``URL/paradiag-cache.json``, naming the generation and the versions). A reader follows only the pointer, so an
unfinished generation is never read: an object store (S3, GCS, Azure) writes one object atomically, and on a
file system (``file://``) the pointer is written beside and renamed. After the
commit the previous generation and stale ones (their ingest died) are removed, best effort: a killed ingest
leaves only an unreferenced prefix.

Parsing is unchanged: every parse writes into a local folder, and the rank's files are then uploaded (``put``)
by whoever parsed them. The client builds the whole cache in a local folder as a local ingest does (downloading
the ranks Dask workers parsed elsewhere), uploads the files only it made, writes the pointer and keeps its folder
as the **local mirror** of that generation; a reader elsewhere downloads the generation once into its own cache
root (keyed by the URL and the generation) and opens it memory-mapped like any cache.

Credentials come from the store's usual sources (``AWS_*`` variables, ``AWS_ENDPOINT_URL`` for an S3 other than
AWS, fsspec's configuration). A URL's userinfo (``s3://KEY:SECRET@bucket``) is never shown: every message names
the URL through :func:`shown`. fsspec (and s3fs for ``s3://``) is the optional ``remote`` extra, imported only
when a URL is used.
"""

from __future__ import annotations

import calendar
import contextlib
import hashlib
import json
import os
import re
import shutil
import tempfile
import time
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from paradiag.cache import (
    CACHE_FORMAT,
    HOST,
    MANIFEST,
    JobError,
    alive,
    default_cache_root,
    is_cache,
    remove_stale,
    scratch_name,
)

if TYPE_CHECKING:
    from fsspec import AbstractFileSystem

POINTER = "paradiag-cache.json"
POINTER_FORMAT = "paradiag.remote/1"
EXTRA = "pip install 'paradiag[remote]'"
STALE_AFTER_S = 24 * 3600  # an unreferenced generation of another host is taken as abandoned after this long
# A scheme of two or more letters: "C://x" and "C:\\x" are Windows paths, "runs/a://b" and "./s3://x" local ones.
_URL = re.compile(r"^(?P<scheme>[A-Za-z][A-Za-z0-9+.-]+)://(?P<rest>.*)$")
_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]+://)[^/@\s]*@")
_GEN = re.compile(r"^\.gen-(?P<time>\d{8}T\d{6}Z)-(?P<host>[A-Za-z0-9._-]+)-(?P<pid>\d+)-[0-9a-f]{8}$")


def is_url(location: object) -> bool:
    """Whether ``location`` names a cache by URL. Only a string can: a ``Path`` is always local (and
    ``Path("s3://b")`` would have collapsed the slashes anyway)."""
    return isinstance(location, str) and _URL.match(location) is not None


def shown(url: str) -> str:
    """``url`` as it may be printed, logged or stored: any userinfo (a key and secret) replaced by ``***``."""
    return _USERINFO.sub(r"\g<scheme>***@", url.rstrip("/"))


def _redact(text: str, url: str) -> str:
    """An error's text on one line, with the URL's userinfo (and each of its parts, which a library may quote
    alone) removed."""
    match = re.match(r"^[A-Za-z][A-Za-z0-9+.-]+://(?P<info>[^/@\s]*)@", url)
    text = _USERINFO.sub(r"\g<scheme>***@", " ".join(text.split()))
    if match:
        for secret in sorted({match["info"], *match["info"].split(":")}, key=len, reverse=True):
            if len(secret) >= 3:
                text = text.replace(secret, "***")
    return text


def _job_error(message: str) -> Exception:
    """A paradiag.cache.JobError."""
    return JobError(message)


@dataclass
class Store:
    """The cache at ``url``: its file system and the path of its prefix on it."""

    url: str
    fs: AbstractFileSystem
    path: str

    @property
    def name(self) -> str:
        return shown(self.url)

    def at(self, *parts: str) -> str:
        return "/".join([self.path, *parts])

    @contextlib.contextmanager
    def errors(self, doing: str) -> Iterator[None]:
        """Any failure of the store while ``doing`` as a one-line JobError naming the URL (never its secret)."""

        try:
            yield
        except (JobError, _Vanished):
            raise
        except PermissionError as exc:
            why = _redact(str(exc), self.url)
            raise _job_error(
                f"{self.name}: access refused while {doing} ({why}); check the credentials (AWS_* variables, fsspec's config)"
            ) from None
        except FileNotFoundError as exc:
            if not self._container_exists():
                raise _job_error(
                    f"{self.name}: the bucket {self.path.split('/')[0]!r} does not exist"
                ) from None
            raise _job_error(
                f"{self.name}: {doing} failed: not found ({_redact(str(exc), self.url)})"
            ) from None
        except Exception as exc:
            raise _job_error(
                f"{self.name}: {doing} failed ({type(exc).__name__}: {_redact(str(exc), self.url)})"
            ) from None

    def _container_exists(self) -> bool:
        """Whether the bucket (the path's first part) exists; a local file system has none to miss."""
        if is_local(self.fs):
            return True
        try:
            return bool(self.fs.exists(self.path.split("/")[0]))
        except Exception:
            return False


def is_local(fs: AbstractFileSystem) -> bool:
    from fsspec.implementations.local import LocalFileSystem

    return isinstance(fs, LocalFileSystem)


def connect(url: str) -> Store:
    """The store of ``url``; a JobError when fsspec (or the scheme's implementation) is missing or unknown."""
    match = _URL.match(url)
    scheme = match["scheme"] if match else "?"
    name = shown(url)
    try:
        import fsspec
    except ImportError:
        raise _job_error(f"{name}: a cache at a URL needs fsspec: {EXTRA}") from None
    try:
        fs, path = fsspec.core.url_to_fs(url)
    except ImportError as exc:
        raise _job_error(
            f"{name}: {scheme}:// needs a package fsspec did not find ({exc}): {EXTRA}"
        ) from None
    except ValueError as exc:
        raise _job_error(f"{name}: not a URL fsspec can use ({_redact(str(exc), url)})") from None
    except Exception as exc:
        raise _job_error(
            f"{name}: cannot open the store ({type(exc).__name__}: {_redact(str(exc), url)})"
        ) from None
    if is_local(fs):  # an object store has no folders to make; a file system needs them before a write
        from fsspec.implementations.local import LocalFileSystem

        fs = LocalFileSystem(auto_mkdir=True)
    path = str(path).rstrip("/")
    if not path or ("/" not in path and not is_local(fs)):
        raise _job_error(f"{name}: name a prefix inside the bucket (s3://BUCKET/JOB), not a whole bucket")
    return Store(url.rstrip("/"), fs, path)


def read_pointer(store: Store, required: bool = True) -> dict[str, Any] | None:
    """The committed pointer; None when there is none (a JobError "not a paradiag cache" when ``required``).
    Not ``required`` (a writer, about to replace it), a pointer this version cannot read is None too."""

    with store.errors("reading its pointer"):
        store.fs.invalidate_cache(store.path)
        try:
            data = store.fs.cat_file(store.at(POINTER))
        except FileNotFoundError:
            if not store._container_exists():
                raise
            data = None
    if data is None:
        if required:
            raise _job_error(
                f"{store.name}: not a paradiag cache (no {POINTER} there; write one with paradiag ingest FOLDER -o {store.name})"
            )
        return None
    try:
        pointer = json.loads(data)
        ok = pointer.get("format") == POINTER_FORMAT and _GEN.match(pointer.get("generation", ""))
    except (ValueError, AttributeError):
        ok = False
    if not required and (not ok or pointer.get("cache_format") != CACHE_FORMAT):
        return None
    if not ok:
        raise _job_error(f"{store.name}: not a paradiag cache ({POINTER} is not a {POINTER_FORMAT} pointer)")
    if pointer.get("cache_format") != CACHE_FORMAT:
        raise _job_error(
            f"{store.name}: written by another paradiag ({pointer.get('cache_format')}, this one reads {CACHE_FORMAT}): ingest it again"
        )
    return dict(pointer)


def read_manifest(store: Store, pointer: dict[str, Any]) -> dict[str, Any]:
    """The committed generation's manifest (one small read, to tell whether the cache is current)."""

    with store.errors("reading its manifest"):
        return dict(json.loads(store.fs.cat_file(store.at(pointer["generation"], MANIFEST))))


def mirror_dir(url: str, generation: str) -> Path:
    """Where this machine keeps its copy of ``generation`` of the cache at ``url``: under the local cache root,
    keyed by the URL (without userinfo) and the generation, so that a new generation is a new folder."""

    name = shown(url)
    leaf = re.sub(r"[^A-Za-z0-9._-]", "_", name.rsplit("/", 1)[-1]) or "cache"
    digest = hashlib.sha256(name.encode()).hexdigest()[:16]
    return default_cache_root() / "remote" / f"{leaf}-{digest}" / generation.lstrip(".")


def mirror(store: Store, pointer: dict[str, Any] | None = None) -> Path:
    """The local mirror of the committed generation (``pointer``'s, read when not given): downloaded once, into
    a temporary sibling renamed into place. A generation removed before or while it downloads (a newer ingest
    committed) is followed once to the new pointer."""
    for attempt in range(2):
        pointer = pointer or read_pointer(store)
        assert pointer is not None
        target = mirror_dir(store.url, pointer["generation"])
        if _complete(target):
            return target
        try:
            _download(store, pointer["generation"], target)
        except _Vanished:
            if attempt:
                raise _job_error(
                    f"{store.name}: its generation {pointer['generation']} vanished while it was read (an ingest is replacing it?)"
                ) from None
            pointer = None
            continue
        forget_other_mirrors(target)
        return target
    raise AssertionError("unreachable")


def _complete(folder: Path) -> bool:

    return is_cache(folder)


def _download(store: Store, generation: str, target: Path) -> None:
    """Download ``generation`` into a temporary sibling of ``target`` and rename it into place; _Vanished when
    the generation is gone (or goes while it downloads)."""

    target.parent.mkdir(parents=True, exist_ok=True)
    remove_stale(target.parent)
    tmp = target.parent / scratch_name(target, "tmp")
    prefix = store.at(generation)
    try:
        with store.errors(f"downloading {generation}"):
            store.fs.invalidate_cache(prefix)
            try:
                found = sorted(store.fs.find(prefix))
            except FileNotFoundError:
                found = []
            if not found:
                raise _Vanished(generation)
            local = [tmp / _relative(p, prefix) for p in found]
            for parent in {p.parent for p in local}:
                parent.mkdir(parents=True, exist_ok=True)
            try:
                store.fs.get(found, [str(p) for p in local])
            except FileNotFoundError:
                raise _Vanished(generation) from None
        try:
            tmp.rename(target)
        except OSError:
            if not _complete(target):  # else another process mirrored it first: keep theirs
                raise
            shutil.rmtree(tmp, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


class _Vanished(Exception):
    """A generation gone before or while it was downloaded (a newer ingest committed and removed it)."""


def _relative(path: str, prefix: str) -> str:
    path = path.rstrip("/")
    if not path.startswith(prefix + "/"):
        raise ValueError(f"{path} is not under {prefix}")
    return path[len(prefix) + 1 :]


def forget_other_mirrors(keep: Path) -> None:
    """Remove this URL's mirrors of other generations (best effort; scratch folders are remove_stale's)."""
    with contextlib.suppress(OSError):
        for entry in keep.parent.iterdir():
            if entry != keep and entry.name.startswith("gen-") and entry.is_dir():
                shutil.rmtree(entry, ignore_errors=True)


# --- writing -----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Upload:
    """Where the parse of a rank uploads its files: the cache's URL and the generation being written. Sent to
    the workers (pickled), which connect themselves (credentials come from their own environment)."""

    url: str
    generation: str


def put_files(upload: Upload, folder: Path, files: Iterable[str]) -> list[str]:
    """Upload ``files`` (relative to ``folder``) into the generation; return them. A failure is an OSError, so
    that the parse is retried as for a local storage error."""
    files = [f for f in files if f]
    if not files:
        return []
    store = connect(upload.url)
    try:
        store.fs.put([str(folder / f) for f in files], [store.at(upload.generation, f) for f in files])
    except Exception as exc:
        raise OSError(
            f"uploading to {store.name} failed: {type(exc).__name__}: {_redact(str(exc), upload.url)}"
        ) from None
    return files


def get_files(upload: Upload, files: list[str], folder: Path) -> None:
    """Download ``files`` of the generation into ``folder`` (the ranks Dask workers parsed elsewhere), in one
    batch (fsspec runs the transfers concurrently)."""
    if not files:
        return
    store = connect(upload.url)
    local = [folder / f for f in files]
    for parent in {p.parent for p in local}:
        parent.mkdir(parents=True, exist_ok=True)
    with store.errors("downloading the ranks the workers parsed"):
        store.fs.get([store.at(upload.generation, f) for f in files], [str(p) for p in local])


def scratch() -> Path:
    """A local folder for a Dask worker's parse of one rank (the cache is not on storage the client shares)."""
    return Path(tempfile.mkdtemp(prefix="paradiag-rank-"))


def worker_check(url: str) -> str | None:
    """Run on a Dask worker: None when it can reach the cache's store, else why not."""
    try:
        store = connect(url)
        with store.errors("checking it from a worker"):
            store.fs.invalidate_cache(store.path)
            store.fs.exists(store.at(POINTER))
    except Exception as exc:
        return str(exc)
    return None


def _host_and_pid() -> tuple[str, int]:

    return HOST, os.getpid()


@dataclass
class Writer:
    """One ingest's generation at a URL: started (the store reached, its pointer read, writing checked), then
    committed or abandoned."""

    store: Store
    generation: str
    replaced: str | None = None  # the generation the pointer named just before this one's commit

    @property
    def upload(self) -> Upload:
        return Upload(self.store.url, self.generation)

    @property
    def mirror(self) -> Path:
        return mirror_dir(self.store.url, self.generation)

    @classmethod
    def start(cls, url: str, source: Path) -> Writer:
        """A new generation at ``url`` for the trace folder ``source``: the store reached, its pointer (if any)
        read, writing to it checked with a probe object (refused credentials or a read-only store are said
        now, not once per rank)."""
        store = connect(url)
        if is_local(store.fs) and (
            Path(store.path).resolve() == source or source in Path(store.path).resolve().parents
        ):
            raise _job_error(
                f"{store.name}: the cache must not be inside the source folder (it is never modified)"
            )
        read_pointer(store, required=False)  # a missing bucket, refused credentials: said before any parse
        host, pid = _host_and_pid()
        generation = (
            f".gen-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-{host}-{pid}-{uuid.uuid4().hex[:8]}"
        )
        probe = store.at(generation, ".probe")
        with store.errors("writing to it"):
            store.fs.pipe_file(probe, b"")
            store.fs.rm_file(probe)
        return cls(store, generation)

    def commit(self, folder: Path, uploaded: Iterable[str], pointer: dict[str, Any]) -> None:
        """Upload the files of ``folder`` not ``uploaded`` yet, check that the generation holds exactly the
        folder's files (removing strays: a failed rank's partial upload, a skipped duplicate), then write the
        pointer: the one write that makes the generation the cache."""
        local = {str(p.relative_to(folder)): p.stat().st_size for p in folder.rglob("*") if p.is_file()}
        rest = sorted(set(local) - set(uploaded))
        prefix = self.store.at(self.generation)
        with self.store.errors(f"writing {self.generation}"):
            if rest:
                self.store.fs.put([str(folder / f) for f in rest], [f"{prefix}/{f}" for f in rest])
            self.store.fs.invalidate_cache(prefix)
            there = {
                _relative(p, prefix): int(info.get("size") or 0)
                for p, info in self.store.fs.find(prefix, detail=True).items()
            }
            strays = sorted(set(there) - set(local))
            if strays:
                self.store.fs.rm([f"{prefix}/{f}" for f in strays])
            wrong = sorted(f for f, size in local.items() if there.get(f) != size)
            if wrong:
                raise _job_error(
                    f"{self.store.name}: {len(wrong)} file(s) of {self.generation} are missing or differ after the upload ({wrong[0]}, ...); nothing was committed"
                )
        # Read again now, not at the start: another ingest may have committed meanwhile, and its generation is
        # the one this commit replaces (otherwise it would be left for STALE_AFTER_S).
        old = read_pointer(self.store, required=False)
        self.replaced = old["generation"] if old else None
        self.point({**pointer, "format": POINTER_FORMAT, "generation": self.generation})

    def point(self, pointer: dict[str, Any]) -> None:
        """Write the pointer: the commit (one object's write, atomic on the store)."""
        data, target = json.dumps(pointer, indent=1).encode(), self.store.at(POINTER)
        with self.store.errors(f"committing {self.generation}"):
            if is_local(self.store.fs):  # a file is written in place: write it beside, then rename it over
                beside = Path(self.store.at(f".{POINTER}{self.generation}"))
                beside.write_bytes(data)
                os.replace(beside, target)
            else:
                self.store.fs.pipe_file(target, data)

    def clean(self) -> None:
        """After the commit: remove the previous generation and stale ones, and this URL's older mirrors here
        (best effort)."""
        with contextlib.suppress(Exception):
            remove_generations(self.store, keep=self.generation, also=self.replaced)
        forget_other_mirrors(self.mirror)

    def abandon(self) -> None:
        """After a failure: remove what this generation uploaded (best effort; it is unreferenced anyway)."""
        with contextlib.suppress(Exception):
            self.store.fs.rm(self.store.at(self.generation), recursive=True)


def remove_generations(store: Store, keep: str, also: str | None = None) -> list[str]:
    """Remove the generations other than ``keep`` that no ingest is writing: ``also`` (the one the pointer named
    before), those of this host whose process is gone, and those older than STALE_AFTER_S. Return them."""

    host, _ = _host_and_pid()
    store.fs.invalidate_cache(store.path)
    removed = []
    for entry in store.fs.ls(store.path, detail=False):
        name = entry.rstrip("/").rsplit("/", 1)[-1]
        match = _GEN.match(name)
        if not match or name == keep:
            continue
        age = time.time() - calendar.timegm(time.strptime(match["time"], "%Y%m%dT%H%M%SZ"))
        if name == also or (match["host"] == host and not alive(int(match["pid"]))) or age > STALE_AFTER_S:
            store.fs.rm(store.at(name), recursive=True)
            removed.append(name)
    return removed
