"""Benchmark companion: two checkouts of paradiag side by side on the same job, a gesture repeated many times.

    python benchmarks/browser_ab.py --job /work/jobs/operator_hotspot --tree /tmp/before --tree . [--repeat 10]

A single visit of ``benchmarks/browser.py`` moves by up to 150 ms from one run to the next on a shared 2-core
machine, more than most changes to the page save. This serves the job from each checkout in turn (its ``paradiag``
imported through ``PYTHONPATH``: ``git worktree add /tmp/before HEAD~3`` makes one), opens it in headless
Chromium, waits until the server's warm thread is done (no server CPU for 3 s), then repeats each gesture
``--repeat`` times in that one visit: a step-chart click (to another step and back: every step view redrawn) and a
comm-matrix link click (after a step-chart click: ranks, step and window change). Two rounds, the checkouts'
order swapped in the second. Per gesture and checkout it prints the medians of the wall clock (the gesture to the
last view in sight drawn), the server's CPU and the CPU of the browser's main thread (its renderer thread's own
counters in /proc: what a change to the page's drawing saves shows there first).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))

import browser as bench

TICK_MS = 1000 / os.sysconf("SC_CLK_TCK")
# The graphs whose drawing is waited for: this checkout's, and those older checkouts had instead (the device detail
# was four graphs before it was one), so that a gesture's wall clock ends at the same drawing in both.
OLDER = ("detail-operators", "detail-breakdown", "detail-distribution", "detail-collectives")
bench.HOOK = bench.HOOK.replace(json.dumps(list(bench.GRAPHS)), json.dumps([*bench.GRAPHS, *OLDER]))
MAIN_THREADS = ("chromium", "CrRendererMain")  # the renderer's main thread, as /proc names it


def main_thread_ms(driver_pid: int) -> float:
    """CPU time of the browser's renderer main threads (ms)."""
    total = 0.0
    for proc in psutil.Process(driver_pid).children(recursive=True):
        try:
            if "--type=renderer" not in " ".join(proc.cmdline()):
                continue
            for tid in os.listdir(f"/proc/{proc.pid}/task"):
                if Path(f"/proc/{proc.pid}/task/{tid}/comm").read_text().strip() in MAIN_THREADS:
                    fields = Path(f"/proc/{proc.pid}/task/{tid}/stat").read_text().rsplit(")", 1)[1].split()
                    total += (int(fields[11]) + int(fields[12])) * TICK_MS
        except (psutil.Error, OSError):  # a process or thread that ended meanwhile
            continue
    return total


def cpu_ms(pid: int) -> float:
    t = psutil.Process(pid).cpu_times()
    return (t.user + t.system) * 1000


def wait_idle(pid: int, quiet_s: int = 3) -> None:
    """Until the server has used no CPU (under 20 ms a second) for ``quiet_s`` seconds in a row."""
    last, quiet = cpu_ms(pid), 0
    while quiet < quiet_s:
        time.sleep(1)
        now = cpu_ms(pid)
        quiet = quiet + 1 if now - last < 20 else 0
        last = now


def visit(job: Path, tree: str, repeat: int, cache: Path, out: dict[str, list[float]]) -> None:
    os.environ["PYTHONPATH"] = str(Path(tree).resolve())
    server, port, _ = bench.start_server(job, cache)
    driver = bench.browser()
    try:
        driver.get(f"http://127.0.0.1:{port}/")
        bench.settle(driver, 0.0, views=("steps", "heatmap", "timeline", "marey"))
        wait_idle(server.pid)
        acts = {label: act for label, act, _ in bench.interactions(driver)}

        def measure(label: str, act: Any) -> None:
            main, served = main_thread_ms(driver.service.process.pid), cpu_ms(server.pid)
            t0 = bench.reset(driver)
            act()
            state = bench.settle(driver, t0)
            at = bench.gesture_at(driver, t0, False)
            in_sight = [v for k, v in state["draws"].items() if k not in state["kept"]]
            out[f"{label}: wall"].append(max([state["lastDone"], *in_sight]) - at)
            out[f"{label}: server CPU"].append(cpu_ms(server.pid) - served)
            out[f"{label}: browser main thread CPU"].append(main_thread_ms(driver.service.process.pid) - main)

        for _ in range(repeat):
            measure("step change", acts["step chart"])
        x = y = None
        for _ in range(4):  # the matrix opened block by block down to a link between two ranks (not measured)
            x, y, ranks = bench.comm_cell(driver)
            if ranks:
                break
            t1 = bench.reset(driver)
            bench.click_at(driver, "comm-matrix", x, y)
            bench.settle(driver, t1)
        for _ in range(repeat):
            t1 = bench.reset(driver)
            acts["step chart"]()
            bench.settle(driver, t1)
            measure("comm link", lambda: bench.click_at(driver, "comm-matrix", x, y))
    finally:
        driver.quit()
        server.terminate()
        server.wait()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--job", type=Path, required=True)
    ap.add_argument("--tree", action="append", required=True, help="a checkout's root (give two or more)")
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--cache", type=Path, default=Path("/tmp/paradiag-browser-ab"))
    args = ap.parse_args()
    results: dict[str, dict[str, list[float]]] = {t: collections.defaultdict(list) for t in args.tree}
    print(f"{args.job} (load average before: {' '.join(f'{v:.2f}' for v in os.getloadavg())})")
    for round_ in range(2):
        for tree in args.tree if round_ == 0 else args.tree[::-1]:
            visit(args.job, tree, args.repeat, args.cache / str(args.tree.index(tree)), results[tree])
    labels = list(results[args.tree[0]])
    print(f"  {'median (ms)':40s}" + "".join(f"{t[-28:]:>30s}" for t in args.tree))
    for label in labels:
        print(f"  {label:40s}" + "".join(f"{statistics.median(results[t][label]):30.0f}" for t in args.tree))
    print(
        f"  ({2 * args.repeat} gestures of each kind per checkout; load average after: "
        f"{' '.join(f'{v:.2f}' for v in os.getloadavg())})"
    )


if __name__ == "__main__":
    main()
