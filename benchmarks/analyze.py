"""Benchmark: analysing a job must cost at most a fifth of ingesting it.

    python benchmarks/analyze.py [--format kineto|ascend] [--small] [--job DIR]

Simulates the issue's 64-rank, 4-step, 24-layer LLM job (DP4 x TP4 x PP4, 8 micro-batches, one slow rank) unless
``--job`` names an existing folder, then times, each in a fresh process: the ingest (parse + cache), reopening the
cache and reading every rank's device events, and ``paradiag analyze --json`` on the cached job (open + every analysis + the report). It prints the
figures and the ratio analyse / ingest (goal <= 0.2).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import measure

from paradiag.simulator import SimConfig, parse_fault, simulate

JOB = {"dp": 4, "tp": 4, "pp": 4, "schedule": "1f1b", "microbatches": 8, "steps": 4, "layers": 24, "hidden": 2048, "seq_len": 2048}
SMALL = {**JOB, "layers": 8, "steps": 2, "microbatches": 4}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--format", choices=("kineto", "ascend"), default="kineto")
    parser.add_argument("--small", action="store_true", help="8 layers, 2 steps: a quick run")
    parser.add_argument("--job", type=Path, default=None, help="an existing trace folder instead of a simulated one")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="paradiag-analyze-bench-"))
    job = args.job
    if job is None:
        job = work / "job"
        device = "910b" if args.format == "ascend" else "h100"
        faults = (parse_fault("slow_device:ranks=21,factor=1.3"),)
        simulate(SimConfig(output=job, device=device, format=args.format, seed=1, faults=faults, **(SMALL if args.small else JOB)))
    cache = work / "cache"
    cli = [sys.executable, "-c", "from paradiag.cli import main; main()"]
    ingest = measure("ingest", [*cli, "ingest", str(job), "-o", str(cache)])
    read = f"import paradiag; from paradiag.analysis.frame import job_frame; job_frame(paradiag.open({str(cache)!r}))"
    reopen = measure("reopen", [sys.executable, "-c", read])
    analyze = measure("analyze", [*cli, "analyze", str(cache), "--json"])
    for run in (ingest, reopen, analyze):
        if run.returncode:
            raise SystemExit(f"{run.label} failed:\n{run.output[-2000:]}")
    report = json.loads(analyze.output)
    print(
        json.dumps(
            {
                "job": str(job),
                "ranks": report["job"]["num_ranks"],
                "events": report["job"]["num_events"],
                "ingest_s": round(ingest.seconds, 2),
                "reopen_s": round(reopen.seconds, 2),
                "analyze_s": round(analyze.seconds, 2),
                "analyze_over_ingest": round(analyze.seconds / ingest.seconds, 3),
                "goal": "<= 0.2",
                "peak_pss_mb": {"ingest": round(ingest.peak_pss_mb), "analyze": round(analyze.peak_pss_mb)},
                "top_finding": report["findings"][0] if report["findings"] else None,
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
