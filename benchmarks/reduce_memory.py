"""The reduce's memory phase by phase: the peak resident memory of the process while each part of ``diagnose`` runs.

    python benchmarks/reduce_memory.py CACHE     # a cache ingested by this version of the analysis

Runs ``diagnose`` once, in this process, on the per-rank tables the cache holds (the Diagnosis is neither read nor
stored), and prints for each phase the resident set size (RSS) when it starts and the highest sampled while it runs
(every 5 ms), and the CPU seconds so far. ``benchmarks/analyze.py --rediagnose`` gives the whole reduce's peak (PSS,
in a fresh process); this says which phase sets it. RSS includes memory the allocator keeps after it is freed, so a
phase can start higher than what is live.
"""

from __future__ import annotations

import argparse
import functools
import resource
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


def rss_mb() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) // 1024
    return 0


def cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


class Peak:
    """The highest RSS since the last ``reset`` (``value``) and since the start (``overall``), sampled by a daemon
    thread."""

    def __init__(self, interval: float = 0.005) -> None:
        self.value = self.overall = rss_mb()
        threading.Thread(target=self._sample, args=(interval,), daemon=True).start()

    def _sample(self, interval: float) -> None:
        while True:
            now = rss_mb()
            self.value, self.overall = max(self.value, now), max(self.overall, now)
            time.sleep(interval)

    def reset(self) -> int:
        self.value = now = rss_mb()
        return now


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("cache", type=Path)
    args = parser.parse_args()
    peak = Peak()
    import paradiag
    from paradiag.analysis import diagnose, findings, whatif

    rows: list[tuple[str, int, int, float]] = []

    def wrap(owner: Any, name: str, label: str) -> None:
        fn: Callable[..., Any] = getattr(owner, name)

        @functools.wraps(fn)
        def timed(*args: Any, **kwargs: Any) -> Any:
            start = peak.reset()
            try:
                return fn(*args, **kwargs)
            finally:
                rows.append((label, start, peak.value, cpu()))
                peak.reset()

        setattr(owner, name, timed)

    for owner, name, label in [
        (diagnose, "read_rank_tables", "read the per-rank tables"),
        (diagnose, "read_frame", "read the device events"),
        (findings, "rank_findings", "rank findings"),
        (diagnose, "operator_imbalance", "operator imbalance"),
        (diagnose, "operator_times", "operator times"),
        (diagnose, "critical_path", "critical path"),
        (whatif, "build_graph", "the replay's graph"),
        (whatif, "replay_findings", "the replay of the findings"),
    ]:
        wrap(owner, name, label)
    job = paradiag.open(args.cache)
    start = peak.reset()
    peak.overall = start
    diagnose.diagnose(job)
    print(
        f"{args.cache}: {len(job.rank_ids)} ranks; RSS {start} MB before the reduce, {peak.overall} MB at its highest, {cpu():.2f} CPU s"
    )
    print(f"  {'phase':30s} {'start MB':>9s} {'peak MB':>8s} {'CPU s':>7s}")
    for label, begin, top, seconds in rows:
        print(f"  {label:30s} {begin:9d} {top:8d} {seconds:7.2f}")


if __name__ == "__main__":
    main()
