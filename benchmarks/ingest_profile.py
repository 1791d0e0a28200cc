"""Where the CPU time of an ingest goes, phase by phase (one process, no workers, so that every phase is seen).

    python benchmarks/ingest_profile.py [FOLDER]     # default: the folder benchmarks/ingest.py builds

Each phase is timed by wrapping the function that does it and counting its CPU seconds (user + system) less those
of the phases it calls, so the figures add up to the ingest's total. On a shared machine CPU seconds still grow
with the neighbours' load (caches are shared): compare runs made close together.
"""

from __future__ import annotations

import argparse
import functools
import resource
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import precompile, scratch

DEFAULT = Path(tempfile.gettempdir()) / "paradiag-bench" / "kineto-8x50"


def cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


class Phases:
    """CPU seconds per phase, each phase's own (what it calls that is a phase too is counted there)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self.stack: list[float] = []

    def wrap(self, owner: Any, name: str, label: str) -> None:
        function: Callable[..., Any] = getattr(owner, name)

        @functools.wraps(function)
        def timed(*args: Any, **kwargs: Any) -> Any:
            start = cpu()
            self.stack.append(0.0)
            try:
                return function(*args, **kwargs)
            finally:
                inner = self.stack.pop()
                spent = cpu() - start
                self.seconds[label] += spent - inner
                if self.stack:
                    self.stack[-1] += spent

        setattr(owner, name, timed)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("folder", type=Path, nargs="?", default=DEFAULT)
    folder = parser.parse_args().folder
    if not folder.is_dir():
        sys.exit(f"{folder}: no such folder (python benchmarks/ingest.py builds the default one)")
    precompile()
    start = cpu()
    import pyarrow.parquet as pq

    import paradiag
    import paradiag.align as align
    import paradiag.analysis.diagnose as diagnose
    import paradiag.analysis.diagnosis_types as diagnosis_types
    import paradiag.analysis.frame as frame
    import paradiag.discover as discover
    import paradiag.ingest as ingest
    from paradiag.parsers import json_stream, kineto, kineto_decode

    imports = cpu() - start
    phases = Phases()
    for owner, name, label in [
        (json_stream.ArrayStream, "_fill", "read (and gunzip) the text"),
        (json_stream.ArrayStream, "_decode", "decode slices (msgspec)"),
        (kineto_decode.Columns, "add", "per-event Python work -> chunk columns"),
        (kineto_decode.Columns, "take", "concatenate chunk columns"),
        (kineto, "_events_table", "events table (numpy, communication)"),
        (kineto, "_attribute_steps", "steps"),
        (kineto, "parse", "parse: the rest (stream cuts, metadata)"),
        (discover, "file_hash", "hash the source files"),
        (pq, "write_table", "Parquet write"),
        (discover, "parse_and_keep", "sort, communication rows"),
        (align, "estimate", "clock alignment"),
        (frame, "device_frame", "the map: device frame"),
        (diagnose, "rank_tables", "the map: per-rank analysis tables"),
        (ingest, "_finish", "ranks, steps, groups tables, manifest"),
        (diagnose, "read_frame", "diagnosis: the map's frames"),
        (diagnosis_types, "save", "diagnosis: store it"),
        (diagnose, "diagnose", "diagnosis: compute"),
        (ingest, "ingest", "ingest: the rest (manifest, tables, store)"),
    ]:
        phases.wrap(owner, name, label)
    mb = sum(p.stat().st_size for p in folder.rglob("*.json*")) / 1e6
    wall, start = time.perf_counter(), cpu()
    job = paradiag.open(folder, scratch("paradiag-profile-") / "cache", refresh=True, workers=1)
    total, wall = cpu() - start, time.perf_counter() - wall
    events = sum(job.ranks.column("num_events").to_pylist())
    print(f"{folder}: {mb:.0f} MB of JSON, {events:,} events; imports {imports:.2f} CPU s")
    print(f"ingest: {total:.2f} CPU s ({wall:.2f} s wall), {mb / total:.0f} MB per CPU-second")
    for label, seconds in sorted(phases.seconds.items(), key=lambda kv: -kv[1]):
        print(f"  {label:45s} {seconds:6.2f} s  {100 * seconds / total:5.1f}%")


if __name__ == "__main__":
    main()
