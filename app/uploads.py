"""Uploads: trace files stream to disk under the user's own folder, then parse in a background thread.

``POST /api/upload`` takes multipart ``files`` (a folder's files with their relative paths as file names, several
files, or one .zip / .tar.gz). Werkzeug spools large parts to temporary files, so nothing big sits in memory or
travels base64 through a callback. Every upload gets a fresh folder (nothing is ever overwritten) under
``PARADIAG_UPLOAD_DIR/<user>/<id>/files``; ``status.json`` beside it tells any worker how parsing goes.
"""

from __future__ import annotations

import json
import tarfile
import threading
import uuid
import zipfile
from pathlib import Path, PurePosixPath
from typing import Any

from flask import Flask, jsonify, request
from werkzeug.datastructures import FileStorage

import paradiag
from paradiag.app import context, jobs

ARCHIVES = (".zip", ".tar.gz", ".tgz", ".tar")


def safe_relative(name: str) -> PurePosixPath | None:
    """A client-given path kept only if it stays inside the upload folder."""
    parts = [p for p in PurePosixPath(name.replace("\\", "/")).parts if p not in ("", ".", "/")]
    if not parts or any(p == ".." for p in parts):
        return None
    return PurePosixPath(*parts)


def save_upload(files: list[FileStorage], root: Path) -> tuple[str, Path]:
    """Write the files into a new folder under ``root``; unpack a single archive. Returns (id, folder)."""
    upload_id = uuid.uuid4().hex[:16]
    folder = root / upload_id / "files"
    folder.mkdir(parents=True)
    for f in files:
        rel = safe_relative(f.filename or "")
        if rel is None:
            continue
        dest = folder / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        while dest.exists():  # two parts with one name: keep both
            dest = dest.with_name("_" + dest.name)
        f.save(dest)
    saved = [p for p in folder.rglob("*") if p.is_file()]
    if len(saved) == 1 and saved[0].name.lower().endswith(ARCHIVES):
        unpack(saved[0], folder)
        saved[0].unlink()
    write_status(folder.parent, {"state": "queued", "done": 0, "total": 0})
    return upload_id, folder


def unpack(archive: Path, into: Path) -> None:
    """Extract regular files only, each kept inside ``into`` (no links, no absolute or parent paths)."""
    if archive.name.lower().endswith(".zip"):
        with zipfile.ZipFile(archive) as z:
            for info in z.infolist():
                rel = safe_relative(info.filename)
                if rel is None or info.is_dir():
                    continue
                (into / rel).parent.mkdir(parents=True, exist_ok=True)
                with z.open(info) as src, open(into / rel, "wb") as dst:
                    dst.write(src.read())
        return
    with tarfile.open(archive) as t:
        for member in t.getmembers():
            rel = safe_relative(member.name)
            if rel is None or not member.isfile():
                continue
            (into / rel).parent.mkdir(parents=True, exist_ok=True)
            data = t.extractfile(member)
            if data is not None:
                with data, open(into / rel, "wb") as dst:
                    dst.write(data.read())


def write_status(upload: Path, status: dict[str, Any]) -> None:
    tmp = upload / "status.json.tmp"
    tmp.write_text(json.dumps(status))
    tmp.replace(upload / "status.json")


def read_status(upload: Path) -> dict[str, Any]:
    try:
        return dict(json.loads((upload / "status.json").read_text()))
    except (OSError, ValueError):
        return {"state": "unknown"}


def parse(folder: Path) -> None:
    """Parse an upload (run in a thread); progress and the outcome go to its status.json."""
    upload = folder.parent

    def progress(done: int, total: int, source: str) -> None:
        write_status(upload, {"state": "parsing", "done": done, "total": total, "source": source})

    try:
        job = paradiag.open(folder, progress=progress)
        write_status(upload, {"state": "done", "done": 1, "total": 1, "ranks": len(job.rank_ids)})
    except Exception as exc:  # any failure is the user's to read, not the server's to crash on
        write_status(upload, {"state": "error", "message": str(exc)[:500]})


def register_routes(server: Flask) -> None:
    @server.route("/api/upload", methods=["POST"])
    def upload() -> Any:
        cfg = context.config()
        root = jobs.user_upload_root(cfg, context.user_id())
        files = request.files.getlist("files")
        if not files:
            return jsonify({"error": "no files"}), 400
        upload_id, folder = save_upload(files, root)
        threading.Thread(target=parse, args=(folder,), daemon=True, name=f"parse-{upload_id}").start()
        return jsonify({"id": upload_id, "job": f"upload:{upload_id}"})

    @server.route("/api/upload/<upload_id>/status")
    def status(upload_id: str) -> Any:
        if not jobs.SAFE_NAME.match(upload_id):
            return jsonify({"state": "unknown"}), 404
        root = jobs.user_upload_root(context.config(), context.user_id())
        return jsonify(read_status(root / upload_id))
