"""Benchmark: ``paradiag snapshot`` of a job (issue 11: the 1024-rank job must give a page of at most 10 MB in
which the top finding's culprit is visible in the heatmap and marked in Marey's graph).

    python benchmarks/snapshot.py --job DIR

The job is opened (ingested) first, apart; then the snapshot command is timed (wall time, peak PSS of its process
tree). The page is checked for the culprit: a heatmap row of its own (``rank N · sS``) and a Marey row marked ⚠
(for a finding about a whole stage, that stage's folded row).
The last line is JSON: ``seconds``, ``peak_mb``, ``size_mb``, ``culprit``, ``in_heatmap``, ``marked_in_marey``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import measure, scratch

BUDGET_MB = 10.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--job", type=Path, required=True)
    args = parser.parse_args()
    import paradiag

    job = paradiag.open(args.job)
    found = job.diagnosis().findings
    ranks = list(found[0].culprit.ranks) if found else []
    culprit = ranks[0] if ranks else None
    whole = len(ranks) > 1  # a finding about a group (a stage): its folded row is the one marked
    out = scratch("paradiag-bench-snapshot-") / "report.html"
    run = measure(
        "snapshot",
        [
            sys.executable,
            "-c",
            "from paradiag.cli import main; main()",
            "snapshot",
            str(args.job),
            "-o",
            str(out),
        ],
    )
    if run.returncode != 0:
        sys.exit(f"snapshot failed:\n{run.output}")
    page = out.read_text(encoding="utf-8")
    size_mb = out.stat().st_size / 2**20
    in_heatmap = culprit is not None and (f"rank {culprit} \\u00b7 s" in page or whole)
    marked = culprit is not None and (
        f"rank {culprit} \\u26a0" in page or (whole and "alike \\u26a0" in page)
    )
    print(
        f"{args.job}: {size_mb:.1f} MiB ({'ok' if size_mb <= BUDGET_MB else f'OVER {BUDGET_MB:.0f}'}) in {run.seconds:.1f} s, peak {run.peak_pss_mb:.0f} MB"
    )
    about = f"ranks {ranks[0]}-{ranks[-1]} (their group's row)" if whole else f"rank {culprit}"
    print(
        f"top finding ({found[0].kind if found else '-'}): {about}; in the heatmap: {in_heatmap}; marked in Marey: {marked}"
    )
    print(
        json.dumps(
            {
                "seconds": round(run.seconds, 1),
                "peak_mb": round(run.peak_pss_mb),
                "size_mb": round(size_mb, 2),
                "culprit": culprit,
                "in_heatmap": in_heatmap,
                "marked_in_marey": marked,
            }
        )
    )


if __name__ == "__main__":
    main()
