"""Ingest speed and memory: paradiag against Meta's HTA on the same folder, side by side.

    python benchmarks/ingest.py                       # builds /tmp/paradiag-bench/kineto-8x50 once, then measures
    python benchmarks/ingest.py --folder DIR          # any folder of Kineto traces with distributedInfo.rank
    python benchmarks/ingest.py --simulate            # the folder comes from paradiag's simulator instead

Prints, for each tool run as a subprocess with one parser process per core: wall time, MB/s (of uncompressed JSON),
CPU seconds of the whole process tree (user + system) and MB per CPU-second (on a shared machine the wall time
depends on the neighbours, the CPU time much less), events/s, peak memory (PSS) of the process tree and per event;
then the ratios to HTA, and how much faster reopening from the Parquet cache is than parsing. Goals (issue 14):
>= 30x HTA's throughput at <= 0.2x its peak memory on >= 8 ranks x >= 50 MB of JSON, >= 150 MB of JSON per
CPU-second, reopening >= 30x faster than parsing.
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import SHARED, hta_python, measure, precompile, table

REAL_RANK = SHARED / "traces" / "gpu" / "hta_16rank_job_rank0" / "rank0.json.gz"

HTA_SCRIPT = """
import sys
from hta.trace_analysis import TraceAnalysis
ta = TraceAnalysis(trace_dir=sys.argv[1])
print("events", sum(len(ta.t.get_trace(r)) for r in ta.t.get_ranks()))
"""

PARADIAG_PARSE = """
import sys, paradiag
job = paradiag.open(sys.argv[1], sys.argv[2], refresh=True)
print("events", sum(job.ranks.column("num_events").to_pylist()))
"""

# In one process: parse (cache rebuilt), then reopen from the cache and read every event, best of 3.
PARADIAG_REOPEN = """
import sys, time, paradiag
t = time.perf_counter(); paradiag.open(sys.argv[1], sys.argv[2], refresh=True); parse = time.perf_counter() - t
best = 1e9
for _ in range(3):
    t = time.perf_counter(); job = paradiag.open(sys.argv[1], sys.argv[2]); n = job.events().num_rows
    best = min(best, time.perf_counter() - t)
