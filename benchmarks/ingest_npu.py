"""paradiag's Ascend parser against msprof-analyze on the same NPU job folders, side by side.

    python benchmarks/ingest_npu.py [FOLDER ...] [--msprof /tmp/venv-msprof/bin/msprof-analyze] [--simulate]

Each tool runs as its own subprocess and is measured the same way: wall time, and peak RSS (VmHWM) of
the child. MB/s is over the bytes of the rank folders. paradiag parses every ``*_ascend_pt`` folder (trace_view or
db included: the full timeline); msprof-analyze runs ``cluster -m all``, which in text mode reads only the
summaries (step_trace_time.csv, communication*.json), so it does less work than paradiag on the same folder.
Default folders: the shared NPU jobs, plus a simulated 8-rank Ascend job when the simulator can write one.
Install the peer with: python3 -m venv /tmp/venv-msprof && /tmp/venv-msprof/bin/pip install msprof-analyze
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED_NPU = ROOT.parent / "shared" / "traces" / "npu"
MSPROF = Path("/tmp/venv-msprof/bin/msprof-analyze")
PARSE = (
    "import sys; from pathlib import Path; from paradiag.parsers import ascend; "
    "root = Path(sys.argv[1]); "
    "n = sum(ascend.parse(d, root).events.num_rows for d in sorted(root.iterdir()) if ascend.detect(d)); "
    "print(n)"
)


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def measure(cmd: list[str]) -> tuple[float, float, str]:
    """Wall seconds, peak RSS (MB) and stdout of one child process. The peak is the child's VmHWM, polled
    from /proc: rusage's ru_maxrss of a forked child starts from the parent's own peak."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    peak_kb = 0
    status = Path(f"/proc/{proc.pid}/status")
    while proc.poll() is None:
        try:
            line = next((x for x in status.read_text().splitlines() if x.startswith("VmHWM:")), "")
            peak_kb = max(peak_kb, int(line.split()[1])) if line else peak_kb
        except (OSError, ValueError, IndexError):
            pass
        time.sleep(0.01)
    wall = time.perf_counter() - start
    out, err = proc.communicate()
    if proc.returncode:
        raise RuntimeError(f"{cmd[0]} failed ({proc.returncode}): {err.strip()[-500:]}")
    return wall, peak_kb / 1024, out.strip()


def run_paradiag(folder: Path) -> tuple[float, float, str]:
    return measure([sys.executable, "-c", PARSE, str(folder)])


def run_msprof(folder: Path, msprof: Path) -> tuple[float, float, str]:
    out = Path(tempfile.mkdtemp(prefix="msprof-out-"))
    try:
        return measure([str(msprof), "cluster", "-d", str(folder), "-m", "all", "-o", str(out)])
    finally:
        shutil.rmtree(out, ignore_errors=True)


def simulated_job(tmp: Path) -> Path | None:
    """An 8-rank Ascend job from the simulator, when this build has its Ascend writer."""
    try:
        from paradiag.simulator.config import SimConfig
        from paradiag.simulator.run import simulate
        from paradiag.simulator.writers import ascend as _  # noqa: F401
    except ImportError:
        return None
    config = SimConfig(
        output=tmp / "sim_ascend_dp2_tp2_pp2", format="ascend", dp=2, tp=2, pp=2, steps=4, layers=24
    )
    return simulate(config)


def scaled_job(source: Path, copies: int, tmp: Path) -> Path:
    """A larger text job made by re-timing a real one: each rank's timeline is repeated ``copies`` times, each
    copy shifted past the previous one and its ProfilerStep renumbered (the summaries are copied as they are)."""
    import json

    out = tmp / f"{source.name}_x{copies}"
    for rank in sorted(source.glob("*_ascend_pt")):
        dst = out / rank.name
        shutil.copytree(rank, dst, ignore=shutil.ignore_patterns("trace_view.json"))
        events = json.loads((rank / "ASCEND_PROFILER_OUTPUT" / "trace_view.json").read_bytes())
        times = [
            int(e["ts"].replace(".", "")) if isinstance(e.get("ts"), str) and "." in e["ts"] else None
            for e in events
        ]
        span = max(t for t in times if t) - min(t for t in times if t) + 1000
        copied = [e for e in events if e.get("ph") == "M"]
        for i in range(copies):
            for e, t in zip(events, times, strict=True):
                if e.get("ph") == "M" or t is None:
                    continue
                shifted = dict(e, ts=f"{(t + i * span) // 1000}.{(t + i * span) % 1000:03d}")
                if e.get("name", "").startswith("ProfilerStep#"):
                    shifted["name"] = f"ProfilerStep#{1000 + i}"
                copied.append(shifted)
        (dst / "ASCEND_PROFILER_OUTPUT" / "trace_view.json").write_text(json.dumps(copied))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("folders", nargs="*", type=Path)
    parser.add_argument("--msprof", type=Path, default=MSPROF)
    parser.add_argument("--simulate", action="store_true", help="also a simulated 8-rank Ascend job")
    parser.add_argument(
        "--scale", type=int, default=0, help="also the text Level1 job re-timed N times larger"
    )
    args = parser.parse_args()
    folders = args.folders or sorted(d for d in SHARED_NPU.iterdir() if any(d.glob("*_ascend_pt")))
    tmp = Path(tempfile.mkdtemp(prefix="ingest-npu-"))
    if args.simulate:
        sim = simulated_job(tmp)
        if sim is None:
            print("simulator: no Ascend writer in this build, simulated job skipped")
        else:
            folders.append(sim)
    level1 = SHARED_NPU / "msinsight_alexnet_dp8_text_level1"
    if args.scale > 1 and level1.is_dir():
        folders.append(scaled_job(level1, args.scale, tmp))
    has_peer = args.msprof.is_file()
    if not has_peer:
        print(f"msprof-analyze not found at {args.msprof}: paradiag only")
    header = f"{'folder':42s} {'MB':>6s} | {'paradiag s':>10s} {'MB/s':>7s} {'RSS MB':>7s} | {'msprof s':>9s} {'MB/s':>7s} {'RSS MB':>7s} | {'speed x':>7s} {'mem x':>6s}"
    print(header)
    print("-" * len(header))
    for folder in folders:
        size = folder_bytes(folder) / 1e6
        wall, rss, _ = run_paradiag(folder)
        line = f"{folder.name[:42]:42s} {size:6.1f} | {wall:10.2f} {size / wall:7.1f} {rss:7.0f} |"
        if has_peer:
            p_wall, p_rss, _ = run_msprof(folder, args.msprof)
            line += (
                f" {p_wall:9.2f} {size / p_wall:7.1f} {p_rss:7.0f} | {p_wall / wall:7.1f} {p_rss / rss:6.2f}"
            )
        print(line)
    shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
