"""Benchmark: the critical path (part of the ingest's diagnosis) and ``paradiag export --perfetto``.

    python benchmarks/export.py [--dp 8 --tp 8 --pp 4] [--job DIR] [--cache DIR]

Simulates an LLM job with one slow rank (``--slow``, default the middle rank) unless ``--job`` names a trace folder,
ingests it (skipped when ``--cache`` holds a current cache), then times, each in a fresh process, the critical path
alone on the job's device events and the export (wall time and peak PSS), and prints the file's size and, per step,
the path's length against the median step time and the share of its compute on the rank holding the most.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import measure, scratch

from paradiag.simulator import SimConfig, parse_fault, simulate

PATH = """
import json, sys, time
import paradiag
from paradiag.analysis.critical_path import composition, critical_path
from paradiag.analysis.diagnose import read_frame
job = paradiag.open(sys.argv[1])
d = job.diagnosis()
frame = read_frame(job)
t = time.perf_counter()
path = critical_path(frame, d.participation, d.p2p, job.steps)
seconds = time.perf_counter() - t
steps = []
for c in composition(path):
    top = max(c["by_rank"], key=lambda r: r["compute_ns"])
    share = top["compute_ns"] / c["compute_ns"] if c["compute_ns"] else None
    steps.append({"step": c["step"], "length_ns": c["length_ns"], "top_compute_rank": top["rank"], "its_share": share})
print(json.dumps({"device_events": len(frame), "path_s": round(seconds, 3), "median_step_ns": d.step_time_ns, "steps": steps}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for axis, default in (("dp", 8), ("tp", 8), ("pp", 4)):
        parser.add_argument(f"--{axis}", type=int, default=default)
    parser.add_argument("--slow", type=int, default=None, help="the slow rank (default: the middle one)")
    parser.add_argument(
        "--job", type=Path, default=None, help="an existing trace folder instead of a simulated one"
    )
    parser.add_argument(
        "--cache", type=Path, default=None, help="the cache folder to use (ingested only when not current)"
    )
    args = parser.parse_args()
    work = scratch("paradiag-export-bench-")
    job = args.job
    if job is None:
        job = work / "job"
        slow = args.slow if args.slow is not None else args.dp * args.tp * args.pp // 2 + 5
        faults = (parse_fault(f"slow_device:ranks={slow},factor=1.3"),)
        simulate(
            SimConfig(
                output=job,
                dp=args.dp,
                tp=args.tp,
                pp=args.pp,
                steps=2,
                layers=8,
                vocab=8192,
                seed=9,
                faults=faults,
            )
        )
    cache = args.cache or work / "cache"
    cli = [sys.executable, "-c", "from paradiag.cli import main; main()"]
    if args.cache is None or not (cache / "manifest.json").exists():
        ingest = measure("ingest", [*cli, "ingest", str(job), "-o", str(cache)])
        if ingest.returncode:
            raise SystemExit(f"ingest failed:\n{ingest.output[-2000:]}")
    path = measure("critical path", [sys.executable, "-c", PATH, str(cache)])
    out = work / "trace.json.gz"
    export = measure("export", [*cli, "export", str(cache), "--perfetto", str(out)])
    for run in (path, export):
        if run.returncode:
            raise SystemExit(f"{run.label} failed:\n{run.output[-2000:]}")
    print(
        json.dumps(
            {
                "job": str(job),
                "critical_path": json.loads(path.output.strip().splitlines()[-1]),
                "export_s": round(export.seconds, 2),
                "export_peak_pss_mb": round(export.peak_pss_mb),
                "export_mb": round(out.stat().st_size / 1e6, 1),
                "export_says": export.output.strip().splitlines()[-1],
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