print("events", n)
print("parse", parse, "reopen", best)
"""


def retimed_folder(folder: Path, ranks: int, min_mb: float) -> Path:
    """``ranks`` copies of a real 25 MB rank, each repeated in time until it holds >= ``min_mb`` MB of JSON."""
    if folder.exists() and len(list(folder.glob("rank*.json"))) == ranks:
        return folder
    doc = json.loads(gzip.decompress(REAL_RANK.read_bytes()))
    events = doc["traceEvents"]
    span = max(e["ts"] + e.get("dur", 0) for e in events if "ts" in e) - min(
        e["ts"] for e in events if "ts" in e
    )
    copies = []
    size = len(json.dumps(doc))
    k = 0
    while size * (k + 1) < min_mb * 1e6:
        k += 1
        copies.append(_shifted(events, k, span))
    doc["traceEvents"] = events + [e for c in copies for e in c]
    folder.mkdir(parents=True, exist_ok=True)
    for r in range(ranks):
        doc["distributedInfo"] = {"backend": "nccl", "rank": r, "world_size": ranks}
        (folder / f"rank{r}.json").write_text(json.dumps(doc))
    return folder


def _shifted(events: list[dict], k: int, span: float) -> list[dict]:
    """A copy of the events later in time by k spans, with step numbers and ids that do not collide."""
    out = []
    for e in events:
        e = dict(e)
        if "ts" in e:
            e["ts"] = e["ts"] + k * (span + 1000)
        name = e.get("name", "")
        if isinstance(name, str) and name.startswith("ProfilerStep#"):
            e["name"] = f"ProfilerStep#{int(name.split('#')[1]) + 10 * k}"
        args = e.get("args")
        if isinstance(args, dict):
            args = dict(args)
            for key in ("correlation", "External id"):
                if isinstance(args.get(key), int) and args[key] >= 0:
                    args[key] += k * 10_000_000
            e["args"] = args
        if isinstance(e.get("id"), int):
            e["id"] += k * 10_000_000
        out.append(e)
    return out


def simulated_folder(folder: Path, ranks: int, min_mb: float) -> Path:
    """A data-parallel 24-layer LLM job from paradiag's simulator, with enough steps for >= ``min_mb`` MB of JSON
    per rank (8 micro-batches per step: about 4.9 MB a step). The ground truth is moved beside the folder, since HTA
    would read it as a trace."""
    from click.testing import CliRunner

    from paradiag.simulator.cli import simulate

    if folder.exists() and any(folder.glob("*.json")):
        return folder
    steps = max(2, math.ceil(min_mb / 4.5))
    args = [
        "--model",
        "llm",
        "--layers",
        "24",
        "--dp",
        str(ranks),
        "--microbatches",
        "8",
        "--steps",
        str(steps),
    ]
    result = CliRunner().invoke(
        simulate, [*args, "--format", "kineto", "--quiet", "-o", str(folder)], catch_exceptions=False
    )
    if result.exit_code != 0:
        raise SystemExit(result.output)
    (folder / "ground_truth.json").replace(folder.parent / f"{folder.name}.ground_truth.json")
    return folder


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--folder", type=Path, help="folder of Kineto traces (default: built under /tmp)")
    parser.add_argument("--ranks", type=int, default=8)
    parser.add_argument("--mb", type=float, default=50, help="minimum MB of JSON per rank")
    parser.add_argument("--simulate", action="store_true", help="build the folder with paradiag's simulator")
    parser.add_argument("--no-hta", action="store_true", help="measure paradiag alone")
    args = parser.parse_args()

    base = Path(tempfile.gettempdir()) / "paradiag-bench"
    folder = args.folder or (
        simulated_folder(base / f"sim-{args.ranks}x{args.mb:.0f}", args.ranks, args.mb)
        if args.simulate
        else retimed_folder(base / f"kineto-{args.ranks}x{args.mb:.0f}", args.ranks, args.mb)
    )
    files = sorted(p for p in folder.rglob("*.json*") if p.is_file() and p.name != "ground_truth.json")
    json_mb = (
        sum(len(gzip.decompress(p.read_bytes())) if p.suffix == ".gz" else p.stat().st_size for p in files)
        / 1e6
    )
    print(f"folder {folder}: {len(files)} files, {json_mb:.0f} MB of JSON")

    precompile()
    cache = Path(tempfile.mkdtemp(prefix="paradiag-bench-cache-"))
    try:
        ours = measure(
            "paradiag ingest", [sys.executable, "-c", PARADIAG_PARSE, str(folder), str(cache / "c")]
        )
        reopen = measure(
            "paradiag parse, then reopen",
            [sys.executable, "-c", PARADIAG_REOPEN, str(folder), str(cache / "c")],
        )
        runs = [ours, reopen]
        if not args.no_hta:
            runs.append(measure("HTA 0.5 TraceAnalysis", [hta_python(), "-c", HTA_SCRIPT, str(folder)]))
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    # CPU seconds (user + system of the whole process tree) next to wall time: on a shared machine the wall time
    # depends on the neighbours, MB per CPU-second on the tool alone.
    rows = [["tool", "seconds", "MB/s", "CPU s", "MB/CPU-s", "events", "events/s", "peak PSS MB", "B/event"]]
    for run in runs:
        if run.returncode != 0:
            print(f"{run.label} failed:\n{run.output[-3000:]}")
            continue
        events = int(next(line.split()[1] for line in run.output.splitlines() if line.startswith("events")))
        rows.append(
            [
                run.label,
                f"{run.seconds:.2f}",
                f"{json_mb / run.seconds:.0f}",
                f"{run.cpu_seconds:.2f}",
                f"{json_mb / run.cpu_seconds:.0f}",
                f"{events:,}",
                f"{events / run.seconds:,.0f}",
                f"{run.peak_pss_mb:.0f}",
                f"{run.peak_pss_mb * 2**20 / events:.0f}",
            ]
        )
    print(table(rows))
    if reopen.returncode == 0:
        words = next(line.split() for line in reopen.output.splitlines() if line.startswith("parse"))
        parse_s, reopen_s = float(words[1]), float(words[3])
        print(
            f"in one process: parse {parse_s:.2f} s, reopen from cache and read all events {reopen_s:.3f} s: {parse_s / reopen_s:.0f}x faster"
        )
    if len(runs) == 3 and runs[2].returncode == 0:
        hta = runs[2]
        print(
            f"paradiag vs HTA: {hta.seconds / ours.seconds:.1f}x the throughput ({hta.cpu_seconds / ours.cpu_seconds:.1f}x per"
            f" CPU-second) at {ours.peak_pss_mb / hta.peak_pss_mb:.2f}x the peak memory"
        )


if __name__ == "__main__":
    main()
