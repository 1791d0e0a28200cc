"""Benchmark companion: the stage rule's verdicts on kept real jobs under other thresholds, without rerunning them.

    .venv/bin/python benchmarks/stage_rules.py --keep /work/rt/s0 --keep /work/rt/u50 --capture /tmp/stage.pkl
    .venv/bin/python benchmarks/stage_rules.py --capture /tmp/stage.pkl --set MIN_RATIO_HOST=1.25
    .venv/bin/python benchmarks/stage_rules.py --capture /tmp/stage.pkl --set STAGE_IMBALANCE=1.0 --host-only

With ``--keep`` (folders of ``benchmarks/real_jobs.py --keep``: a job folder beside its ``*.job.json``), each
pipeline, hand-written send/recv and dp x pp job is analysed in this process, two at a time, and what
``analysis.findings.stage_findings`` was given is kept in ``--capture`` (about 4 s a job; 249 jobs in 16 min here).
Then, for each ``--set NAME=VALUE`` (a constant of ``analysis.findings``), the rule is run again on every job's
inputs with the constant changed and the jobs whose verdict changes are printed with their fault, their stages'
compute per micro-batch and the finding before and after: a clean job that gains a finding is a new false one, a
faulty job that gains the right one a new hit. It measures a change before it is made; the jobs' own top findings
(other detectors, the replay's floor) are the real judge (``benchmarks/real_jobs.py``).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import pickle
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

KINDS = ("pipe_", "isend_", "mesh_dp_pp")  # the jobs with pipeline stages


def capture_one(side: str) -> dict[str, Any] | None:
    """One kept job analysed with a fresh cache: its spec, its top findings and the stage rule's inputs."""
    from paradiag.analysis import findings

    spec = json.loads(Path(side).read_text())
    folder = Path(side).parent / spec["spec"]["name"]
    if not folder.is_dir():
        return None
    seen: dict[str, Any] = {}
    rule = findings.stage_findings

    def spy(metrics: Any, on_host: bool = False, work: Any = (), scale: float = 1.0, held: Any = ()) -> Any:
        seen["args"] = (metrics, on_host, list(work), scale, set(held))
        return rule(metrics, on_host, work, scale, held)

    findings.stage_findings = spy  # type: ignore[assignment]
    os.environ["PARADIAG_CACHE_DIR"] = tempfile.mkdtemp(prefix="paradiag-stage-rules-")
    try:
        import paradiag

        top = [
            (f.kind, list(f.culprit.ranks), f.culprit.stage)
            for f in paradiag.open(str(folder)).diagnosis().findings[:3]
        ]
    finally:
        findings.stage_findings = rule  # type: ignore[assignment]
    return {"name": spec["spec"]["name"], "spec": spec["spec"], "top": top, "args": seen.get("args")}


def capture(folders: list[Path], out: Path) -> None:
    sides = sorted(str(s) for d in folders for s in d.glob("*.job.json") if any(k in s.name for k in KINDS))
    with concurrent.futures.ProcessPoolExecutor(2) as pool:
        rows = [r for r in pool.map(capture_one, sides) if r is not None and r["args"] is not None]
    out.write_bytes(pickle.dumps(rows))
    print(f"{len(rows)} jobs captured to {out}")


def verdict(
    args: Any, overrides: dict[str, float], host_only: bool
) -> list[tuple[str, list[int], Any, float]]:
    from paradiag.analysis import findings

    metrics, on_host, work, scale, held = args
    kept = {name: getattr(findings, name) for name in overrides}
    try:
        if on_host or not host_only:
            for name, value in overrides.items():
                setattr(findings, name, value)
        found = findings.stage_findings(metrics, on_host, work, scale, held)
    finally:
        for name, value in kept.items():
            setattr(findings, name, value)
    return [(f.kind, list(f.culprit.ranks), f.culprit.stage, round(f.impact_pct, 2)) for f in found]


def compare(rows: list[dict[str, Any]], overrides: dict[str, float], host_only: bool) -> None:
    changed = 0
    for r in rows:
        before, after = verdict(r["args"], {}, host_only), verdict(r["args"], overrides, host_only)
        if before == after:
            continue
        changed += 1
        per = [round(s["compute_per_micro_batch_ns"] / 1e6, 2) for s in r["args"][0]["stages"]]
        print(
            f"  {r['name']:44s} fault {r['spec']['fault']:15s} culprit {r['spec'].get('rank')} stages {per} "
            f"top {r['top'][:1]}: {before} -> {after}"
        )
    print(
        f"{changed} of {len(rows)} verdicts change with {overrides}{' (CPU ranks only)' if host_only else ''}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", type=Path, action="append", default=[], help="a folder of kept real jobs")
    parser.add_argument(
        "--capture", type=Path, required=True, help="the captured inputs (written with --keep)"
    )
    parser.add_argument(
        "--set", action="append", default=[], help="NAME=VALUE, a constant of analysis.findings"
    )
    parser.add_argument("--host-only", action="store_true", help="change the constants on CPU-rank jobs only")
    args = parser.parse_args()
    if args.keep:
        capture(args.keep, args.capture)
    if args.set:
        overrides = {k: float(v) for k, v in (s.split("=", 1) for s in args.set)}
        compare(pickle.loads(args.capture.read_bytes()), overrides, args.host_only)


if __name__ == "__main__":
    main()
