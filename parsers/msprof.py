"""CANN msprof output folders ``PROF_{seq}_{timestamp}_{random}/`` (command-line msprof, offline inference, TF):
``mindstudio_profiler_output/msprof_*.json`` (the trace_view process model without the Python layer, possibly
sliced as ``msprof_slice_{i}_*.json``), ``op_summary_*.csv`` (kernels) and ``step_trace_*.csv`` (iterations).

Built from the format notes (../shared/formats/ascend.md section 3); no real msprof sample is shared, so the tests
use a folder made from a real torch_npu trace_view with its Python process removed. The old per-device layout
(CANN <= 6.3, ``device_{id}/timeline/*.json``) is not read.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import pyarrow as pa

from paradiag.parsers import ascend_common as common
from paradiag.parsers import ascend_text as text
from paradiag.parsers import ascend_timeline, ascend_trace
from paradiag.parsers.base import ParsedRank, TraceError

FORMAT = "msprof"
OUTPUT = "mindstudio_profiler_output"
_OP_SUMMARY = {
    "Op Name": "Name", "OP Type": "Type", "Task Type": "Accelerator Core", "Task Start Time(us)": "Start Time(us)",
    "Task Duration(us)": "Duration(us)", "Task Wait Time(us)": "Wait Time(us)",
}  # fmt: skip


def detect(path: Path) -> bool:
    """A ``PROF_*`` folder with msprof's exported output, not the raw data inside a torch_npu/MindSpore folder."""
    if not (path.is_dir() and path.name.startswith("PROF_")):
        return False
    if path.parent.name.endswith(("_ascend_pt", "_ascend_ms")):
        return False
    return (path / OUTPUT).is_dir()


def trace_files(output: Path) -> list[Path]:
    return sorted(
        p for p in output.glob("msprof_*.json") if re.match(r"msprof_(slice_\d+_)?\d+\.json$", p.name)
    )


def parse(path: Path, root: Path | None = None) -> ParsedRank:
    shown = common.shown_path(path, root)
    output = path / OUTPUT
    files = trace_files(output)
    if not files:
        raise TraceError(shown / OUTPUT, "no msprof_*.json timeline")
    columns = ascend_trace.TraceColumns()
    for f in files:  # slices share one process/thread naming; their events concatenate
        ascend_trace.read_trace(f, common.shown_path(f, root), columns)
    info = common.FolderInfo(rank_from="assigned")
    layout = columns.layout
    device = layout.device if layout.device is not None else _device_from_folders(path)
    cols, plane, warnings = ascend_timeline.build(columns, device or 0, {}, {}, None)
    del columns
    extra = _tables(output, shown / OUTPUT, warnings)
    if plane.num_rows:
        extra["comm_tasks"] = text.comm_tasks_table(plane, -1, device or 0, {})
    spans = _iterations(output, shown / OUTPUT, warnings)
    table, steps = common.finish(cols, None, spans)
    warnings.append("msprof output names no rank: rank assigned by discovery order")
    info.run_id = path.name
    parsed = common.parsed_rank(shown, FORMAT, table, steps, info, device, warnings, extra)
    parsed.warnings = [w for w in parsed.warnings if "profiler_info" not in w]
    return parsed


def _device_from_folders(path: Path) -> int | None:
    found = sorted(
        int(m.group(1)) for d in path.glob("device_*") if (m := re.match(r"device_(\d+)$", d.name))
    )
    return found[0] if found else None


def _first(output: Path, pattern: str) -> Path | None:
    found = sorted(output.glob(pattern))
    return found[0] if found else None


def _tables(output: Path, shown: Path, warnings: list[str]) -> dict[str, pa.Table]:
    extra: dict[str, pa.Table] = {}
    summary = _first(output, "op_summary_*.csv")
    if summary is not None:
        table = text.read_csv_table(summary, shown / summary.name, warnings)
        if table is not None and table.num_rows:
            table = table.rename_columns([_OP_SUMMARY.get(k, k) for k in table.column_names])
            extra["kernels"] = text.kernels_table(table, -1)
    stats = _first(output, "op_statistic_*.csv")
    if stats is not None:
        table = text.read_csv_table(stats, shown / stats.name, warnings)
        if table is not None and table.num_rows:
            extra["op_statistic"] = text.op_statistic_table(table, -1)
    return extra


def _iterations(output: Path, shown: Path, warnings: list[str]) -> list[tuple[int, int, int]]:
    """Step spans from step_trace_*.csv: an iteration ends at ``Iteration End`` and lasts ``Iteration Time``."""
    path = _first(output, "step_trace_*.csv")
    if path is None:
        return []
    spans = []
    skipped = 0
    for row in text.read_csv(path, shown / path.name, warnings):
        step, end, length = (
            row.get("Iteration ID"),
            text.us_text_ns(row.get("Iteration End(us)")),
            text.num(row.get("Iteration Time(us)")),
        )
        if not (step and step.isdigit() and end is not None and length is not None):
            continue
        # A step id must fit the int32 step column; times must fit int64 ns and not run backwards.
        if int(step) < 2**31 and math.isfinite(length) and 0 <= length * 1000 <= end < 2**63:
            spans.append((int(step), end - round(length * 1000), end))
        else:
            skipped += 1
    if skipped:
        warnings.append(
            f"{shown / path.name}: {skipped} iteration(s) with an id or times out of range skipped"
        )
    return spans
