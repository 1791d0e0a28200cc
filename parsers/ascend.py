"""Ascend PyTorch Profiler (torch_npu) rank folders ``*_ascend_pt``: the db export when present (typed, already
joined, integer ns), the text export otherwise. Readers: :mod:`ascend_db`, :mod:`ascend_text`."""

from __future__ import annotations

from pathlib import Path

from paradiag.parsers import ascend_common as common
from paradiag.parsers import ascend_db, ascend_text
from paradiag.parsers.base import ParsedRank

FORMAT = "ascend"
SUFFIX = "_ascend_pt"


def detect(path: Path) -> bool:
    """A ``*_ascend_pt`` folder (one rank of torch_npu profiling output)."""
    return path.is_dir() and path.name.endswith(SUFFIX)


def parse(path: Path, root: Path | None = None) -> ParsedRank:
    return parse_folder(path, root, "")


def parse_folder(path: Path, root: Path | None, prefix: str) -> ParsedRank:
    """The db export when its database is there, else the text export (``prefix`` names the framework)."""
    if ascend_db.detect(path):
        return ascend_db.parse(path, root, fmt=f"{prefix}{ascend_db.FORMAT}")
    return ascend_text.parse(path, root, fmt=f"{prefix}{ascend_text.FORMAT}")


__all__ = ["FORMAT", "common", "detect", "parse"]
