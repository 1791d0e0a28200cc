"""Real torch.distributed jobs for the tests and benchmarks: specs, the torchrun runner and the expected diagnosis.

    from tests.realjobs import JobSpec, make_job, judge, unavailable
    spec = JobSpec("ddp_slow", api="ddp", fault="slow_rank", rank=2, strength=0.6)
    traces = make_job(spec, out_dir)              # out_dir/ddp_slow/: what the job's profiler wrote, nothing else
    ok, why = judge(spec, report)                 # report: `paradiag analyze --json`'s object

The job program is tests/realjobs/job.py (see its docstring for the APIs, faults and profilers). The runner runs it
under torchrun from the torch venv (PARADIAG_TORCH_PYTHON, default ~/.cache/paradiag-peers/torch/bin/python; `make
peers` makes it): gloo on loopback, one thread per rank, a free port, a timeout. The expected answer never goes into
the trace folder: it is `spec.expected()`, and make_job writes it with the spec into the sidecar
`out_dir/<name>.job.json` beside the folder. A folder whose sidecar holds the same spec is reused, not rerun.

The ranks run with jemalloc (or tcmalloc) preloaded where the machine has it (`make test` installs Debian's
libjemalloc2; PARADIAG_JOB_MALLOC names another library, or `glibc` for none): under glibc's malloc a profiled CPU
rank falls, at random per process and for its whole run, into a state where every call of an operator with a large
output (a weight gradient's aten::mm, over 1 MB) is handed fresh heap pages and takes 4-30x as long, faulting in
each page (measured: 160 calls, 46,000 minor faults, 400 us against 55 us a call; 5 of 12 runs of one
single-process loop; glibc's trim and mmap thresholds do not prevent it, jemalloc and tcmalloc do, 12 of 12). A
clean job made so holds an operator hotspot its program never wrote. A rank at times aborted in the interpreter's
teardown, after its traces were written ("terminate called without an active exception": under tcmalloc 3 of 6 runs
of a DDP job, under jemalloc about 1 in 40 on a loaded machine; not seen under glibc in 6): job.py leaves without it.
"""

from __future__ import annotations

import ctypes.util
import dataclasses
import functools
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

JOB = Path(__file__).resolve().parent / "job.py"
REPO = JOB.parents[2]
DEFAULT_PYTHON = Path.home() / ".cache" / "paradiag-peers" / "torch" / "bin" / "python"
PIPELINES = (
    "pipe_gpipe",
    "pipe_1f1b",
    "pipe_interleaved",
    "pipe_zb",
    "pipe_zbv",
    "pipe_bfs",
    "pipe_dualpipev",
    "isend",
)
MESH_APIS = ("mesh_dp_pp", "mesh_dp_tp")
DATA_PARALLEL = ("ddp", "fsdp1", "fsdp2")
SIDECAR = ".job.json"
# JobSpec fields added after jobs were kept: a sidecar without them was made with their defaults
LATER_FIELDS = ("shapes", "stack", "model", "recipe")


# Allocators that keep a freed block for the next call of the same size (see the module's docstring), first found
# (by ld.so's cache: `ldconfig -p`), preloaded by name.
ALLOCATORS = ("jemalloc", "tcmalloc_minimal", "tcmalloc")


def job_allocator() -> str | None:
    """The malloc library the job's ranks preload: PARADIAG_JOB_MALLOC (a path or library name; `glibc`: none),
    else the first of ALLOCATORS the machine has; None: glibc's own."""
    chosen = os.environ.get("PARADIAG_JOB_MALLOC")
    if chosen:
        return None if chosen == "glibc" else chosen
    return next(filter(None, map(ctypes.util.find_library, ALLOCATORS)), None)


class JobFailed(RuntimeError):
    """A job that exited non-zero or ran past its timeout; the message ends with its output's tail."""


def torch_python() -> Path:
    return Path(os.environ.get("PARADIAG_TORCH_PYTHON") or DEFAULT_PYTHON).expanduser()


