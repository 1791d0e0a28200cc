"""Benchmark: what a cache at an ``s3://`` URL costs against a local one (paradiag.remote).

    python benchmarks/remote_cache.py [--ranks 64 256]

Simulates an LLM job per rank count (TP2 x PP4 x DP ranks/8, 4 layers, 2 steps, one slow rank: as
benchmarks/scale.py) and starts ``moto_server`` (moto's S3 server, a separate process) on loopback. Then, each in a
fresh process: ``paradiag ingest`` into a local folder and into ``s3://bench/jobN`` (``--workers 2``), ``paradiag
analyze --json`` on the local cache, on the URL from an empty local cache root (the generation is downloaded:
a cold reader) and again (the mirror is there: only the pointer is read). Per run: wall time, CPU seconds of the
process tree (every process's user + system ticks, sampled every 20 ms: worker processes a fork server started
are not the command's waited-for children, so rusage alone would miss them), peak PSS of the tree, and the HTTP
requests the S3 server answered (counted from its log). A
loopback server has no latency and unlimited bandwidth: against a real store add its round trips (the requests,
mostly in parallel batches) and the cache's size over its bandwidth.
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import measure, scratch, table

from paradiag.simulator import SimConfig, parse_fault, simulate

BIN = Path(sys.executable).parent
CLI = [sys.executable, "-c", "from paradiag.cli import main; main()"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _requests(log: Path) -> int:
    return sum(
        1
        for line in log.read_text(errors="replace").splitlines()
        if '" 20' in line or '" 30' in line or '" 40' in line
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--ranks", type=int, nargs="+", default=[64, 256])
    args = parser.parse_args()
    work = scratch("paradiag-remote-bench-")
    port = _free_port()
    env = {
        "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}",
        "AWS_ACCESS_KEY_ID": "bench",
        "AWS_SECRET_ACCESS_KEY": "bench",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_EC2_METADATA_DISABLED": "true",
    }
    os.environ.update(env)
    log = work / "moto.log"
    with open(log, "w") as sink:
        server = subprocess.Popen(
            [BIN / "moto_server", "-H", "127.0.0.1", "-p", str(port)], stdout=sink, stderr=subprocess.STDOUT
        )
    try:
        import fsspec

        fs = fsspec.filesystem("s3")
        for _ in range(100):
            try:
                fs.mkdir("bench")
                break
            except OSError:
                time.sleep(0.1)
        print(f"load before: {os.getloadavg()[0]:.1f}")
        rows = [["ranks", "run", "wall s", "CPU s", "peak MB", "requests"]]
        for ranks in args.ranks:
            job = work / f"job{ranks}"
            faults = (parse_fault("slow_device:ranks=1,factor=1.4"),)
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
            url = f"s3://bench/job{ranks}"
            local = work / f"cache{ranks}"
            runs = [
                (
                    "ingest -o local folder",
                    ["ingest", str(job), "-o", str(local), "--workers", "2"],
                    work / "root-a",
                ),
                (f"ingest -o {url}", ["ingest", str(job), "-o", url, "--workers", "2"], work / "root-b"),
                ("analyze --json local folder", ["analyze", "--json", str(local)], work / "root-a"),
                ("analyze --json URL, cold (downloads)", ["analyze", "--json", url], work / f"root-c{ranks}"),
                ("analyze --json URL, warm (mirror)", ["analyze", "--json", url], work / f"root-c{ranks}"),
            ]
            for label, cmd, root in runs:
                before = _requests(log)
                run = measure(" ".join(cmd), [*CLI, *cmd], {"PARADIAG_CACHE_DIR": str(root)})
                seconds, cpu, peak, output, code = (
                    run.seconds,
                    run.cpu_seconds,
                    run.peak_pss_mb,
                    run.output,
                    run.returncode,
                )
                if code:
                    raise SystemExit(f"{label} failed:\n{output[-3000:]}")
                time.sleep(0.2)  # the server's log line of the last request
                rows.append(
                    [
                        str(ranks),
                        label,
                        f"{seconds:.2f}",
                        f"{cpu:.2f}",
                        f"{peak:.0f}",
                        str(_requests(log) - before),
                    ]
                )
            size = sum(p.stat().st_size for p in local.rglob("*") if p.is_file())
            files = sum(1 for p in local.rglob("*") if p.is_file())
            print(f"{ranks} ranks: cache {size / 1e6:.1f} MB in {files} files")
        print(table(rows))
        print(f"load after: {os.getloadavg()[0]:.1f}")
    finally:
        server.terminate()
        server.wait(timeout=30)


if __name__ == "__main__":
    main()
