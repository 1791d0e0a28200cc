"""Why the real jobs' ranks preload jemalloc (tests/realjobs: job_allocator): one profiled single-process training
loop (two blocks of Linear-GELU-Linear, 8-row micro-batches, one thread), run several times under each allocator,
printing per run the 25th percentile of its weight gradients' aten::mm (the largest outputs) and the minor page
faults of the profiled steps; then how many runs were slow (over twice the fastest run's time).

    .venv/bin/python benchmarks/allocator.py [--runs 6] [--hidden 384]

Under glibc's malloc a process falls, at random and for its whole run, into handing each large output fresh heap
pages, which every call then faults in (5 of 12 runs at ~400 us against ~55 us on this machine, 2026-12-06); under
jemalloc or tcmalloc every run is fast. Needs the torch venv (PARADIAG_TORCH_PYTHON; `make peers`).
"""

from __future__ import annotations

import argparse
import ctypes.util
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.realjobs import ALLOCATORS, torch_python, unavailable  # noqa: E402

LOOP = r"""
import resource, sys, torch, torch.nn as nn
from torch.profiler import ProfilerActivity, profile
torch.set_num_threads(1)
h = int(sys.argv[1])
model = nn.Sequential(*[nn.Sequential(nn.Linear(h, 2 * h), nn.GELU(), nn.Linear(2 * h, h)) for _ in range(2)])
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
def step():
    for _ in range(8):
        model(torch.randn(8, h)).sum().backward()
    opt.step(); opt.zero_grad()
for _ in range(3):
    step()
faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
    for _ in range(5):
        step()
faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults
calls = [e.cpu_time_total for e in prof.events() if e.name == "aten::mm" and e.input_shapes
         and e.input_shapes[0] and e.input_shapes[0][0] > 8]
calls.sort()
print(calls[len(calls) // 4], faults)
"""


def libraries() -> dict[str, str | None]:
    """glibc (no preload) and each of the job programs' allocators the machine has, by library name."""
    found = {name: ctypes.util.find_library(name) for name in ALLOCATORS}
    return {"glibc": None, **{name: lib for name, lib in found.items() if lib}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=6)
    parser.add_argument("--hidden", type=int, default=384)
    args = parser.parse_args()
    reason = unavailable()
    if reason:
        sys.exit(reason)
    for label, library in libraries().items():
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        env.pop("LD_PRELOAD", None)
        if library:
            env["LD_PRELOAD"] = library
        runs = []
        for _ in range(args.runs):
            done = subprocess.run(
                [str(torch_python()), "-c", LOOP, str(args.hidden)],
                capture_output=True, text=True, env=env, check=True,
            )  # fmt: skip
            us, faults = done.stdout.split()
            runs.append((float(us), int(faults)))
        fastest = min(us for us, _ in runs)
        slow = sum(us > 2 * fastest for us, _ in runs)
        shown = "  ".join(f"{us:.0f} us/{faults} faults" for us, faults in runs)
        print(f"{label:18s} slow runs {slow}/{len(runs)}   {shown}")


if __name__ == "__main__":
    main()
