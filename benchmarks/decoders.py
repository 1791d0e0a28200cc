"""JSON decoders on one Kineto rank: paradiag's parser against the columnar readers that might replace it.

    python benchmarks/decoders.py [FILE]      # default: rank0.json of the folder benchmarks/ingest.py builds

Issue 14 asks for 30x HTA's ingest throughput. With HTA at about 10 MB of JSON per CPU-second here, that is about
300 MB per CPU-second for the whole ingest, start-up and analysis included, while the msgspec decode into Python
objects alone runs at about 600. So the question this script answers is whether a reader that writes Arrow columns
natively, without one Python object per value, is within reach with the libraries this project can install.

Each method runs in its own process, on the same bytes, twice (the best of the two is kept); the figures are the CPU
seconds (user + system) of the work alone (the interpreter's start and the imports are not counted, nor is reading
the file) and the process's peak resident memory. Methods whose library is not installed are listed as skipped.
Every method must yield the same number of complete ("X") events; a reader that refuses the file says why.

- ``msgspec decode``: paradiag's own decode into typed Structs, the floor of paradiag's design;
- ``paradiag parse``: the whole Kineto parser, Arrow tables out (the events table and the rank's metadata);
- ``polars read_json``: polars' reader on the ``traceEvents`` array with an explicit schema;
- ``polars read_ndjson``: the array cut into one event per line first (msgspec ``Raw`` slices, newlines turned into
  spaces: a JSON string cannot hold a raw newline), then polars' line reader with an explicit schema;
- ``pyarrow.json``: Arrow's own line reader on those lines with an explicit schema;
- ``duckdb read_json``: DuckDB's reader, one thread.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import table

DEFAULT = Path(tempfile.gettempdir()) / "paradiag-bench" / "kineto-8x50" / "rank0.json"

# Run in a child: FILE and the method's name in argv; prints one JSON line.
CHILD = r"""
import json, os, resource, sys
os.environ["POLARS_MAX_THREADS"] = "1"
path, method = sys.argv[1], sys.argv[2]

def cpu():
    u = resource.getrusage(resource.RUSAGE_SELF)
    return u.ru_utime + u.ru_stime

def events_array(data):
    start = data.index(b"[", data.index(b'"traceEvents"'))
    return slice(start, data.rindex(b"]") + 1)  # what follows the array in these files holds no list

def lines(data):
    import msgspec
    class Doc(msgspec.Struct):
        traceEvents: list[msgspec.Raw]
    raws = msgspec.json.decode(data, type=Doc).traceEvents
    return b"\x1e".join(raws).replace(b"\n", b" ").replace(b"\x1e", b"\n")

def polars_schema():
    import polars as pl
    args = pl.Struct({"External id": pl.Int64, "correlation": pl.Int64, "stream": pl.Int64, "device": pl.Int64,
                      "Collective name": pl.String, "In msg nelems": pl.Int64, "Out msg nelems": pl.Int64,
                      "Group size": pl.Int64, "dtype": pl.String, "Process Group Ranks": pl.String})
    return {"ph": pl.String, "name": pl.String, "cat": pl.String, "ts": pl.Float64, "dur": pl.Float64,
            "pid": pl.String, "tid": pl.String, "args": args}

def run(data):
    if method == "msgspec decode":
        from paradiag.parsers import kineto_decode
        events = kineto_decode.EVENTS_DECODERS[0].decode(memoryview(data)[events_array(data)])
        return sum(1 for e in events if isinstance(e, kineto_decode.Complete))
    if method == "paradiag parse":
        from pathlib import Path
        from paradiag.parsers import kineto
        return kineto.parse(Path(path)).events.num_rows
    if method == "polars read_json":
        import io, polars as pl
        frame = pl.read_json(io.BytesIO(memoryview(data)[events_array(data)]), schema=polars_schema())
        return frame.filter(pl.col("ph") == "X").height
    if method == "polars read_ndjson":
        import io, polars as pl
        frame = pl.read_ndjson(io.BytesIO(lines(data)), schema=polars_schema())
        return frame.filter(pl.col("ph") == "X").height
    if method == "pyarrow.json":
        import io, pyarrow as pa, pyarrow.compute as pc, pyarrow.json as pj
        schema = pa.schema([("ph", pa.string()), ("name", pa.string()), ("cat", pa.string()), ("ts", pa.float64()),
                            ("dur", pa.float64()), ("pid", pa.string()), ("tid", pa.string())])
        options = pj.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore")
        got = pj.read_json(io.BytesIO(lines(data)), parse_options=options)
        return pc.sum(pc.equal(got["ph"], "X")).as_py()
    if method == "duckdb read_json":
        import duckdb
        con = duckdb.connect(config={"threads": 1})
        query = ("select count(*) from (select unnest(traceEvents) as e from read_json(?, columns="
                 "{'traceEvents': 'JSON[]'}, maximum_object_size=2147483647)) where e->>'ph' = 'X'")
        return con.execute(query, [path]).fetchone()[0]
    raise SystemExit(f"unknown method {method}")

try:
    __import__({"msgspec decode": "msgspec", "paradiag parse": "paradiag", "polars read_json": "polars",
                "polars read_ndjson": "polars", "pyarrow.json": "pyarrow.json", "duckdb read_json": "duckdb"}[method])
except ImportError as e:
    print(json.dumps({"skipped": f"not installed ({e.name})"})); sys.exit()
import msgspec, pyarrow  # every method's common imports, before the clock starts
data = open(path, "rb").read()
best = None
for _ in range(2):
    t = cpu()
    try:
        events = run(data)
    except Exception as e:  # a reader refusing the file is a result
        print(json.dumps({"refused": f"{type(e).__name__}: {str(e).splitlines()[0][:160]}"})); sys.exit()
    spent = cpu() - t
    best = spent if best is None else min(best, spent)
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"cpu": best, "events": events, "peak_mb": peak, "mb": len(data) / 1e6}))
"""

METHODS = [
    "msgspec decode",
    "paradiag parse",
    "polars read_json",
    "polars read_ndjson",
    "pyarrow.json",
    "duckdb read_json",
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("file", nargs="?", type=Path, default=DEFAULT)
    args = parser.parse_args()
    if not args.file.exists():
        sys.exit(
            f"{args.file}: not found; run benchmarks/ingest.py once to build it, or name a Kineto JSON file"
        )
    rows = [["method", "CPU s", "MB/CPU-s", "x msgspec decode", "X events read", "peak MB"]]
    floor = None
    for method in METHODS:
        done = subprocess.run(
            [sys.executable, "-c", CHILD, str(args.file), method], capture_output=True, text=True
        )
        if done.returncode != 0 or not done.stdout.strip():
            rows.append(
                [
                    method,
                    f"failed: {done.stderr.strip().splitlines()[-1][:120] if done.stderr.strip() else done.returncode}",
                ]
            )
            continue
        got = json.loads(done.stdout.strip().splitlines()[-1])
        if "skipped" in got or "refused" in got:
            rows.append([method, got.get("skipped") or f"refused: {got['refused']}"])
            continue
        rate = got["mb"] / got["cpu"]
        floor = floor or rate
        rows.append(
            [
                method,
                f"{got['cpu']:.3f}",
                f"{rate:.0f}",
                f"{rate / floor:.2f}",
                str(got["events"]),
                f"{got['peak_mb']:.0f}",
            ]
        )
    print(f"{args.file}: {args.file.stat().st_size / 1e6:.1f} MB of JSON")
    print(table([row + [""] * (len(rows[0]) - len(row)) for row in rows]))


if __name__ == "__main__":
    main()
