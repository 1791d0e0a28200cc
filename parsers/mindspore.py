"""MindSpore (>= 2.3) rank folders ``*_ascend_ms``: the same ``ASCEND_PROFILER_OUTPUT`` deliverables as torch_npu
(text: trace_view.json + CSV/JSON; db: ``ascend_mindspore_profiler_{rank}.db``), read by the torch_npu readers.

Built from the format notes (../shared/formats/ascend.md section 2); no real MindSpore sample is shared, so the
tests use a torch_npu folder renamed to ``*_ascend_ms``. Legacy MindSpore (<= 2.2, a flat ``profiler/`` folder
with ``ascend_timeline_display_{rank}.json``) is not read.
"""

from __future__ import annotations

from pathlib import Path

from paradiag.parsers import ascend
from paradiag.parsers.base import ParsedRank

FORMAT = "mindspore"
SUFFIX = "_ascend_ms"


def detect(path: Path) -> bool:
    """A ``*_ascend_ms`` folder (one rank of MindSpore profiling output)."""
    return path.is_dir() and path.name.endswith(SUFFIX)


def parse(path: Path, root: Path | None = None) -> ParsedRank:
    return ascend.parse_folder(path, root, "mindspore_")
