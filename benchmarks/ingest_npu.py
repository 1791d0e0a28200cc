"""paradiag's Ascend parser against msprof-analyze on the same NPU job folders, side by side.

    python benchmarks/ingest_npu.py                    # the shared NPU jobs
    python benchmarks/ingest_npu.py --scale 60 --repeat 3   # + the text Level1 job re-timed 60x (about 265 MB)
    python benchmarks/ingest_npu.py DIR ... [--msprof PATH] [--simulate]

Every tool runs as its own subprocess and is measured the same way as benchmarks/ingest.py (benchmarks/common.py
``measure()``): wall time, and the peak PSS of its whole process tree. MB/s is over the bytes of the rank folders;
events/s over the JSON elements of their timelines (trace_view.json), the same count for every tool.

What each tool does with a folder:
- ``paradiag ingest``: ``paradiag.open(folder, refresh=True)``: every rank parsed (timeline, CSV/JSON summaries or
  the db), aligned and written to the Parquet cache, one parser process per core;
- ``paradiag parse``: ``ascend.parse`` of each rank in one process, nothing written (the parser alone);
- ``msprof-analyze cluster -m all``: in text mode it reads **only the summaries** (step_trace_time.csv,
  communication.json, communication_matrix.json), never trace_view.json: its cost does not grow with the
  timeline, so on a large job it does far less work than paradiag;
- ``msprof-analyze compare -d rank0 -bp rank1``: the peer's mode that does read the timeline (trace_view.json
  with ijson, plus kernel_details.csv / operator_memory.csv) of two ranks: the like-for-like comparison of
  parsing throughput. Run on the job's first two ranks; paradiag's rows then cover those two ranks too.
The goal (issue 4, as issue 2 for Kineto): >= 10x the peer's throughput at <= 1/4 of its peak memory.
The peer: ~/.cache/paradiag-peers/msprof/bin/msprof-analyze (or $PARADIAG_MSPROF, or --msprof);
install with python3 -m venv DIR && DIR/bin/pip install msprof-analyze.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

import msgspec

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import SHARED, Run, measure, table

SHARED_NPU = SHARED / "traces" / "npu"
BENCH = Path(tempfile.gettempdir()) / "paradiag-bench"
PLACEHOLDER = Path("/OUT")  # replaced by a fresh output folder for each run
MSPROF = Path(
    os.environ.get(
        "PARADIAG_MSPROF", Path.home() / ".cache" / "paradiag-peers" / "msprof" / "bin" / "msprof-analyze"
    )
)
PARSE = """
import sys
from pathlib import Path
from paradiag.parsers import ascend
root = Path(sys.argv[1])
print("events", sum(ascend.parse(root / d, root).events.num_rows for d in sys.argv[2:]))
"""
INGEST = """
import sys, paradiag
job = paradiag.open(sys.argv[1], sys.argv[2], refresh=True)
print("events", sum(job.ranks.column("num_events").to_pylist()))
"""


def rank_folders(job: Path) -> list[Path]:
    return sorted(d for d in job.iterdir() if d.is_dir() and d.name.endswith(("_ascend_pt", "_ascend_ms")))


def folder_bytes(folders: list[Path]) -> int:
    return sum(p.stat().st_size for f in folders for p in f.rglob("*") if p.is_file())


def timeline_elements(folders: list[Path]) -> int:
    decoder = msgspec.json.Decoder(list[msgspec.Raw])
    files = [f / "ASCEND_PROFILER_OUTPUT" / "trace_view.json" for f in folders]
    return sum(len(decoder.decode(p.read_bytes())) for p in files if p.is_file())


def two_rank_job(job: Path, tmp: Path) -> Path:
    """The job's first two ranks (links), for the peer's two-rank compare and paradiag on the same input."""
    ranks = rank_folders(job)
    if len(ranks) == 2:
        return job
    out = tmp / f"{job.name}_first2"
    out.mkdir(parents=True, exist_ok=True)
    for r in ranks[:2]:
        if not (out / r.name).exists():
            (out / r.name).symlink_to(r)
    return out


def scaled_job(source: Path, copies: int) -> Path:
    """A larger text job made by re-timing a real one (cached under the temp dir): each rank's timeline and
    kernel_details.csv are repeated ``copies`` times, each copy shifted past the previous one, ProfilerStep and
    Step Id renumbered; the other summaries are copied as they are."""
    out = BENCH / f"{source.name}_x{copies}"
    if (out / ".complete").exists():
        return out
    shutil.rmtree(out, ignore_errors=True)
    for rank in rank_folders(source):
        dst = out / rank.name
        shutil.copytree(rank, dst, ignore=shutil.ignore_patterns("trace_view.json", "kernel_details.csv"))
        output = rank / "ASCEND_PROFILER_OUTPUT"
        events = json.loads((output / "trace_view.json").read_bytes())
        times = [
            int(e["ts"].replace(".", "")) if isinstance(e.get("ts"), str) and "." in e["ts"] else None
            for e in events
        ]
        span = max(t for t in times if t) - min(t for t in times if t) + 1000
        copied = [e for e in events if e.get("ph") == "M"]
        for i in range(copies):
            for e, t in zip(events, times, strict=True):
                if e.get("ph") == "M" or t is None:
                    continue
                shifted = dict(e, ts=f"{(t + i * span) // 1000}.{(t + i * span) % 1000:03d}")
                if e.get("name", "").startswith("ProfilerStep#"):
                    shifted["name"] = f"ProfilerStep#{1000 + i}"
                copied.append(shifted)
        (dst / "ASCEND_PROFILER_OUTPUT" / "trace_view.json").write_text(json.dumps(copied))
        _scale_kernels(
            output / "kernel_details.csv", dst / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv", copies, span
        )
    (out / ".complete").write_text("")
    return out


def _scale_kernels(src: Path, dst: Path, copies: int, span_ns: int) -> None:
    if not src.is_file():
        return
    with open(src, newline="") as f:
        rows = list(csv.reader(f))
    header = [h.strip() for h in rows[0]]
    start, step = header.index("Start Time(us)"), header.index("Step Id") if "Step Id" in header else None
    with open(dst, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(rows[0])
        for i in range(copies):
            for row in rows[1:]:
                row = list(row)
                t = int(row[start].strip().replace(".", "")) + i * span_ns
                row[start] = f"{t // 1000}.{t % 1000:03d}\t"
                if step is not None:
                    row[step] = str(1000 + i)
                writer.writerow(row)


def simulated_job() -> Path | None:
    """An 8-rank Ascend job from the simulator (cached under the temp dir)."""
    try:
        from paradiag.simulator.config import SimConfig
        from paradiag.simulator.run import simulate
    except ImportError:
        return None
    out = BENCH / "sim_ascend_dp2_tp2_pp2"
    if not out.exists():
        simulate(SimConfig(output=out, format="ascend", dp=2, tp=2, pp=2, steps=4, layers=24))
    return out


def tools(job: Path, msprof: Path | None, out: Path) -> list[tuple[str, list[str]]]:
    ranks = rank_folders(job)
    cmds = [
        ("paradiag ingest", [sys.executable, "-c", INGEST, str(job), str(out / "cache")]),
        ("paradiag parse (1 process)", [sys.executable, "-c", PARSE, str(job), *(r.name for r in ranks)]),
    ]
    if msprof is not None:
        cmds.append(
            (
                "msprof-analyze cluster -m all (summaries only)",
                [str(msprof), "cluster", "-d", str(job), "-m", "all", "-o", str(out / "cluster")],
            )
        )
        if len(ranks) >= 2:
            cmds.append(
                (
                    "msprof-analyze compare (reads the timelines)",
                    [
                        str(msprof),
                        "compare",
                        "-d",
                        str(ranks[0]),
                        "-bp",
                        str(ranks[1]),
                        "-o",
                        str(out / "compare"),
                    ],
                )
            )
    return cmds


def run_job(job: Path, msprof: Path | None, repeat: int) -> None:
    ranks = rank_folders(job)
    mb = folder_bytes(ranks) / 1e6
    elements = timeline_elements(ranks)
    print(f"\n{job.name}: {len(ranks)} ranks, {mb:.1f} MB, {elements:,} timeline events")
    best: dict[str, Run] = {}
    spread: dict[str, tuple[list[float], list[float]]] = {}
    cpu: dict[str, list[float]] = {}
    for label, cmd in tools(job, msprof, PLACEHOLDER):
        for _ in range(repeat):
            out = Path(tempfile.mkdtemp(prefix="ingest-npu-"))
            try:
                run = measure(label, _outputs(cmd, out))
            finally:
                shutil.rmtree(out, ignore_errors=True)
            if run.returncode != 0:
                print(f"  {label} failed ({run.returncode}): {run.output.strip()[-400:]}")
                break
            seconds, pss = spread.setdefault(label, ([], []))
            seconds.append(run.seconds)
            pss.append(run.peak_pss_mb)
            cpu.setdefault(label, []).append(run.cpu_seconds)
            if label not in best or run.seconds < best[label].seconds:
                best[label] = run
    rows = [
        ["tool", "best s", "s range", "MB/s", "events/s", "CPU s", "MB/CPU-s", "peak PSS MB", "PSS range"]
    ]
    for label, run in best.items():
        seconds, pss = spread[label]
        cpu_s = min(cpu[label])
        rows.append([label, f"{run.seconds:.2f}", f"{min(seconds):.2f}-{max(seconds):.2f}", f"{mb / run.seconds:.1f}",
                     f"{elements / run.seconds:,.0f}", f"{cpu_s:.2f}", f"{mb / cpu_s:.1f}" if cpu_s else "-",
                     f"{min(pss):.0f}", f"{min(pss):.0f}-{max(pss):.0f}"])  # fmt: skip
    print(table(rows))
    ours = best.get("paradiag ingest")
    for label, peer in best.items():
        if ours is not None and label.startswith("msprof"):
            peer_pss = min(spread[label][1])
            ours_pss = min(spread["paradiag ingest"][1])
            print(f"  paradiag ingest vs {label}: {peer.seconds / ours.seconds:.1f}x the throughput "
                  f"({min(cpu[label]) / min(cpu['paradiag ingest']):.1f}x per CPU-second) at "
                  f"{ours_pss / peer_pss:.2f}x the peak memory (median s: {statistics.median(spread['paradiag ingest'][0]):.2f} "
                  f"vs {statistics.median(spread[label][0]):.2f})")  # fmt: skip


def _outputs(cmd: list[str], out: Path) -> list[str]:
    """The command with its output folders placed in ``out`` (a fresh folder per run)."""
    return [
        str(out / c.removeprefix(f"{PLACEHOLDER}/")) if c.startswith(f"{PLACEHOLDER}/") else c for c in cmd
    ]


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("folders", nargs="*", type=Path)
    parser.add_argument("--msprof", type=Path, default=MSPROF)
    parser.add_argument("--simulate", action="store_true", help="also a simulated 8-rank Ascend job")
    parser.add_argument(
        "--scale", type=int, default=0, help="also the text Level1 job re-timed N times larger"
    )
    parser.add_argument(
        "--repeat", type=int, default=1, help="runs per tool; the best and the range are shown"
    )
    parser.add_argument("--only-scaled", action="store_true", help="with --scale: the scaled job only")
    args = parser.parse_args()
    jobs = list(args.folders)
    if not jobs and not args.only_scaled and SHARED_NPU.is_dir():
        jobs = sorted(d for d in SHARED_NPU.iterdir() if rank_folders(d))
    if args.simulate and (sim := simulated_job()) is not None:
        jobs.append(sim)
    level1 = SHARED_NPU / "msinsight_alexnet_dp8_text_level1"
    if args.scale > 1 and level1.is_dir():
        jobs.append(scaled_job(level1, args.scale))
    msprof = args.msprof if args.msprof.is_file() else None
    if msprof is None:
        print(f"msprof-analyze not found at {args.msprof}: paradiag only")
    for job in jobs:
        run_job(job, msprof, args.repeat)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