@functools.cache
def unavailable() -> str | None:
    """Why real jobs cannot run here (None when they can): no torch venv, or torch does not import in it."""
    python = torch_python()
    if not python.exists():
        return (
            f"no torch venv: {python} is absent (`make peers` makes ~/.cache/paradiag-peers/torch; "
            "PARADIAG_TORCH_PYTHON names another interpreter)"
        )
    try:
        done = subprocess.run(
            [
                str(python),
                "-c",
                "import torch, torch.distributed as d; print(torch.__version__, d.is_available())",
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"torch venv {python} does not run: {exc}"
    if done.returncode != 0 or not done.stdout.strip().endswith("True"):
        return (
            f"torch.distributed does not import with {python}: {(done.stderr or done.stdout).strip()[-300:]}"
        )
    return None


@dataclasses.dataclass(frozen=True)
class JobSpec:
    """One real job: the job program's options, plus the world size. `rank` is the rank the fault hits (for
    heavy_stage: the stage of that rank). Strength: slow_rank extra fraction of flops; host_stall, slow_collective,
    slow_link milliseconds; heavy_stage extra fraction of blocks; hotspot the factor of GELU's work."""

    name: str
    api: str
    fault: str = "none"
    rank: int = 1
    strength: float = 0.5
    world: int = 4
    hidden: int = 256
    blocks: int = 2
    batch: int = 32
    micro_batches: int = 4
    dp: int = 2
    dp_wrap: str = "ddp"
    slow_mode: str = "slowdown"
    seed: int = 0
    profiler: str = "named"
    wait: int = 1
    warmup: int = 1
    active: int = 3
    repeat: int = 1
    stall_step: int = 1
    # the profiler's options users vary: operand shapes off (torch.profiler's default), Python stacks on
    shapes: bool = True
    stack: bool = False
    model: str = "mlp"  # or "attention": transformer blocks (job.py's --model)
    recipe: str = "plain"  # or "usual": checkpointing, bf16 autocast, AdamW, clipping, accumulation (job.py)

    def argv(self, out: Path) -> list[str]:
        args = [
            "--api",
            self.api,
            "--fault",
            self.fault,
            "--rank",
            str(self.rank),
            "--strength",
            str(self.strength),
            "--hidden",
            str(self.hidden),
            "--blocks",
            str(self.blocks),
            "--batch",
            str(self.batch),
            "--micro-batches",
            str(self.micro_batches),
            "--dp",
            str(self.dp),
            "--dp-wrap",
            self.dp_wrap,
            "--slow-mode",
            self.slow_mode,
            "--seed",
            str(self.seed),
            "--profiler",
            self.profiler,
            "--wait",
            str(self.wait),
            "--warmup",
            str(self.warmup),
            "--active",
            str(self.active),
            "--repeat",
            str(self.repeat),
            "--stall-step",
            str(self.stall_step),
            *([] if self.shapes else ["--no-shapes"]),
            *(["--with-stack"] if self.stack else []),
            *(["--model", self.model] if self.model != "mlp" else []),
            *(["--recipe", self.recipe] if self.recipe != "plain" else []),
            "--out",
            str(out),
        ]
        return args

    # ----- the layout the job has and the diagnosis that is right for it

    def layout(self) -> dict[str, Any]:
        """dp/tp/pp of the job and its stages (global ranks per pipeline stage; one stage when no pipeline)."""
        w = self.world
        if self.api in DATA_PARALLEL:
            return {"dp": w, "tp": 1, "pp": 1, "stages": [list(range(w))]}
        if self.api in PIPELINES:
            return {"dp": 1, "tp": 1, "pp": w, "stages": [[r] for r in range(w)]}
        pp_or_tp = w // self.dp
        grid = [
            [d * pp_or_tp + i for i in range(pp_or_tp)] for d in range(self.dp)
        ]  # mesh (dp, x): row-major
        if self.api == "mesh_dp_pp":
            return {
                "dp": self.dp,
                "tp": 1,
                "pp": pp_or_tp,
                "stages": [[row[s] for row in grid] for s in range(pp_or_tp)],
            }
        return {"dp": self.dp, "tp": pp_or_tp, "pp": 1, "stages": [list(range(w))]}

    def stage_of(self, rank: int) -> int:
        return next(i for i, ranks in enumerate(self.layout()["stages"]) if rank in ranks)

    def expected(self) -> dict[str, Any]:
        """What a right diagnosis says: `kinds` (the top finding's kind is one of them), `ranks` (the culprit ranks
        the top finding must name: all of them, and no more than `max_ranks`), `stage` for stage_imbalance, and a
        sentence. A clean job: no finding at all."""
        r, s = self.rank, self.strength
        lay = self.layout()
        if self.fault == "none":
            return {"kinds": [], "ranks": [], "truth": "clean job: no fault injected, no finding expected"}
        if self.fault == "heavy_stage":
            stage = self.stage_of(r)
            ranks = lay["stages"][stage]
            return {
                "kinds": ["stage_imbalance"],
                "ranks": ranks,
                "stage": stage,
                "max_ranks": len(ranks),
                "truth": f"pipeline stage {stage} (ranks {ranks}) holds {1 + s:.2f}x the blocks of the others",
            }
        if self.fault == "slow_rank":
            pure_pp = self.api in PIPELINES
            kinds = ["slow_device", "stage_imbalance"] if pure_pp else ["slow_device"]
            if self.slow_mode == "extra":  # all the extra time is in aten::mm: a hotspot is a fair name too
                kinds.append("operator_hotspot")
            how = {
                "batch": f"a {round(s * 100)}% bigger local batch",
                "extra": f"extra matmuls worth {round(s * 100)}% of its layers' flops",
                "slowdown": f"every operator {1 + s:.2f}x as long (each op stretched, a slower device)",
            }[self.slow_mode]
            out = {"kinds": kinds, "ranks": [r], "max_ranks": 1, "truth": f"rank {r} does {how} every step"}
            if pure_pp:
                out["stage"] = self.stage_of(r)
            return out
        if self.fault == "host_stall":
            return {
                "kinds": ["host_stall"],
                "ranks": [r],
                "max_ranks": 1,
                "truth": f"rank {r} sleeps {s:g} ms once, in active step {self.stall_step} of the last window",
            }
        if self.fault == "hotspot":
            return {
                "kinds": ["operator_hotspot"],
                "ranks": [r],
                "max_ranks": 1,
                "operator": "aten::gelu",
                "truth": f"rank {r}'s GELU computes {max(2, round(s))}x the elements in one aten::gelu call",
            }
        if self.fault == "slow_collective":
            return {
                "kinds": ["slow_link", "host_stall"],
                "ranks": [r],
                "max_ranks": self.world,
                "truth": f"rank {r}'s DDP comm hook sleeps {s:g} ms before each bucket's all_reduce: it joins "
                "every gradient all_reduce late while its compute is like its peers'",
            }
        if self.fault == "slow_link":
            return {
                "kinds": ["slow_link", "host_stall"],
                "ranks": [r],
                "max_ranks": 2,
                "truth": f"rank {r} sleeps {s:g} ms before each send to its next pipeline stage",
            }
        raise ValueError(f"unknown fault {self.fault!r}")

    def describe(self) -> str:
        lay = self.layout()
        dims = " x ".join(f"{k}{lay[k]}" for k in ("dp", "tp", "pp") if lay[k] > 1) or "1 rank"
        return f"{self.api} ({dims}, world {self.world}), fault {self.fault}"


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def sidecar_path(spec: JobSpec, out_dir: Path) -> Path:
    return Path(out_dir) / f"{spec.name}{SIDECAR}"


# What a rank that died without a Python traceback printed (a C++ abort, a signal): torchrun's report names only
# the signal.
NATIVE_CAUSE = re.compile(
    r"terminate called|what\(\):|Segmentation fault|Aborted|double free|corrupted|Killed"
)


def _tail(text: str, lines: int = 30) -> str:
    """The first rank's traceback (torchrun's own report hides it), a native abort's message, and the output's
    last lines."""
    kept = [line for line in text.splitlines() if "USDT:" not in line]  # the profiler's start/stop chatter
    first = next((i for i, line in enumerate(kept) if line.startswith("[rank") and "Traceback" in line), None)
    head = []
    if first is not None:
        prefix = kept[first].split("]")[0] + "]"
        head = [*[line for line in kept[first:] if line.startswith(prefix)][:40], "..."]
    native = [line for line in kept if NATIVE_CAUSE.search(line)][:5]
    return "\n".join(head + native + kept[-lines:])


def failure_cause(error: BaseException | str) -> str:
    """One line on why a job failed: the first rank's exception or native abort where the output has one, else
    the message's first line."""
    text = str(error)
    lines = text.splitlines()
    for line in lines:
        if NATIVE_CAUSE.search(line) or re.match(r"\[rank\d+\]: \w+(Error|Exception)\b", line):
            return f"{lines[0][:120]} ... {line.strip()}"
    return lines[0] if lines else ""


def make_job(spec: JobSpec, out_dir: Path | str, *, timeout_s: float = 600, reuse: bool = True) -> Path:
    """Run the job and return its trace folder, `out_dir/<spec.name>/` (the profiler's files only); the spec and
    the expected diagnosis go to the sidecar `out_dir/<spec.name>.job.json`. A folder made from the same spec is
    reused. Raises JobFailed (with the output's tail) when the job fails or times out, RuntimeError when real jobs
    cannot run here (`unavailable()`)."""
    reason = unavailable()
    if reason:
        raise RuntimeError(reason)
    out_dir = Path(out_dir)
    folder = out_dir / spec.name
    sidecar = sidecar_path(spec, out_dir)
    record: dict[str, Any] = {
        "spec": dataclasses.asdict(spec),
        "expected": spec.expected(),
        "describe": spec.describe(),
    }
    if reuse and sidecar.exists() and folder.is_dir():
        try:
            later = {f.name: f.default for f in dataclasses.fields(JobSpec) if f.name in LATER_FIELDS}
            saved = {**later, **json.loads(sidecar.read_text()).get("spec", {})}
            if saved == record["spec"]:
                return folder
        except (OSError, ValueError):
            pass
    if folder.exists():
        for old in sorted(folder.rglob("*"), reverse=True):
            old.rmdir() if old.is_dir() else old.unlink()
    folder.mkdir(parents=True, exist_ok=True)
    sidecar.unlink(missing_ok=True)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env.update(OMP_NUM_THREADS="1", GLOO_SOCKET_IFNAME="lo", PYTHONUNBUFFERED="1")
    allocator = job_allocator()
    if allocator:
        env["LD_PRELOAD"] = " ".join(filter(None, [allocator, env.get("LD_PRELOAD")]))
    record["allocator"] = allocator or "glibc"
    output = ""
    for attempt in range(3):
        cmd = [
            str(torch_python()),
            "-m",
            "torch.distributed.run",
            "--nnodes",
            "1",
            "--nproc-per-node",
            str(spec.world),
            "--master-addr",
            "127.0.0.1",
            "--master-port",
            str(_free_port()),
            str(JOB),
            *spec.argv(folder),
        ]
        start = time.monotonic()
        proc = subprocess.Popen(
            cmd,
            env=env,
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        try:
            output, _ = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # the torchrun we started and its rank processes
            output, _ = proc.communicate()
            raise JobFailed(
                f"job {spec.name} ({spec.describe()}) ran past {timeout_s:.0f} s:\n{_tail(output)}"
            ) from None
        if proc.returncode == 0:
            break
        if "address already in use" not in output.lower() or attempt == 2:
            raise JobFailed(
                f"job {spec.name} ({spec.describe()}) failed (exit {proc.returncode}): "
                f"{' '.join(cmd)}\n{_tail(output)}"
            )
    record["wall_s"] = float(f"{time.monotonic() - start:.1f}")
    record["files"] = sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())
    tmp = sidecar.with_suffix(".tmp")
    tmp.write_text(json.dumps(record, indent=1) + "\n")
    tmp.replace(sidecar)
    return folder


def top_finding(report: dict[str, Any]) -> dict[str, Any] | None:
    findings = [f for f in report.get("findings", []) if f.get("kind") != "clock_skew"]
    return findings[0] if findings else None


def judge(spec: JobSpec, report: dict[str, Any]) -> tuple[bool, str]:
    """Whether the report (`paradiag analyze --json`'s object) diagnoses the job right: a clean job has no finding
    (clock_skew aside) while its communication was found (an empty analysis is no diagnosis); a faulty one's top finding has an expected kind and names the culprit ranks (all of them,
    at most `max_ranks`; for stage_imbalance the stage)."""
    exp = spec.expected()
    top = top_finding(report)
    if not exp["kinds"]:
        comm = report.get("metrics", {}).get("communication", {})
        if top is None and not (comm.get("collective_instances") or comm.get("p2p_transfers")):
            return False, "no finding, but no collective or send/recv was found either: nothing was analysed"
        return (top is None, "no finding" if top is None else f"unexpected finding: {finding_text(top)}")
    if top is None:
        return False, "no finding"
    culprit = top.get("culprit") or {}
    ranks = set(culprit.get("ranks") or [])
    text = finding_text(top)
    if top.get("kind") not in exp["kinds"]:
        return False, f"top finding is {text}, expected {'/'.join(exp['kinds'])} on ranks {exp['ranks']}"
    if top["kind"] == "stage_imbalance" and "stage" in exp and culprit.get("stage") is not None:
        if culprit["stage"] != exp["stage"] and not set(exp["ranks"]) <= ranks:
            return False, f"top finding is {text}, expected stage {exp['stage']} (ranks {exp['ranks']})"
        return True, text
    if not set(exp["ranks"]) <= ranks or len(ranks) > exp.get("max_ranks", len(exp["ranks"])):
        return False, f"top finding is {text}, expected ranks {exp['ranks']}"
    return True, text


def finding_text(finding: dict[str, Any]) -> str:
    culprit = finding.get("culprit") or {}
    where = f"stage {culprit['stage']} " if culprit.get("stage") is not None else ""
    return f"{finding.get('kind')} {where}ranks {culprit.get('ranks')} ({finding.get('impact_pct')}%)"


def layout_read(spec: JobSpec, report: dict[str, Any]) -> tuple[bool, str]:
    """Whether the report's parallel layout is the job's (dp, tp, pp sizes) and, for DeviceMesh jobs, was read
    from the groups (not assumed)."""
    lay = report.get("job", {}).get("parallel_layout") or {}
    want = spec.layout()
    got = {k: lay.get(k) for k in ("dp", "tp", "pp")}
    ok = all(got[k] == want[k] for k in got)
    found_by = str(lay.get("found_by", ""))
    if spec.api in MESH_APIS or spec.api == "fsdp2":
        ok = ok and "assumed" not in found_by
    return ok, f"{got} found_by {found_by or '?'} (job: dp{want['dp']} tp{want['tp']} pp{want['pp']})"


def analyze(
    folder: Path, cache_dir: Path | None = None, python: str | None = None, timeout_s: float = 600
) -> dict[str, Any]:
    """`paradiag analyze --json FOLDER` in a subprocess of this interpreter (the checkout's paradiag), with its
    cache under `cache_dir` when given: the report's object."""
    env = dict(os.environ)
    if cache_dir is not None:
        env["PARADIAG_CACHE_DIR"] = str(cache_dir)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), *filter(None, [env.get("PYTHONPATH")])])
    cli = "import sys; from paradiag.cli import main; sys.argv[0] = 'paradiag'; main()"
    done = subprocess.run(
        [python or sys.executable, "-c", cli, "analyze", "--json", str(folder)],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout_s,
    )
    if done.returncode != 0:
        raise RuntimeError(
            f"paradiag analyze --json {folder} exited {done.returncode}: {done.stderr.strip()[-2000:]}"
        )
    return json.loads(done.stdout)


__all__ = [
    "DATA_PARALLEL",
    "MESH_APIS",
    "PIPELINES",
    "JobFailed",
    "JobSpec",
    "analyze",
    "failure_cause",
    "finding_text",
    "job_allocator",
    "judge",
    "layout_read",
    "make_job",
    "sidecar_path",
    "top_finding",
    "unavailable",
]
