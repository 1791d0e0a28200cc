"""Benchmark: generate the issue's 64-rank, 4-step, 24-layer LLM job and report wall time, size and events.

    python benchmarks/simulate.py [--format kineto|ascend] [--gzip] [--out DIR]

Target (issue 3): <= 60 s on the 2-core reference machine. Each run is a fresh process, so the peak RSS
reported is the simulator's own.
"""

from __future__ import annotations

import argparse
import json
import resource
import tempfile
import time
from pathlib import Path

from paradiag.simulator import SimConfig, simulate

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


def _count_events(path: Path) -> int:
    if path.is_dir():
        return len(json.loads((path / "ASCEND_PROFILER_OUTPUT" / "trace_view.json").read_text()))
    import gzip

    raw = path.read_bytes()
    return len(json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)["traceEvents"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--format", choices=("kineto", "ascend"), default="kineto")
    parser.add_argument("--gzip", action="store_true")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="paradiag-sim-bench-"))
    device = "910b" if args.format == "ascend" else "h100"
    config = SimConfig(output=out, device=device, format=args.format, gzip=args.gzip, seed=1, **JOB)
    started = time.perf_counter()
    simulate(config)
    elapsed = time.perf_counter() - started
    truth = json.loads((out / "ground_truth.json").read_text())
    size = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    events = _count_events(out / truth["files"]["0"])
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(
        json.dumps(
            {
                "ranks": truth["layout"]["world_size"],
                "steps": len(truth["schedule"]["steps"]),
                "format": args.format,
                "gzip": args.gzip,
                "seconds": round(elapsed, 2),
                "bytes": size,
                "events_rank0": events,
                "peak_rss_mb": round(rss_mb, 1),
                "output": str(out),
            }
        )
    )


if __name__ == "__main__":
    main()
