"""Fuzz the parsers for longer than the test suite does, and time the small-gzip bombs.

    .venv/bin/python benchmarks/fuzz.py                  # 500 cases per seed
    .venv/bin/python benchmarks/fuzz.py --cases 2000 --first 100000
    .venv/bin/python benchmarks/fuzz.py --bombs-only

Each case damages one file of a small well-formed trace (tests/fuzzing.py), ingests it beside an intact rank and
checks that nothing but paradiag's documented errors comes out (nor an exception printed and ignored), that no
problem is an "internal error" and that the intact rank loads. Prints the cases run, the problems by kind and the exceptions (the claim: 0).

The bombs: a gzip of whitespace (about 250 MB of text in 250 KB) and a gzip holding one 300 MB event name, each
parsed in a child process with no limits, the defaults (no size limit, 64 KiB strings) and upload-like limits
(PARADIAG_MAX_FILE_MB=100, PARADIAG_MAX_STRING_KB=64); wall time and peak memory of the child are printed.
"""

from __future__ import annotations

import argparse
import collections
import gzip
import json
import os
import sys
import tempfile
import time
import traceback
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import SHARED, measure  # noqa: E402

from tests.fuzzing import ascend_seeds, kineto_seeds, run_case  # noqa: E402
from tests.helpers import kineto_trace  # noqa: E402

PARSE = """
import sys
from pathlib import Path
from paradiag import discover
from paradiag.discover import Source
path = Path(sys.argv[1])
result = discover.parse_source(Source(path, "paradiag.parsers.kineto", (path,)), path.parent, Path(sys.argv[2]), 0)
print("error:", result.error, "events:", result.num_events)
"""


def fuzz(cases: int, first: int, work: Path, only: list[str] | None = None) -> int:
    seeds = kineto_seeds() + ascend_seeds(SHARED / "traces" / "npu", work.parent / "seeds")
    seeds = [s for s in seeds if not only or s.name in only]
    kinds: collections.Counter[str] = collections.Counter()
    failures: list[str] = []
    # An exception raised where it cannot propagate (a callback inside Arrow) is printed and ignored: count it.
    sys.unraisablehook = lambda u: failures.append(
        f"unraisable in {u.object!r}: {u.exc_type.__name__}: {u.exc_value}"
    )
    for seed in seeds:
        start = time.perf_counter()
        for number in range(first, first + cases):
            try:
                kinds.update(f"{seed.name.split(':')[0]:7s} {k}" for k in run_case(seed, number, work))
            except Exception as exc:  # the claim is that there are none: report each one in full
                failures.append(
                    f"{seed.name} #{number}: {type(exc).__name__}: {exc}\n{traceback.format_exc(limit=4)}"
                )
        print(f"{seed.name:14s} {cases} cases in {time.perf_counter() - start:6.1f} s", flush=True)
    print(
        f"\ncases: {cases * len(seeds)} ({len(seeds)} seeds x {cases}); exceptions or internal errors: {len(failures)}"
    )
    print("problems by kind (count, format, severity: message without numbers and names):")
    for kind, count in sorted(kinds.items(), key=lambda kv: (-kv[1], kv[0])):
        print(f"{count:7d}  {kind}")
    for failure in failures[:20]:
        print("\nFAILED", failure)
    return len(failures)


def bombs(work: Path) -> None:
    whitespace = work / "whitespace.json.gz"
    text = json.dumps(kineto_trace(0, world=1)).replace(
        '"traceEvents": [', '"traceEvents": [' + " " * 250_000_000
    )
    whitespace.write_bytes(gzip.compress(text.encode(), 9))
    long_name = work / "long_name.json.gz"
    doc = kineto_trace(0, world=1)
    doc["traceEvents"][3]["name"] = "n" * 300_000_000
    long_name.write_bytes(gzip.compress(json.dumps(doc).encode(), 9))
    settings = {
        "none": {"PARADIAG_MAX_FILE_MB": "0", "PARADIAG_MAX_STRING_KB": "0"},
        "default": {"PARADIAG_MAX_FILE_MB": "", "PARADIAG_MAX_STRING_KB": ""},
        "upload": {"PARADIAG_MAX_FILE_MB": "100", "PARADIAG_MAX_STRING_KB": "64"},
    }
    print(f"\n{'bomb':34s} {'limits':8s} {'seconds':>8s} {'peak MB':>8s}  outcome")
    for path in (whitespace, long_name):
        for label, env in settings.items():
            run = measure(label, [sys.executable, "-c", PARSE, str(path), str(work / "out")], env=env)
            outcome = run.output.strip().splitlines()[-1] if run.output.strip() else f"exit {run.returncode}"
            name = f"{path.name} ({path.stat().st_size // 1024} KB)"
            print(
                f"{name:34s} {label:8s} {run.seconds:8.2f} {run.peak_pss_mb:8.0f}  {outcome[:90]}", flush=True
            )


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--cases", type=int, default=500, help="cases per seed (default 500)")
    parser.add_argument(
        "--first", type=int, default=1_000_000, help="first case number (the suite uses others)"
    )
    parser.add_argument("--bombs-only", action="store_true", help="only time the gzip bombs")
    parser.add_argument(
        "--seed", action="append", help="only this seed (repeatable): see tests/fuzzing.SEEDS_OF"
    )
    parser.add_argument("--no-bombs", action="store_true", help="skip the gzip bombs")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="paradiag-fuzz-") as tmp:
        work = Path(tmp)
        os.environ["PARADIAG_CACHE_DIR"] = str(work / "caches")
        failed = 0 if args.bombs_only else fuzz(args.cases, args.first, work / "case", args.seed)
        if not args.no_bombs:
            bombs(work)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
