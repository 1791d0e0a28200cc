"""Benchmark: ``paradiag analyze`` on a cached job, and the dashboard's precompute before ``paradiag serve`` listens.

    python benchmarks/analyze.py [--format kineto|ascend] [--small] [--job DIR] [--cache DIR]

The analysis runs once, at ingest, and its Diagnosis is stored in the cache; ``analyze`` and the app then only read
and shape it. Simulates the 64-rank, 4-step, 24-layer LLM job (DP4 x TP4 x PP4, 8 micro-batches, one slow rank)
unless ``--job`` names an existing trace folder. Each step runs in a fresh process: the ingest (parse + cache +
diagnosis; skipped when ``--cache`` already holds a current cache of the job, whose Diagnosis is then opened, or
computed again where another analysis version wrote it or ``--rediagnose`` removed it: the client's reduce over the
stored per-rank tables), reopening the cache and reading the device events the reduce still reads
(``diagnose.read_frame``), ``paradiag analyze --json`` on the cache, and the app's once-per-job aggregates
(``app.warm.warm``: what ``paradiag serve`` computes before it listens). Prints wall time, CPU time (user +
system of the process tree) and peak memory (PSS of the process tree) of each.

The issue-13 job: ``paradiag simulate --dp 16 --tp 8 --pp 8 --microbatches 16 --steps 2 --layers 16 --vocab 8192
--inject slow_device:ranks=333,factor=1.3 --seed 9 -o j1024``, then ``--job j1024 --cache <dir>``. Goals: analyze
<= 5 s and <= 500 MB, app precompute <= 5 s.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import measure, scratch

from paradiag.simulator import SimConfig, parse_fault, simulate

JOB = {
    "dp": 4,
    "tp": 4,
    "pp": 4,
    "schedule": "1f1b",
    "microbatches": 8,
    "steps": 4,
    "layers": 24,
    "hidden": 2048,
    "seq_len": 2048,
}
SMALL = {**JOB, "layers": 8, "steps": 2, "microbatches": 4}
# Times, in a fresh process, the aggregates warm() computes before the server listens (not the step views it
# leaves to a background thread).
APP = """
import sys, time
from pathlib import Path
from paradiag.app.config import Config
from paradiag.app.factory import create_app
from paradiag.app.warm import warm
app = create_app(Config.from_env(job=sys.argv[1], app_cache_dir=Path(sys.argv[2])))
t = time.perf_counter()
warm(app, "served")
print(f"{time.perf_counter() - t:.3f}", flush=True)
import os
os._exit(0)
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--format", choices=("kineto", "ascend"), default="kineto")
    parser.add_argument("--small", action="store_true", help="8 layers, 2 steps: a quick run")
    parser.add_argument(
        "--job", type=Path, default=None, help="an existing trace folder instead of a simulated one"
    )
    parser.add_argument(
        "--cache", type=Path, default=None, help="the cache folder to use (ingested only when not current)"
    )
    parser.add_argument(
        "--rediagnose",
        action="store_true",
        help="remove the --cache's stored Diagnosis first: times the reduce",
    )
    args = parser.parse_args()
    work = scratch("paradiag-analyze-bench-")
    job = args.job
    if job is None:
        job = work / "job"
        device = "910b" if args.format == "ascend" else "h100"
        faults = (parse_fault("slow_device:ranks=21,factor=1.3"),)
        simulate(
            SimConfig(
                output=job,
                device=device,
                format=args.format,
                seed=1,
                faults=faults,
                **(SMALL if args.small else JOB),
            )
        )
    cache = args.cache or work / "cache"
    cli = [sys.executable, "-c", "from paradiag.cli import main; main()"]
    runs = {}
    if args.cache is None or not (cache / "manifest.json").exists():
        runs["ingest"] = measure("ingest", [*cli, "ingest", str(job), "-o", str(cache)])
    else:  # a reused cache whose Diagnosis another analysis version wrote is diagnosed again first (timed apart)
        if args.rediagnose:
            shutil.rmtree(cache / "diagnosis", ignore_errors=True)
        runs["diagnosis"] = measure(
            "diagnosis", [sys.executable, "-c", f"import paradiag; paradiag.open({str(cache)!r}).diagnosis()"]
        )
    read = f"import paradiag; from paradiag.analysis.diagnose import read_frame; read_frame(paradiag.open({str(cache)!r}))"
    runs["reopen"] = measure("reopen", [sys.executable, "-c", read])
    runs["analyze"] = measure("analyze", [*cli, "analyze", str(cache), "--json"])
    runs["app"] = measure("app", [sys.executable, "-c", APP, str(cache), str(work / "app-cache")])
    for run in runs.values():
        if run.returncode:
            raise SystemExit(f"{run.label} failed:\n{run.output[-2000:]}")
    report = json.loads(runs["analyze"].output)
    print(
        json.dumps(
            {
                "job": str(job),
                "ranks": report["job"]["num_ranks"],
                "events": report["job"]["num_events"],
                "ingest_s": round(runs["ingest"].seconds, 2) if "ingest" in runs else "cache reused",
                "open_or_rediagnose_s": round(runs["diagnosis"].seconds, 2) if "diagnosis" in runs else None,
                "reopen_and_read_events_s": round(runs["reopen"].seconds, 2),
                "analyze_s": round(runs["analyze"].seconds, 2),
                "app_precompute_s": float(runs["app"].output.strip().splitlines()[-1]),
                "app_process_s": round(runs["app"].seconds, 2),
                "cpu_s": {k: round(r.cpu_seconds, 2) for k, r in runs.items()},
                "peak_pss_mb": {k: round(r.peak_pss_mb) for k, r in runs.items()},
                "goals": {"analyze_s": "<= 5", "analyze_peak_mb": "<= 500", "app_precompute_s": "<= 5"},
                "top_finding": report["findings"][0] if report["findings"] else None,
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
