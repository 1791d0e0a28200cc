"""Benchmark: ingest at scale, in one process, on ``--dask local:2`` and on a scheduler + 2 workers; then analyze.

    python benchmarks/scale.py [--ranks 256 1024] [--work DIR]

For each rank count, simulates an LLM job of that many ranks (TP2 x PP4 x DP ranks/8, 4 layers, 2 steps, one slow
rank; the same model at every size, so the ranks are alike and time per rank should not change with their number)
and ingests it three ways, each in a fresh process: ``--workers 1`` (one process), ``--dask local:2`` (a local
cluster of two worker processes), and ``--dask tcp://...`` through a ``dask scheduler`` and two ``dask worker``
processes started here on loopback. Per run: wall time, throughput (MB of trace per second, ranks per second),
the peak memory (PSS, sampled every 20 ms) of the client process and of the largest other process (a worker,
a nanny, the scheduler) and of everything together, and whether the cache equals the one-process cache (every
file byte for byte, the manifest but for its creation time). Then, on the one-process cache: the cross-rank
reduce of the analysis alone (``diagnose``, in a fresh process: the part of an ingest that stays on the client),
``paradiag analyze --json`` (goal at 1024 ranks: <= 5 s and <= 500 MB), and the cache's size.

The machine's load (``uptime``) is printed before and after: on a shared machine the times are upper bounds.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import cpu_ticks, process_tree, scratch, table

from paradiag.simulator import SimConfig, parse_fault, simulate

BIN = Path(sys.executable).parent
CLI = [sys.executable, "-c", "from paradiag.cli import main; main()"]
REDUCE = "import sys, paradiag; from paradiag.analysis.diagnose import diagnose; diagnose(paradiag.open(sys.argv[1]))"


@dataclass
class Run:
    label: str
    seconds: float = 0.0
    client_mb: float = 0.0  # peak PSS of the process that ran the command
    other_mb: float = 0.0  # peak PSS of the largest other process (a worker, a nanny, the scheduler)
    total_mb: float = 0.0  # peak PSS of all of them together
    cpu_s: float = 0.0  # user + system CPU time of all of them during the run (steadier than wall time on a busy machine)
    output: str = ""
    extra: dict[str, str] = field(default_factory=dict)


def _pss_kb(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            return next((int(line.split()[1]) for line in f if line.startswith("Pss:")), 0)
    except OSError:
        return 0


def measure(label: str, cmd: list[str], also: tuple[int, ...] = ()) -> Run:
    """Run ``cmd``; its wall time, the peak PSS of each process of its tree and of the trees of ``also``, and
    the CPU time they all spent meanwhile. Sampled every 0.1 s: reading a process's PSS walks its page tables,
    and on a busy machine a faster sampler would take the CPU it measures."""
    first = {
        p: cpu_ticks(p) for root in also for p in process_tree(root)
    }  # what the long-running ones had spent before
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    peaks: dict[int, int] = {}
    ticks: dict[int, int] = {}
    total = 0
    done = threading.Event()

    def sample() -> None:
        nonlocal total
        while not done.is_set():
            now = {p: _pss_kb(p) for root in (proc.pid, *also) for p in process_tree(root)}
            for p, kb in now.items():
                peaks[p] = max(peaks.get(p, 0), kb)
            for p in (p for root in also for p in process_tree(root)):
                ticks[p] = max(ticks.get(p, 0), cpu_ticks(p) - first.get(p, 0))
            total = max(total, sum(now.values()))
            time.sleep(0.1)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    output, _ = proc.communicate()
    run = Run(label, time.perf_counter() - t0, output=output)
    done.set()
    sampler.join()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    # The command's tree (exact, from the kernel's accounting) and the sampled CPU of the ``also`` processes.
    mine = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    run.cpu_s = mine + sum(ticks.values()) / os.sysconf("SC_CLK_TCK")
    if proc.returncode:
        raise SystemExit(f"{label} failed:\n{output[-3000:]}")
    run.client_mb = peaks.get(proc.pid, 0) / 1024
    run.other_mb = max((kb for p, kb in peaks.items() if p != proc.pid), default=0) / 1024
    run.total_mb = total / 1024
    return run


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def same_cache(cache: Path, expected: Path) -> bool:
    files = sorted(p.relative_to(expected) for p in expected.rglob("*") if p.is_file())
    if sorted(p.relative_to(cache) for p in cache.rglob("*") if p.is_file()) != files:
        return False
    if any(
        (cache / f).read_bytes() != (expected / f).read_bytes() for f in files if f.name != "manifest.json"
    ):
        return False
    manifests = [json.loads((c / "manifest.json").read_text()) for c in (cache, expected)]
    return all(m.pop("created") for m in manifests) and manifests[0] == manifests[1]


def through_scheduler(job: Path, cache: Path) -> Run:
    """``dask scheduler`` + two ``dask worker`` processes on loopback, ``paradiag ingest --dask`` through them."""
    from distributed import Client

    port = _free_port()
    address = f"tcp://127.0.0.1:{port}"
    quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
    procs = [
        subprocess.Popen(
            [BIN / "dask", "scheduler", "--host", "127.0.0.1", "--port", str(port), "--no-dashboard"], **quiet
        )
    ]
    try:
        worker = [BIN / "dask", "worker", address, "--nthreads", "1", "--host", "127.0.0.1", "--no-dashboard"]
        procs += [subprocess.Popen(worker, **quiet) for _ in range(2)]
        with Client(address, timeout=60) as client:
            client.wait_for_workers(2, timeout=120)
        return measure(
            "scheduler + 2 workers",
            [*CLI, "ingest", str(job), "-o", str(cache), "--dask", address],
            tuple(p.pid for p in procs),
        )
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait(timeout=60)


def one_size(ranks: int, work: Path) -> list[list[str]]:
    job, base = work / f"job{ranks}", work / f"cache{ranks}"
    t0 = time.perf_counter()
    faults = (parse_fault("slow_device:ranks=5,factor=1.3"),)
    simulate(
        SimConfig(
            output=job,
            dp=ranks // 8,
            tp=2,
            pp=4,
            layers=4,
            hidden=512,
            seq_len=256,
            vocab=4096,
            steps=2,
            faults=faults,
            seed=3,
        )
    )
    size_mb = sum(f.stat().st_size for f in job.rglob("*") if f.is_file()) / 1e6
    print(
        f"{ranks} ranks: {size_mb:.0f} MB of trace simulated in {time.perf_counter() - t0:.0f} s", flush=True
    )
    runs = [measure("one process", [*CLI, "ingest", str(job), "-o", str(base / "one"), "--workers", "1"])]
    runs.append(
        measure("--dask local:2", [*CLI, "ingest", str(job), "-o", str(base / "local2"), "--dask", "local:2"])
    )
    runs.append(through_scheduler(job, base / "sched"))
    for run, folder in zip(runs, ("one", "local2", "sched"), strict=True):
        run.extra["same"] = "yes" if folder == "one" or same_cache(base / folder, base / "one") else "NO"
    reduce = measure("reduce (diagnose)", [sys.executable, "-c", REDUCE, str(base / "one")])
    analyze = measure("analyze --json", [*CLI, "analyze", str(base / "one"), "--json"])
    cache_mb = sum(f.stat().st_size for f in (base / "one").rglob("*") if f.is_file()) / 1e6
    rows = []
    for run in [*runs, reduce, analyze]:
        ingest = run in runs
        rows.append(
            [
                str(ranks),
                run.label,
                f"{run.seconds:.1f}",
                f"{run.cpu_s:.1f}",
                f"{size_mb / run.seconds:.1f}" if ingest else "",
                f"{ranks / run.seconds:.1f}" if ingest else "",
                f"{run.client_mb:.0f}",
                f"{run.other_mb:.0f}" if run.other_mb else "",
                f"{run.total_mb:.0f}",
                run.extra.get("same", ""),
                f"{cache_mb:.0f}" if ingest else "",
            ]
        )
    shutil.rmtree(job)
    shutil.rmtree(base)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--ranks", type=int, nargs="+", default=[256, 1024], help="rank counts (multiples of 8)"
    )
    parser.add_argument(
        "--work", type=Path, default=None, help="scratch folder (default: a temporary one, removed at exit)"
    )
    args = parser.parse_args()
    work = args.work or scratch("paradiag-scale-")
    print("load before:", os.popen("uptime").read().strip(), f"({os.cpu_count()} cores)", flush=True)
    head = [
        "ranks",
        "run",
        "s",
        "CPU s",
        "MB/s",
        "ranks/s",
        "client MB",
        "largest other MB",
        "all MB",
        "same cache",
        "cache MB",
    ]
    rows = [head]
    for ranks in args.ranks:
        rows += one_size(ranks, work)
        print(table(rows), flush=True)  # after each size: a long run shows what it has so far
    print("load after:", os.popen("uptime").read().strip())


if __name__ == "__main__":
    main()
