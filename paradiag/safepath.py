"""Whether an untrusted name maps under a folder: the one check every path from a client, an archive or a
manifest goes through.

A name is split on both ``/`` and ``\\`` (an archive made on Windows uses either), and every spelling of a root
is dropped, so that what is left is always relative: ``/x``, ``//x`` (POSIX keeps a leading ``//`` as a root),
``\\\\server\\share\\x`` (UNC), ``\\\\?\\C:\\x`` and ``\\\\.\\x`` (Windows device paths), ``C:\\x`` and ``C:x``
(drives). Refused outright, as no folder can take them safely: a ``..`` part anywhere (also spelled with trailing
dots or spaces, which Windows drops, or in full-width letters that NFKC folds to ``..``), NUL and other control
characters, text that is no valid Unicode, nothing left at all, and more than ``MAX_DEPTH`` parts. A part longer
than ``MAX_NAME_BYTES`` is shortened (keeping its extension and a hash of it, so two long names stay two).

:func:`relative` is the lexical check alone; :func:`inside` also resolves the result under the folder, so a name
that would pass through a symbolic link to outside it is refused; :func:`create` makes the file with every folder
on the way opened without following links (``O_NOFOLLOW``, relative to the folder's descriptor), so a link that
appears meanwhile cannot redirect it either.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import stat
import unicodedata
from pathlib import Path, PurePosixPath

MAX_DEPTH = 32
MAX_NAME_BYTES = 200  # below the 255 bytes most file systems allow per name
_DEVICE = re.compile(r"^[\\/]{2}[?.][\\/]")  # \\?\ and \\.\ (and their forward-slash spellings)
_DRIVE = re.compile(r"^[A-Za-z]:")


class UnsafeName(ValueError):
    """A name that maps under no folder; the message says why (and holds no server path)."""


def relative(name: str) -> PurePosixPath:
    """``name`` as a relative path that stays inside any folder it is joined to, or UnsafeName."""
    if not isinstance(name, str):
        raise UnsafeName("not a text name")
    if any(unicodedata.category(c) in ("Cc", "Cs") for c in name):
        raise UnsafeName("holds NUL, control or invalid characters")
    text = _DRIVE.sub("", _DEVICE.sub("", name), count=1)
    parts: list[str] = []
    for part in re.split(r"[\\/]", text):
        if part in ("", "."):
            continue
        folded = unicodedata.normalize("NFKC", part)
        if not folded.strip(
            ". "
        ):  # "..", "...", ".. " (Windows drops trailing dots and spaces), "．．" (NFKC)
            raise UnsafeName(
                "names a parent folder"
                if ".." in folded.replace(" ", "")
                else "has a part of only dots or spaces"
            )
        if re.search(r"[\\/]", folded):  # "a／b": a separator once folded
            raise UnsafeName("holds a separator in disguise")
        parts.append(_short(part))
    if not parts:
        raise UnsafeName("names no file")
    if len(parts) > MAX_DEPTH:
        raise UnsafeName(f"is more than {MAX_DEPTH} folders deep")
    return PurePosixPath(*parts)


def _short(part: str) -> str:
    if len(part.encode()) <= MAX_NAME_BYTES:
        return part
    suffix = "".join(PurePosixPath(part).suffixes[-2:])
    suffix = suffix if len(suffix.encode()) <= 32 else ""
    digest = hashlib.sha256(part.encode()).hexdigest()[:12]
    stem = part.encode()[: MAX_NAME_BYTES - len(suffix.encode()) - 13].decode(errors="ignore")
    return f"{stem}~{digest}{suffix}"


def inside(root: Path, name: str | PurePosixPath, exact: bool = False) -> Path:
    """Where ``name`` lands under ``root``: the resolved path, refused (UnsafeName) unless it is inside the
    resolved ``root``, so that a symbolic link on the way (to another folder, or a parent) cannot take it out.
    ``exact`` (a name paradiag wrote itself, as in a cache's manifest) also refuses a name that is not already
    plain and relative, instead of making it so: an absolute one is then no name of this folder."""
    rel = relative(str(name))
    if exact and str(rel) != str(name):
        raise UnsafeName("leads outside its folder (absolute, or not a plain relative name)")
    base = root.resolve()
    target = (base / rel).resolve()
    if target != base and base not in target.parents:
        raise UnsafeName("leads outside its folder (through a symbolic link)")
    return target


def create(
    root: Path, rel: PurePosixPath, mode: int = 0o600, dir_mode: int = 0o700
) -> tuple[int, PurePosixPath]:
    """Create the new file ``rel`` (from :func:`relative`) under ``root``, making its folders (``dir_mode``) on the
    way, none of them followed if it is a link; a name that is taken gets ``_`` prefixed until it is free (two
    parts of one name are both kept). Returns (an open descriptor to write, the name it got). UnsafeName when a
    folder on the way is a link or no folder; OSError from the file system (a full disk)."""
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(root, flags)
    try:
        for part in rel.parts[:-1]:
            with contextlib.suppress(FileExistsError):
                os.mkdir(part, dir_mode, dir_fd=fd)
            try:
                sub = os.open(part, flags, dir_fd=fd)
            except OSError as exc:  # ELOOP: a link; ENOTDIR: a file where a folder must go
                if _is_link(part, fd):
                    raise UnsafeName("passes through a symbolic link") from exc
                raise
            os.close(fd)
            fd = sub
        name = rel.name
        while True:
            try:
                out = os.open(
                    name,
                    os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0),
                    mode,
                    dir_fd=fd,
                )
            except FileExistsError:
                name = _short("_" + name)
                continue
            return out, rel.with_name(name)
    finally:
        os.close(fd)


def _is_link(part: str, dir_fd: int) -> bool:
    try:
        return stat.S_ISLNK(os.lstat(part, dir_fd=dir_fd).st_mode)
    except OSError:
        return False
