"""Older Ascend layouts that paradiag recognises but does not read, so that a folder of them is reported in one
line per folder (what it is and how to get a readable export) instead of one "not a PyTorch profiler trace" per
JSON file inside (../shared/formats/ascend.md):

* CANN <= 6.3 msprof collections: ``PROF_*`` folders holding raw ``device_{id}/data`` (and, once exported,
  ``device_{id}/timeline/*.json``) but no ``mindstudio_profiler_output``;
* MindSpore <= 2.2: a flat ``profiler/`` folder with ``ascend_timeline_display_{rank}.json``,
  ``step_trace_raw_{rank}_detail_time.csv``, ``framework_raw_{rank}.csv``, ...
"""

from __future__ import annotations

from pathlib import Path

from paradiag.parsers.base import ParsedRank, TraceError

_MINDSPORE_FILES = (
    "ascend_timeline_display_*.json",
    "step_trace_raw_*_detail_time.csv",
    "framework_raw_*.csv",
)


def _old_cann(path: Path) -> bool:
    if not path.name.startswith("PROF_") or (path / "mindstudio_profiler_output").is_dir():
        return False
    if path.parent.name.endswith(
        ("_ascend_pt", "_ascend_ms")
    ):  # the raw data inside a torch_npu/MindSpore rank
        return False
    return any(
        d.is_dir() and ((d / "data").is_dir() or (d / "timeline").is_dir()) for d in path.glob("device_*")
    )


def _old_mindspore(path: Path) -> bool:
    return not path.name.endswith(("_ascend_ms", "_ascend_pt")) and any(
        next(path.glob(p), None) for p in _MINDSPORE_FILES
    )


def detect(path: Path) -> bool:
    return path.is_dir() and (_old_cann(path) or _old_mindspore(path))


def parse(path: Path, root: Path | None = None) -> ParsedRank:
    shown = path.relative_to(root) if root is not None and path.is_relative_to(root) else path
    if _old_cann(path):
        raise TraceError(
            shown,
            "a CANN <= 6.3 msprof collection (PROF_*/device_*/data): not read; export it with a CANN >= 7 msprof "
            "(msprof --export=on --output=<this folder>) to get mindstudio_profiler_output/, which paradiag reads",
        )
    raise TraceError(
        shown,
        "a MindSpore <= 2.2 profiler/ folder (ascend_timeline_display_*.json, step_trace_raw_*.csv): not read; "
        "profile with MindSpore >= 2.3, whose *_ascend_ms rank folders paradiag reads",
    )
