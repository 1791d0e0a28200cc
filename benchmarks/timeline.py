"""Benchmark: the timeline callback at scale, through the real app (the same JSON requests the browser sends), as a
user folds and unfolds it on --job DIR (default: the 1024-rank job of issue 11).

    python benchmarks/timeline.py [--job DIR] [--repeat N]

After the job's aggregates are warmed as ``paradiag serve`` does, each gesture is timed N times: the opening
step, the critical path toggled on, a stage opened, one of its mesh groups opened, a zoom, and another step with
the stage still open. Printed: the first time apart (it computes what the later ones find memoised), the median
wall time, and the median CPU time of the process (which a loaded machine does not inflate). Budget per callback:
300 ms and 1 MB. The last line is JSON: ``max_ms``, ``max_cpu_ms`` (of the medians), ``max_kb``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

# benchmarks/app.py's client (the folder is no package, and a bare ``app`` names the dashboard's package)
_spec = importlib.util.spec_from_file_location("bench_app", Path(__file__).resolve().parent / "app.py")
assert _spec and _spec.loader
bench_app = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench_app)
BUDGET_BYTES, BUDGET_MS, Browser, key_for = (
    bench_app.BUDGET_BYTES,
    bench_app.BUDGET_MS,
    bench_app.Browser,
    bench_app.key_for,
)

DEFAULT_JOB = Path("/work/jobs/j1024")


def gestures(b: Browser, other: int | None) -> list[tuple[str, dict[tuple[str, str], Any]]]:
    """(label, the props that gesture sets) in the order a user meets them; each keeps what came before."""
    sel = b.props[("selection", "data")]
    view = {k: sel.get(k) for k in ("job", "step", "ranks", "window", "collective")}
    out: list[tuple[str, dict[tuple[str, str], Any]]] = [
        ("opening step, folded", {}),
        ("critical path on", {("timeline-path", "value"): ["path"]}),
        ("a stage opened", {("timeline-expand", "value"): ["s3"]}),
        ("one of its groups opened", {("timeline-expand", "value"): ["s3", "s3.dp1"]}),
    ]
    lo, hi = b.props[("timeline", "figure")]["layout"]["xaxis"]["range"]
    out.append(
        (
            "zoomed to a tenth, path on",
            {("selection-timeline", "data"): {**view, "window": [lo, lo + (hi - lo) / 10]}},
        )
    )
    if other is not None:
        out.append(
            (
                f"step {other}, stage and group still open",
                {("selection-timeline", "data"): {**view, "step": other}},
            )
        )
    return out


def run(job: Path, repeat: int) -> list[tuple[str, float, float, float, int]]:
    from paradiag.app import context
    from paradiag.app.config import Config
    from paradiag.app.data.common import steps_of
    from paradiag.app.factory import create_app
    from paradiag.app.warm import warm

    app = create_app(
        Config.from_env(job=str(job), app_cache_dir=Path(tempfile.mkdtemp(prefix="paradiag-bench-tl-")))
    )
    warm(app, "served").join()
    b = Browser(app)
    b.props.update(
        {
            ("url", "search"): "",
            ("url", "pathname"): "/",
            ("timeline-expand", "value"): [],
            ("timeline-path", "value"): [],
        }
    )
    b.call("open the job", key_for(app, "selection.data"), [("url", "search")])
    sel = b.props[("selection", "data")]
    b.props[("selection-timeline", "data")] = {
        k: sel.get(k) for k in ("job", "step", "ranks", "window", "collective")
    }
    timeline = key_for(app, "timeline.figure")
    b.call("first draw", timeline, [("selection-timeline", "data")])
    with app.server.app_context():
        other = next((s for s in steps_of(context.job("served")) if s != sel["step"]), None)
    rows: list[tuple[str, float, float, float, int]] = []
    for label, props in gestures(b, other):
        b.props.update(props)
        times, cpu = [], []
        for _ in range(repeat):
            c = time.process_time()
            times.append(b.call(label, timeline, [next(iter(props), ("selection-timeline", "data"))]))
            cpu.append((time.process_time() - c) * 1000)
        rows.append(
            (
                label,
                times[0],
                statistics.median(times[1:] or times),
                statistics.median(cpu[1:] or cpu),
                b.rows[-1][2],
            )
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--job", type=Path, default=DEFAULT_JOB)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    rows = run(args.job, max(args.repeat, 1))
    print(
        f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores (wall time grows with it; CPU time does not)"
    )
    print(
        f"{'timeline gesture':<44} {'first ms':>9} {'median ms':>10} {'median cpu ms':>14} {'payload KB':>11}  verdict"
    )
    for label, first, median, cpu, size in rows:
        verdict = "ok" if median <= BUDGET_MS and size <= BUDGET_BYTES else "OVER"
        print(f"{label:<44} {first:>9.1f} {median:>10.1f} {cpu:>14.1f} {size / 1024:>11.1f}  {verdict}")
    print(
        json.dumps(
            {
                "max_ms": round(max(r[2] for r in rows), 1),
                "max_cpu_ms": round(max(r[3] for r in rows), 1),
                "max_kb": round(max(r[4] for r in rows) / 1024, 1),
            }
        )
    )


if __name__ == "__main__":
    main()
