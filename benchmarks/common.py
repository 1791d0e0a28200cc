"""Shared by the benchmark scripts: run a command and measure its wall time and the peak memory of its whole
process tree (the proportional set size, PSS, of the process and all its children, summed and sampled every
20 ms), the same way for every tool."""

from __future__ import annotations

import atexit
import compileall
import os
import resource
import shutil
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"


@dataclass
class Run:
    label: str
    seconds: float
    peak_pss_mb: float
    returncode: int
    output: str
    cpu_seconds: float = (
        0.0  # user + system time of the whole process tree (steadier than wall time on a busy machine)
    )


def _children(pid: int) -> list[int]:
    found = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as f:
                found.extend(int(c) for c in f.read().split())
    except OSError:
        pass
    return found


def process_tree(pid: int) -> list[int]:
    """A process and its descendants, as /proc lists them now."""
    found, stack = [], [pid]
    while stack:
        p = stack.pop()
        found.append(p)
        stack.extend(_children(p))
    return found


def cpu_ticks(pid: int) -> int:
    """The user + system clock ticks a process has spent so far (0 once it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return int(fields[11]) + int(fields[12])  # utime, stime
    except (OSError, IndexError, ValueError):
        return 0


def _tree_pss_kb(pid: int) -> int:
    """Proportional set size of a process and its descendants: pages shared between forked workers (libraries,
    the parent's heap) count once in total, so a tool that forks is not charged twice for what it shares."""
    total = 0
    stack = [pid]
    while stack:
        p = stack.pop()
        try:
            with open(f"/proc/{p}/smaps_rollup") as f:
                for line in f:
                    if line.startswith("Pss:"):
                        total += int(line.split()[1])
                        break
        except OSError:
            continue
        stack.extend(_children(p))
    return total


def measure(label: str, cmd: list[str], env: dict[str, str] | None = None, interval: float = 0.02) -> Run:
    """Run ``cmd`` to completion; wall time, peak process-tree PSS and CPU time (each sampled every ``interval``
    s). The CPU time is the larger of what the waited-for children report (rusage: every process that exited
    into a parent that waited, however short-lived) and the sum of every process's ticks seen in the tree
    (worker processes a fork server started are not waited for by this tree, so rusage alone would miss them)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env={**os.environ, **(env or {})}
    )
    peak = 0
    ticks: dict[int, int] = {}
    done = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not done.is_set():
            for p in process_tree(proc.pid):
                ticks[p] = max(ticks.get(p, 0), cpu_ticks(p))
            peak = max(peak, _tree_pss_kb(proc.pid))
            time.sleep(interval)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    output, _ = proc.communicate()
    seconds = time.perf_counter() - t0
    done.set()
    sampler.join()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    waited = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    cpu = max(waited, sum(ticks.values()) / os.sysconf("SC_CLK_TCK"))
    return Run(label, seconds, peak / 1024, proc.returncode, output, cpu)


def scratch(prefix: str) -> Path:
    """A new temporary folder, removed when the benchmark exits (also on an error), so that repeated runs do not
    fill /tmp with simulated jobs and caches."""
    folder = Path(tempfile.mkdtemp(prefix=prefix))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    return folder


def precompile() -> None:
    """Write the bytecode of paradiag's modules, as installing the package does (pip compiles a wheel's modules;
    the Docker image installs one). An editable checkout under PYTHONDONTWRITEBYTECODE=1 (this machine's
    environment) otherwise compiles about 40 modules at every start, 0.1-0.15 CPU-second that an installed
    paradiag, and the pip-installed peer tools, never spend. The package's subfolders are links to the
    repository's top-level folders, which compileall does not follow: each is compiled where it lies."""
    for folder in ("paradiag", "analysis", "parsers", "app", "simulator"):
        compileall.compile_dir(REPO / folder, quiet=1)


def hta_python() -> str:
    default = Path.home() / ".cache" / "paradiag-peers" / "hta" / "bin" / "python"
    return os.environ.get("PARADIAG_HTA_PYTHON", str(default))


def table(rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join(
        "  ".join(c.rjust(w) if j else c.ljust(w) for j, (c, w) in enumerate(zip(r, widths, strict=True)))
        for r in rows
    )
