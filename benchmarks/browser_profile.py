"""Benchmark companion: where the browser's main thread spends a gesture, as a JavaScript CPU profile.

    python benchmarks/browser_profile.py --job /work/jobs/stage256 [--cache DIR] [--plotly FILE] [--top N] "step chart" ...

It serves the job as ``benchmarks/browser.py`` does, opens it in headless Chromium, waits for every view, then
for each named gesture (``browser.py``'s, e.g. "heatmap cell", "finding", "step chart", "timeline W key",
"marey band") records the page's CPU profile (DevTools ``Profiler``, sampled every 200 us) from the gesture to the
page settling, and prints the functions with the most self time, the time per script file, and who called the
browser's own functions that force a layout or trim strings (``getBoundingClientRect``, ``trim``).

plotly.js is served minified, so its functions have one-letter names. ``--plotly FILE``: an unminified plotly.js of
the same version (``plotly.js-dist``'s ``plotly.js`` from the npm registry) served instead, for the profile only;
the environment's bundle is put back afterwards. The profile includes the page's idle wait for the gesture to
settle (``(idle)``); what a gesture costs the user is ``browser.py``'s figure, not this one's total.
"""

from __future__ import annotations

import argparse
import collections
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import browser as bench

from paradiag.app import plotly_bundle

TRACED = ("getBoundingClientRect", "trim", "lx.trim")  # the natives whose callers are listed


def where(frame: dict[str, Any]) -> str:
    """A call frame as ``name file:line``."""
    url = frame["url"].split("/")[-1].split("?")[0]
    return f"{frame['functionName'] or '(anonymous)'} {url}:{frame['lineNumber']}"


def summary(profile: dict[str, Any], top: int = 25) -> list[str]:
    """The lines printed for one profile: self time per function, per file, and the callers of TRACED."""
    nodes = {n["id"]: n for n in profile["nodes"]}
    parent = {c: n["id"] for n in profile["nodes"] for c in n.get("children", [])}
    own: collections.Counter[str] = collections.Counter()
    files: collections.Counter[str] = collections.Counter()
    chains: collections.Counter[str] = collections.Counter()
    for sample, delta in zip(profile["samples"][1:], profile["timeDeltas"][1:], strict=True):
        frame = nodes[sample]["callFrame"]
        ms = delta / 1000
        own[where(frame)] += ms
        files[where(frame).rsplit(" ", 1)[-1].split(":")[0] or "(browser)"] += ms
        if frame["functionName"] in TRACED:
            callers, at = [], sample
            for _ in range(6):
                at = parent.get(at, -1)
                if at < 0:
                    break
                callers.append(where(nodes[at]["callFrame"]))
            chains[" <- ".join([frame["functionName"], *callers])] += ms
    lines = [f"  sampled {sum(own.values()):.0f} ms"]
    lines += [f"  {ms:8.1f}  {name}" for name, ms in own.most_common(top)]
    lines.append("  inclusive (a function's time with what it called):")
    lines += [f"  {ms:8.1f}  {name}" for name, ms in inclusive(profile).most_common(top)]
    lines.append("  by file: " + ", ".join(f"{f} {ms:.0f}" for f, ms in files.most_common(8)))
    lines += [f"  caller {ms:7.1f}  {chain}" for chain, ms in chains.most_common(8)]
    return lines


def inclusive(profile: dict[str, Any]) -> collections.Counter[str]:
    """Each function's time with what it called (a sample counted once per function on its stack; the idle and
    the profiler's own frames left out)."""
    nodes = {n["id"]: n for n in profile["nodes"]}
    parent = {c: n["id"] for n in profile["nodes"] for c in n.get("children", [])}
    total: collections.Counter[str] = collections.Counter()
    for sample, delta in zip(profile["samples"][1:], profile["timeDeltas"][1:], strict=True):
        if nodes[sample]["callFrame"]["functionName"] in ("(idle)", "(program)", "(root)"):
            continue
        seen, at = set(), sample
        while at in nodes:
            name = where(nodes[at]["callFrame"])
            if name not in seen and nodes[at]["callFrame"]["functionName"] != "(root)":
                seen.add(name)
                total[name] += delta / 1000
            at = parent.get(at, -1)
    return total


def profile(job: Path, cache: Path, gestures: list[str], top: int = 25) -> None:
    proc, port, _ = bench.start_server(job, cache)
    driver = None
    try:
        driver = bench.browser()
        driver.get(f"http://127.0.0.1:{port}/")
        bench.settle(driver, 0.0, views=bench.GRAPHS)
        known = {g[0]: g for g in bench.interactions(driver)}
        for name in gestures:
            if name not in known:
                print(f"{name}: no such gesture (known: {', '.join(known)})")
                continue
            driver.execute_cdp_cmd("Profiler.enable", {})
            driver.execute_cdp_cmd("Profiler.setSamplingInterval", {"interval": 200})
            since = bench.reset(driver)
            driver.execute_cdp_cmd("Profiler.start", {})
            known[name][1]()
            bench.settle(driver, since)
            print(f"\n{name}")
            print("\n".join(summary(driver.execute_cdp_cmd("Profiler.stop", {})["profile"], top)))
    finally:
        if driver is not None:
            driver.quit()
        proc.terminate()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--job", type=Path, required=True, help="a job folder")
    parser.add_argument("--cache", type=Path, help="where the parsed job goes (default: a temporary folder)")
    parser.add_argument("--plotly", type=Path, help="an unminified plotly.js of the installed version")
    parser.add_argument("--top", type=int, default=25, help="rows per list (self time, inclusive time)")
    parser.add_argument("gestures", nargs="+", help="gestures of benchmarks/browser.py, by label")
    args = parser.parse_args()
    cache = args.cache or Path(tempfile.mkdtemp(prefix="paradiag-profile-"))
    bundle = plotly_bundle.available()
    if args.plotly and bundle is None:
        raise SystemExit("no plotly.js bundle in this environment to stand in for (make venv fetches it)")
    kept = bundle.with_suffix(".kept") if args.plotly and bundle else None
    if kept and bundle:
        shutil.copy2(bundle, kept)
        shutil.copy2(args.plotly, bundle)
    try:
        profile(args.job, cache, args.gestures, args.top)
    finally:
        if kept and bundle:
            shutil.move(kept, bundle)


if __name__ == "__main__":
    main()
