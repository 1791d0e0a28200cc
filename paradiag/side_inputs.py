"""Side inputs: files beside the traces that are not traces themselves (MindSpore ``parallel_strategy_{rank}.json``),
read at ingest into the cache so that a cache opened without its source folder loses nothing.

Cache files: ``strategy.parquet`` (every strategy file's op rows, with the ``file`` they came from) and
``strategy.json`` (``files``: the files read, relative to the job folder; ``problems``: unreadable ones).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from paradiag.parsers.base import TraceError
from paradiag.parsers.mindspore_strategy import FILE_PATTERN, SCHEMA, read_parallel_strategy

STRATEGY_DEPTH = 2  # folder levels below the job folder searched for parallel_strategy_{rank}.json
STRATEGY_TABLE = "strategy.parquet"
STRATEGY_DOC = "strategy.json"


def strategy_files(root: Path) -> list[Path]:
    """``parallel_strategy_*.json`` files in ``root`` and up to :data:`STRATEGY_DEPTH` folder levels below it."""
    if not root.is_dir():
        root = root.parent
    if not root.is_dir():
        return []
    found: list[Path] = []
    for depth in range(STRATEGY_DEPTH + 1):
        found += sorted(p for p in root.glob("/".join(["*"] * depth + [FILE_PATTERN])) if p.is_file())
    return found


def store_side_inputs(root: Path, cache_dir: Path) -> None:
    """Read the strategy files of the job folder ``root`` into ``cache_dir`` (a file that cannot be used is listed
    in the problems with its name; one file per rank)."""
    base = root if root.is_dir() else root.parent
    tables: list[pa.Table] = []
    doc: dict[str, list[str]] = {"files": [], "problems": []}
    seen: set[int] = set()
    for path in strategy_files(root):
        shown = str(path.relative_to(base))
        try:
            table = read_parallel_strategy(path)
        except TraceError as exc:
            doc["problems"].append(f"{shown}: {exc.problem}")
            continue
        rank = table.column("rank")[0].as_py() if table.num_rows else None
        if rank is None or rank in seen:
            doc["problems"].append(
                f"{shown}: {'no rank' if rank is None else f'a second file for rank {rank}'}; not used"
            )
            continue
        seen.add(rank)
        doc["files"].append(shown)
        tables.append(
            table.replace_schema_metadata(None).append_column(
                "file", pa.array([shown] * table.num_rows, pa.string())
            )
        )
    schema = SCHEMA.append(pa.field("file", pa.string()))
    pq.write_table(pa.concat_tables(tables) if tables else schema.empty_table(), cache_dir / STRATEGY_TABLE)
    (cache_dir / STRATEGY_DOC).write_text(json.dumps(doc))


def parallel_strategy(cache_dir: Path) -> dict[str, Any]:
    """The strategy read at ingest: ``files``, ``ops`` (rank -> its op rows), ``stage_of`` (rank -> stage id) and
    ``problems``; empty for a cache written before side inputs were stored."""
    out: dict[str, Any] = {"files": [], "ops": {}, "stage_of": {}, "problems": []}
    try:
        doc = json.loads((cache_dir / STRATEGY_DOC).read_text())
        table = pq.read_table(cache_dir / STRATEGY_TABLE)
    except (OSError, ValueError):
        return out
    out["files"], out["problems"] = doc["files"], doc["problems"]
    for row in table.drop_columns(["file"]).to_pylist():
        out["ops"].setdefault(row["rank"], []).append(row)
        if row["stage"] is not None:
            out["stage_of"].setdefault(row["rank"], row["stage"])
    return out
