"""Uploads: trace files stream to disk under the user's own folder, then parse in a separate, limited process.

``POST /api/upload`` takes multipart ``files`` (a folder's files with their relative paths as file names, several
files, or one .zip / .tar.gz). Werkzeug spools large parts to temporary files, so nothing big sits in memory or
travels base64 through a callback. Every upload gets a fresh folder (nothing is ever overwritten) under
``PARADIAG_UPLOAD_DIR/<user>/<id>/files`` (mode 0700); ``status.json`` beside it (0600) tells any worker how
parsing goes.

Nothing a user sends may hurt the host: archives unpack in chunks under a total size and a compression-ratio
cap (what was written is deleted when one is hit), and the parse runs in a child process with an address-space
and a wall-clock limit, and the parsers' own per-file and per-string caps, so one upload cannot starve the
web workers. Users read which limit stopped them; paths and tracebacks go to the server log only.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import re
import shutil
import stat
import subprocess
import sys
import tarfile
import threading
import time
import uuid
import zipfile
import zlib
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from typing import IO, Any

from flask import Flask, jsonify, request
from werkzeug.datastructures import FileStorage
from werkzeug.exceptions import RequestEntityTooLarge

import paradiag
from paradiag import safepath
from paradiag.app import context, jobs
from paradiag.app.config import Config, private_dir
from paradiag.cache import JobError

ARCHIVES = (".zip", ".tar.gz", ".tgz", ".tar")
MAX_FILES = 20_000  # entries per upload: more is an inode bomb, not a training job
RATIO_FLOOR = 1 << 20  # an entry may always unpack to 1 MB, whatever its ratio (tiny files compress oddly)
CHUNK = 1 << 20
STALE_S = 60  # a parse silent this long past its time limit died with its worker
read_status = jobs.read_status
log = logging.getLogger("paradiag.app.uploads")


class UploadRejected(Exception):
    """An upload broke a rule; the message (no server paths) is for the user."""

    def __init__(self, message: str, http_status: int = 413) -> None:
        super().__init__(message)
        self.http_status = http_status


def safe_relative(name: str) -> PurePosixPath | None:
    """A client-given name as a path inside the upload folder (paradiag.safepath.relative), or None when it maps
    under no folder."""
    try:
        return safepath.relative(name)
    except safepath.UnsafeName:
        return None


def save_upload(files: list[FileStorage], root: Path, config: Config | None = None) -> tuple[str, Path]:
    """Write the files into a new private folder under ``root``; unpack a single archive. Returns (id, folder).
    Every name (a file's, an archive entry's) goes through paradiag.safepath: one that maps under no folder, and
    an archive's links and devices, are skipped, and the upload's status lists them. On any failure the new
    folder is removed whole; UploadRejected says which rule the upload broke."""
    cfg = config or context.config()
    upload_id = uuid.uuid4().hex[:16]
    upload = private_dir(root / upload_id)
    write_status(upload, {"state": "receiving"})
    folder = private_dir(upload / "files")
    skipped: list[str] = []
    try:
        stored = _store(files, folder, skipped)
        if len(stored) == 1 and stored[0].name.lower().endswith(ARCHIVES):
            archive = folder / stored[0]
            unpack(archive, folder, cfg, skipped)
            archive.unlink()
    except BaseException:
        shutil.rmtree(upload, ignore_errors=True)
        raise
    if skipped:
        log.warning("upload %s: skipped %d entries: %s", upload_id, len(skipped), "; ".join(skipped[:20]))
    write_status(upload, {"state": "queued", "done": 0, "total": 0, "skipped": skipped[:MAX_SKIPPED_SHOWN]})
    return upload_id, folder


MAX_SKIPPED_SHOWN = 20


def _store(files: list[FileStorage], folder: Path, skipped: list[str]) -> list[PurePosixPath]:
    if len(files) > MAX_FILES:
        raise UploadRejected(f"{len(files)} files in one upload; at most {MAX_FILES} are accepted")
    stored = []
    for f in files:
        name = f.filename or ""
        with _storing(name):
            created = _create(folder, name, skipped)
            if created is None:
                continue
            fd, rel = created
            with os.fdopen(fd, "wb") as dst:
                f.save(dst)
            stored.append(rel)
    return stored


def _create(folder: Path, name: str, skipped: list[str]) -> tuple[int, PurePosixPath] | None:
    """A new private file for the client-given ``name`` under ``folder`` (its folders made private on the way),
    or None, noted in ``skipped``, when the name maps under no folder."""
    try:
        return safepath.create(folder, safepath.relative(name))
    except safepath.UnsafeName as exc:
        skipped.append(f"{_shown(name)}: skipped, the name {exc}")
        return None


@contextlib.contextmanager
def _storing(name: str) -> Iterator[None]:
    """A file the folder cannot take (a name that is also a folder's, a full disk) is named to the user."""
    try:
        yield
    except OSError as exc:
        log.warning("could not store upload entry %r: %s", name, exc)
        raise UploadRejected(
            f"{_shown(name)}: cannot be stored ({exc.strerror or type(exc).__name__})", 400
        ) from exc


def _shown(name: str) -> str:
    return repr(name if len(name) <= 80 else name[:77] + "...")


def unpack(archive: Path, into: Path, config: Config, skipped: list[str] | None = None) -> None:
    """Extract regular files only, each kept inside ``into`` (paradiag.safepath: no absolute or parent paths,
    no links followed), each streamed in chunks under the limits of ``config``. Links, devices and names that
    map under no folder are skipped, noted in ``skipped``."""
    skipped = [] if skipped is None else skipped
    budget = _Budget(config, archive.stat().st_size)
    entries = (
        _zip_entries(archive, skipped)
        if archive.name.lower().endswith(".zip")
        else _tar_entries(archive, skipped)
    )
    try:
        for count, (name, packed, stream) in enumerate(entries, start=1):
            if count > MAX_FILES:
                raise UploadRejected(f"the archive holds more than {MAX_FILES} files")
            with _storing(name), stream:
                created = _create(into, name, skipped)
                if created is None:
                    continue
                with os.fdopen(created[0], "wb") as dst:
                    budget.copy(name, packed, stream, dst)
    except (zipfile.BadZipFile, tarfile.TarError, EOFError, zlib.error, NotImplementedError) as exc:
        raise UploadRejected(f"{archive.name}: not a readable archive ({type(exc).__name__})", 400) from exc


def _zip_entries(archive: Path, skipped: list[str]) -> Iterator[tuple[str, int | None, IO[bytes]]]:
    with zipfile.ZipFile(archive) as z:
        for info in z.infolist():
            kind = stat.S_IFMT(info.external_attr >> 16)  # the Unix mode, where the zip was made on Unix
            if info.is_dir():
                continue
            if kind not in (0, stat.S_IFREG):
                skipped.append(
                    f"{_shown(info.filename)}: skipped, a {_KINDS.get(kind, 'special file')} (only files are unpacked)"
                )
                continue
            yield info.filename, info.compress_size, z.open(info)


_KINDS = {
    stat.S_IFLNK: "symbolic link",
    stat.S_IFCHR: "device",
    stat.S_IFBLK: "device",
    stat.S_IFIFO: "FIFO",
    stat.S_IFSOCK: "socket",
}


def _tar_entries(archive: Path, skipped: list[str]) -> Iterator[tuple[str, int | None, IO[bytes]]]:
    with tarfile.open(archive, "r|*") as t:  # streamed: no index of a huge archive is built first
        for member in t:
            if member.isdir():
                continue
            if not member.isfile():
                kind = (
                    "symbolic link" if member.issym() else "hard link" if member.islnk() else "device or FIFO"
                )
                skipped.append(f"{_shown(member.name)}: skipped, a {kind} (only files are unpacked)")
                continue
            data = t.extractfile(member)
            if data is not None:
                yield member.name, None, data


class _Budget:
    """What an archive may still unpack to: a total cap, and a ratio over the compressed size (of each zip
    entry, and of the whole archive, which is all a gzip'd tar tells)."""

    def __init__(self, config: Config, archive_bytes: int) -> None:
        self.total_cap = config.max_unpacked_mb << 20
        self.ratio = config.max_ratio
        self.whole_cap = max(archive_bytes * self.ratio, RATIO_FLOOR)
        self.written = 0

    def copy(self, name: str, packed: int | None, src: IO[bytes], dst: IO[bytes]) -> None:
        entry_cap = max(packed * self.ratio, RATIO_FLOOR) if packed is not None else None
        entry = 0
        while chunk := src.read(CHUNK):
            entry += len(chunk)
            self.written += len(chunk)
            if self.written > self.total_cap:
                raise UploadRejected(
                    f"the archive unpacks to more than {self.total_cap >> 20} MB (limit PARADIAG_UPLOAD_MAX_UNPACKED_MB)"
                )
            if (entry_cap is not None and entry > entry_cap) or self.written > self.whole_cap:
                raise UploadRejected(
                    f"{_shown(name)} unpacks to more than {self.ratio} times its compressed size (limit PARADIAG_UPLOAD_MAX_RATIO): refused as an archive bomb"
                )
            dst.write(chunk)


def write_status(upload: Path, status: dict[str, Any]) -> None:
    """Replace ``status.json`` whole (readers never see half of it), readable by this user only."""
    tmp = upload / f"status.json.{os.getpid()}.{threading.get_ident()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump({**status, "updated": time.time()}, f)
    tmp.replace(upload / "status.json")


def live_status(upload: Path, config: Config) -> dict[str, Any]:
    """The status, where a parse that stopped reporting long past its time limit (its worker died) reads as
    failed instead of running forever."""
    status = read_status(upload)
    running = status.get("state") in ("receiving", "queued", "parsing")
    if running and time.time() - float(status.get("updated", 0)) > config.parse_seconds + STALE_S:
        return {
            "state": "error",
            "message": "the parse was interrupted (the server restarted); please upload again",
        }
    return status


def start_parse(upload: Path, config: Config) -> None:
    """Parse in a child process, watched from a thread of this worker (which stays free to answer)."""
    threading.Thread(
        target=supervise, args=(upload, config), daemon=True, name=f"parse-{upload.name}"
    ).start()


@contextlib.contextmanager
def parse_slot(upload: Path, config: Config) -> Iterator[None]:
    """Hold one of the host's ``PARADIAG_UPLOAD_PARSE_SLOTS`` (a lock file every worker shares; the kernel
    frees it when its holder dies), so many uploads at once queue instead of each taking its memory limit."""
    folder = private_dir(config.upload_dir / ".parse-slots")
    while True:
        for n in range(config.parse_slots):
            fd = os.open(folder / f"slot-{n}", os.O_RDWR | os.O_CREAT, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            try:
                yield
                return
            finally:
                os.close(fd)
        with contextlib.suppress(FileNotFoundError):  # removed while waiting: its child will find nothing
            write_status(
                upload, {"state": "queued", "done": 0, "total": 0, "waiting": True}
            )  # also a heartbeat
        time.sleep(1)


def supervise(upload: Path, config: Config) -> None:
    """Run the parse child under its limits once a parse slot is free; a child killed or timed out leaves a
    status naming the limit."""
    with parse_slot(upload, config):
        _run_child(upload, config)


def _run_child(upload: Path, config: Config) -> None:
    env = {
        **os.environ,
        "PARADIAG_UPLOAD_PARSE_MEMORY_MB": str(config.parse_memory_mb),
        "PARADIAG_UPLOAD_PARSE_SECONDS": str(config.parse_seconds),
        "PARADIAG_MAX_FILE_MB": str(config.parse_file_mb),
        "PARADIAG_MAX_STRING_KB": str(config.parse_string_kb),
        "PYTHONPATH": os.pathsep.join(
            [str(Path(paradiag.__file__).resolve().parent.parent), os.environ.get("PYTHONPATH", "")]
        ),
        "OMP_NUM_THREADS": "1",
        "OPENBLAS_NUM_THREADS": "1",
    }
    code = "from paradiag.app.uploads import parse_main; parse_main()"
    start = time.perf_counter()
    cache = jobs.upload_cache(upload)
    child = subprocess.Popen(
        [sys.executable, "-c", code, str(upload), str(cache)],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        _, err = child.communicate(timeout=config.parse_seconds)
    except subprocess.TimeoutExpired:
        child.kill()
        _, err = child.communicate()
        with contextlib.suppress(FileNotFoundError):  # the upload was removed meanwhile
            _fail(
                upload,
                f"parsing took longer than {config.parse_seconds} s (limit PARADIAG_UPLOAD_PARSE_SECONDS)",
            )
    seconds = time.perf_counter() - start
    state = read_status(upload).get("state")
    if err.strip():
        log.warning("upload %s: parse process said:\n%s", upload.name, err.decode(errors="replace")[-20_000:])
    if not upload.is_dir():
        log.info("upload %s was removed during its parse", upload.name)
        return
    if state not in ("done", "error"):
        # No status of its own: the child died without a word, which under RLIMIT_AS is an allocation that
        # failed outside Python (an abort in native code) or the kernel's kill.
        _fail(
            upload,
            f"the parse stopped (exit {child.returncode}), most likely at its memory limit of {config.parse_memory_mb} MB (limit PARADIAG_UPLOAD_PARSE_MEMORY_MB)",
        )
    final = read_status(upload).get("state")
    if final == "error":  # nothing can open it: its files would only take disk (status.json keeps the answer)
        shutil.rmtree(upload / "files", ignore_errors=True)
    log.info("upload %s: parse %s in %.1f s (exit %s)", upload.name, final, seconds, child.returncode)


def _fail(upload: Path, message: str) -> None:
    write_status(upload, {"state": "error", "message": message})


def parse_main() -> None:
    """The parse child: limit itself, parse ``argv[1]/files`` into the cache ``argv[2]`` (outside the upload,
    jobs.upload_cache), report through status.json. The files are traces only (``as_source``): a manifest or
    cache among them is never believed, its trace files are parsed like any other."""
    import resource

    upload = Path(sys.argv[1])
    memory = int(os.environ["PARADIAG_UPLOAD_PARSE_MEMORY_MB"]) << 20
    seconds = int(os.environ["PARADIAG_UPLOAD_PARSE_SECONDS"])
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    resource.setrlimit(resource.RLIMIT_CPU, (seconds + 5, seconds + 10))  # a backstop to the parent's clock
    folder = upload / "files"
    skipped = [str(s) for s in read_status(upload).get("skipped", [])]

    def progress(done: int, total: int, source: str) -> None:
        write_status(upload, {"state": "parsing", "done": done, "total": total, "source": source})

    try:
        # One process: RLIMIT_AS binds each process alone, so parse workers would multiply the budget.
        job = paradiag.open(folder, Path(sys.argv[2]), progress=progress, workers=1, as_source=True)
        problems = [*skipped, *(str(p) for p in job.problems)]
        write_status(
            upload,
            {"state": "done", "done": 1, "total": 1, "ranks": len(job.rank_ids), "problems": problems[:20]},
        )
    except MemoryError:
        _fail(
            upload,
            f"parsing needs more than {memory >> 20} MB of memory (limit PARADIAG_UPLOAD_PARSE_MEMORY_MB)",
        )
    except JobError as exc:
        print(f"upload {upload.name}: {exc}", file=sys.stderr)  # the whole story, for the server log
        message = public_message(str(exc), folder)
        if "out of memory" in message:
            message += f" (a parse may use at most {memory >> 20} MB: limit PARADIAG_UPLOAD_PARSE_MEMORY_MB)"
        _fail(upload, message)
    except Exception:  # a parser bug: the traceback is the operator's (server log via stderr), not the user's
        import traceback

        traceback.print_exc()
        _fail(upload, "the upload could not be parsed (an internal error; the server log has the details)")
    _scrub_problems(upload, folder)


def _scrub_problems(upload: Path, folder: Path) -> None:
    status = read_status(upload)
    if status.get("problems"):
        write_status(upload, {**status, "problems": [public_message(p, folder) for p in status["problems"]]})


_TRACEBACK = re.compile(r"\n?Traceback \(most recent call last\):\n(?:[ \t].*\n?)*")
_ABSOLUTE = re.compile(r"(?<![\w.~])/(?:[^\s/:;,'\"()]+/)+([^\s/:;,'\"()]*)")


def public_message(message: str, folder: Path) -> str:
    """``message`` without the server's paths or traceback text: names inside the upload stay, relative to
    it; any other absolute path shrinks to its last part."""
    for root in sorted({str(folder.resolve()), str(folder)}, key=len, reverse=True):
        message = message.replace(root + os.sep, "").replace(root, "the upload")
    message = _ABSOLUTE.sub(r"\1", _TRACEBACK.sub(" ", message))
    return message.strip()[:1000]


def register_routes(server: Flask) -> None:
    @server.route("/api/upload", methods=["POST"])
    def upload() -> Any:
        cfg = context.config()
        root = private_dir(jobs.user_upload_root(cfg, context.user_id()))
        files = request.files.getlist("files")
        if not files:
            return jsonify({"error": "no files"}), 400
        try:
            upload_id, folder = save_upload(files, root, cfg)
        except UploadRejected as exc:
            log.warning("upload by %s refused: %s", context.user_id(), exc)
            return jsonify({"error": str(exc)}), exc.http_status
        except OSError:
            log.exception("upload by %s could not be stored", context.user_id())
            return jsonify({"error": "the upload could not be stored (the server log has the details)"}), 500
        log.info("upload %s by %s: %d file(s) stored", upload_id, context.user_id(), len(files))
        start_parse(folder.parent, cfg)
        return jsonify({"id": upload_id, "job": f"upload:{upload_id}"})

    @server.route("/api/upload/<upload_id>/status")
    def status(upload_id: str) -> Any:
        if not jobs.SAFE_NAME.match(upload_id):
            return jsonify({"state": "unknown"}), 404
        found = live_status(
            jobs.user_upload_root(context.config(), context.user_id()) / upload_id, context.config()
        )
        return jsonify(found), 404 if found["state"] == "unknown" else 200

    @server.errorhandler(RequestEntityTooLarge)
    def too_large(_: RequestEntityTooLarge) -> Any:
        limit = context.config().max_upload_mb
        return jsonify({"error": f"the upload is larger than {limit} MB (limit PARADIAG_MAX_UPLOAD_MB)"}), 413
