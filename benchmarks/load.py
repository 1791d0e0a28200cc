"""Load test of the team server: the Dockerfile's exact gunicorn command on loopback, simulated users signing in,
opening the bundled sample jobs and zooming their timelines, every callback over HTTP as dash-renderer sends it.

    python benchmarks/load.py [--users 20] [--seconds 60] [--workers 2]
    python benchmarks/load.py --attacks

Prints requests/s, latency p50/p95/p99 and every error (status >= 500 or no answer) with the exceptions the
server logged for them. ``--attacks`` instead sends the issue's hostile uploads with the image's default limits
(a 2 MB zip of one 2 GiB entry, a .gz trace with one 300 MB event name, gzipped whitespace) and prints, for each,
the answer, what stayed on disk, the peak RSS of the server's processes (parse children included) and the
slowest /healthz while it was handled; then 420 wrong passwords and the right one. The quoted Marey case (``sample:npu_pangu_pipeline_stage_imbalance``, step 1,
t=3.553,3.603) is one of the windows every user visits. Also the launcher the server tests use
(``production_server``): the image's CMD and ENV, run here with the data folders moved to a temp folder.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import re
import shlex
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import requests

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import scratch  # the benchmarks folder, also when imported as benchmarks.load

REPO = Path(__file__).resolve().parents[1]
DOCKERFILE = REPO / "Dockerfile"
QUOTED = ("sample:npu_pangu_pipeline_stage_imbalance", 1, (3.553, 3.603))
DATA_DIRS = {
    "PARADIAG_CACHE_DIR": "cache",
    "PARADIAG_UPLOAD_DIR": "uploads",
    "PARADIAG_APP_CACHE_DIR": "app-cache",
}


def dockerfile(path: Path = DOCKERFILE) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) per instruction, continuation lines joined, comments dropped."""
    out: list[tuple[str, str]] = []
    pending = ""
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        pending += line
        word, _, rest = pending.strip().partition(" ")
        out.append((word.upper(), rest.strip()))
        pending = ""
    return out


def final_stage(instructions: list[tuple[str, str]]) -> list[tuple[str, str]]:
    last = max(i for i, (word, _) in enumerate(instructions) if word == "FROM")
    return instructions[last:]


def image_env(instructions: list[tuple[str, str]]) -> dict[str, str]:
    """The final stage's ENV (``KEY=value`` form), with ``$VAR`` left as written."""
    env: dict[str, str] = {}
    for word, args in final_stage(instructions):
        if word == "ENV":
            env.update(part.split("=", 1) for part in shlex.split(args) if "=" in part)  # type: ignore[misc]
    return env


def production_command(instructions: list[tuple[str, str]]) -> list[str]:
    """The image's CMD (exec form)."""
    cmds = [args for word, args in final_stage(instructions) if word == "CMD"]
    return list(json.loads(cmds[-1]))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def production_server(
    root: Path, env: dict[str, str] | None = None, workers: int = 2, log: Path | None = None
) -> Iterator[str]:
    """Run the image's exact CMD here, on a free loopback port (gunicorn's own GUNICORN_CMD_ARGS and
    WEB_CONCURRENCY: the CMD names neither), with the image's ENV and its data folders under ``root``.
    Yields the base URL once /healthz answers."""
    instructions = dockerfile()
    port = free_port()
    full = {**os.environ, **{k: v for k, v in image_env(instructions).items() if k.startswith("PARADIAG_")}}
    full.update({name: str(root / sub) for name, sub in DATA_DIRS.items()})
    full.update(env or {})
    full.update(GUNICORN_CMD_ARGS=f"--bind 127.0.0.1:{port}", WEB_CONCURRENCY=str(workers))
    full["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{full.get('PATH', '')}"  # this venv's gunicorn
    out = open(log or root / "server.log", "ab")  # noqa: SIM115 (closed below, after the server)
    proc = subprocess.Popen(
        production_command(instructions), env=full, stdout=out, stderr=subprocess.STDOUT, cwd=root
    )
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_healthy(url, proc)
        yield url
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        out.close()


def _wait_healthy(url: str, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.time() + 90
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the server exited with {proc.returncode} before it answered")
        try:
            if requests.get(url + "/healthz", timeout=2).status_code == 200:
                return
        except requests.RequestException:  # not listening yet, or its workers still booting
            pass
        time.sleep(0.3)
    raise RuntimeError("the server did not answer /healthz within 90 s")


class Client:
    """One simulated browser: keeps the props the server returned and fires callbacks as dash-renderer does
    (each callback whose inputs changed, once per user action, until nothing changes)."""

    def __init__(self, url: str, deps: list[dict[str, Any]], layout: dict[str, Any], record: Any) -> None:
        self.url, self.deps, self.record = url, deps, record
        self.http = requests.Session()
        self.props: dict[str, Any] = {}
        _walk(layout, self.props)

    def sign_in(self, user: str, password: str) -> None:
        self.request("POST", "/login", data={"user": user, "password": password}, allow_redirects=False)

    def request(
        self, method: str, path: str, label: str | None = None, **kw: Any
    ) -> requests.Response | None:
        """``label``: what the request is recorded as (default: its path)."""
        t = time.perf_counter()
        try:
            reply = self.http.request(method, self.url + path, timeout=120, **kw)
        except requests.RequestException as exc:
            self.record(label or path, 0, time.perf_counter() - t, repr(exc))
            return None
        self.record(label or path, reply.status_code, time.perf_counter() - t, "")
        return reply

    def act(self, changed: dict[str, Any]) -> None:
        """Set ``changed`` props (``"id.prop": value``) and run every callback that follows."""
        self.props.update(changed)
        pending: set[str] = set(changed)
        fired: set[str] = set()
        while pending:
            todo = [
                d
                for d in self.deps
                if d["output"] not in fired and _callable(d) and pending & {_key(i) for i in d["inputs"]}
            ]
            now, pending = pending, set()
            for dep in todo:
                fired.add(dep["output"])
                pending |= self.fire(dep, [_key(i) for i in dep["inputs"] if _key(i) in now])

    def fire(self, dep: dict[str, Any], changed_ids: list[str]) -> set[str]:
        """Call one callback; the props it changed."""
        outputs = [
            dict(zip(("id", "property"), part.rsplit(".", 1), strict=True))
            for part in dep["output"].strip(".").split("...")
        ]
        body = {
            "output": dep["output"],
            "outputs": outputs if len(outputs) > 1 else outputs[0],
            "inputs": [self._value(d) for d in dep["inputs"]],
            "state": [self._value(d) for d in dep.get("state", [])],
            "changedPropIds": changed_ids,
        }
        first = outputs[0]["id"] + ("" if len(outputs) == 1 else f" (+{len(outputs) - 1})")
        reply = self.request("POST", "/_dash-update-component", label=f"callback {first}", json=body)
        if reply is None or reply.status_code != 200:
            return set()
        new = set()
        for cid, values in reply.json().get("response", {}).items():
            for prop, value in values.items():
                if self.props.get(f"{cid}.{prop}") != value:
                    self.props[f"{cid}.{prop}"] = value
                    new.add(f"{cid}.{prop}")
        return new

    def _value(self, dep: dict[str, Any]) -> Any:
        if dep["id"].startswith("{"):
            return []  # a pattern-matching input with no component yet (finding buttons)
        return {"id": dep["id"], "property": dep["property"], "value": self.props.get(_key(dep))}


def _key(dep: dict[str, Any]) -> str:
    return f"{dep['id']}.{dep['property']}"


def _callable(dep: dict[str, Any]) -> bool:
    """Server-side callbacks with plain outputs (the renderer fires pattern-matching ones per component)."""
    return not dep.get("clientside_function") and "{" not in dep["output"]


def _walk(node: Any, props: dict[str, Any]) -> None:
    if isinstance(node, list):
        for child in node:
            _walk(child, props)
    elif isinstance(node, dict) and "props" in node:
        p = node["props"]
        if isinstance(p.get("id"), str):
            props.update(
                {
                    f"{p['id']}.{k}": v
                    for k, v in p.items()
                    if k not in ("id", "children") or not isinstance(v, (dict, list))
                }
            )
        _walk(p.get("children"), props)


def windows(seed: int, served: Path | None = None) -> list[tuple[str, int, tuple[float, float]]]:
    """Zoom windows (ms since the job's start) over every sample job's steps: wide and narrow ones, spread
    over the step, and the quoted one; with ``served``, over that job's steps alone (token ``served``)."""
    import paradiag
    from paradiag.app.config import SAMPLES_DIR
    from paradiag.app.data.common import origin_ns, step_span, steps_of

    rng = random.Random(seed)
    jobs = [
        (folder, f"sample:{folder.name}")
        for folder in sorted(p for p in SAMPLES_DIR.iterdir() if (p / "ground_truth.json").is_file())
    ]
    out = [] if served else [QUOTED]
    for folder, token in [(served, "served")] if served else jobs:
        job = paradiag.open(folder)  # parsed here once, into the cache the server reads
        zero = origin_ns(job)
        for step in steps_of(job):
            lo, hi = ((v - zero) / 1e6 for v in step_span(job, step))
            for _ in range(6):
                width = (hi - lo) * rng.choice([0.005, 0.02, 0.1, 0.4])
                start = rng.uniform(lo, hi - width)
                out.append((token, step, (round(start, 3), round(start + width, 3))))
    return out


def user(
    url: str,
    n: int,
    until: float,
    visits: list[tuple[str, int, tuple[float, float]]],
    record: Any,
    password: str,
) -> None:
    rng = random.Random(n)
    c = Client(url, [], {}, record)
    c.sign_in(f"user{n}", password)
    deps_reply, layout_reply = c.request("GET", "/_dash-dependencies"), c.request("GET", "/_dash-layout")
    if deps_reply is None or layout_reply is None or deps_reply.status_code != 200:
        return
    c.deps = deps_reply.json()
    _walk(layout_reply.json(), c.props)
    order = [visits[0], *rng.sample(visits[1:], len(visits) - 1)]
    i = 0
    while time.time() < until:
        token, step, (t0, t1) = order[i % len(order)]
        i += 1
        query = "?" + urlencode({"job": token, "step": step, "t": f"{t0},{t1}"})
        c.request("GET", "/" + query)
        c.act({"url.search": query, "url.href": url + "/" + query, "url.pathname": "/"})
        for _ in range(2):  # zoom in twice within the window, as a user narrowing down does
            if time.time() >= until:
                break
            width = (t1 - t0) * rng.choice([0.05, 0.3])
            t0 = rng.uniform(t0, t1 - width)
            t1 = t0 + width
            c.act({"timeline-zoom.data": {"xaxis.range[0]": t0, "xaxis.range[1]": t1}})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, default=20)
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--attacks", action="store_true", help="hostile uploads instead of the load")
    parser.add_argument(
        "--job",
        type=Path,
        help="serve this job (paradiag serve's PARADIAG_JOB) and visit it alone, not the samples",
    )
    args = parser.parse_args()
    if args.attacks:
        for row in run_attacks(args.workers):
            print(json.dumps(row))
        return
    result = run_load(args.users, args.seconds, args.workers, args.seed, args.job)
    print(json.dumps({k: v for k, v in result.items() if k != "server_errors"}, indent=1))
    for line, count in result["server_errors"]:
        print(f"server logged {count}x: {line}")


def run_load(
    users: int, seconds: float, workers: int, seed: int = 7, served: Path | None = None
) -> dict[str, Any]:
    from werkzeug.security import generate_password_hash

    root = scratch("paradiag-load-")
    os.environ.setdefault(
        "PARADIAG_CACHE_DIR", str(root / "cache")
    )  # the windows' own parse, reused by the server
    visits = windows(seed, served)
    password = "load-test-password"
    digest = generate_password_hash(password)
    (root / "users").write_text("".join(f"user{n}:{digest}\n" for n in range(users)))
    rows: list[tuple[str, int, float, str]] = []
    lock = threading.Lock()

    def record(path: str, status: int, seconds_: float, error: str) -> None:
        with lock:
            rows.append((path, status, seconds_, error))

    env = {"PARADIAG_USERS": str(root / "users"), "PARADIAG_LOG_LEVEL": "WARNING"}
    if served:
        env["PARADIAG_JOB"] = str(served.resolve())
    load: list[float] = []
    with production_server(root, env, workers=workers) as url:
        start = time.time()
        until = start + seconds
        threads = [
            threading.Thread(target=user, args=(url, n, until, visits, record, password))
            for n in range(users)
        ]
        for t in threads:
            t.start()
        while any(t.is_alive() for t in threads):  # the machine's 1-minute load average, every 5 s
            load.append(os.getloadavg()[0])
            for t in threads:
                t.join(timeout=5 / len(threads))
        elapsed = time.time() - start
    result = summarise(rows, elapsed, users, workers, root / "server.log")
    result["load_average"] = (
        {"min": round(min(load), 2), "max": round(max(load), 2), "cores": os.cpu_count()} if load else {}
    )
    return result


def _slowest(rows: list[tuple[str, int, float, str]], top: int = 8) -> dict[str, float]:
    """p95 latency (ms) per request kind (path, or callback by its first output), the slowest first."""
    by: dict[str, list[float]] = {}
    for label, _, seconds_, _ in rows:
        by.setdefault(label, []).append(seconds_ * 1000)
    p95 = {k: (statistics.quantiles(v, n=20)[18] if len(v) > 1 else v[0]) for k, v in by.items()}
    return {f"{k} ({len(by[k])})": round(v, 1) for k, v in sorted(p95.items(), key=lambda kv: -kv[1])[:top]}


def summarise(
    rows: list[tuple[str, int, float, str]], elapsed: float, users: int, workers: int, log: Path
) -> dict[str, Any]:
    latencies = sorted(s * 1000 for _, _, s, _ in rows)
    errors = [r for r in rows if r[1] >= 500 or r[1] == 0]
    q = statistics.quantiles(latencies, n=100) if len(latencies) > 1 else [0.0] * 99
    logged = Counter(_exception_lines(log.read_text(errors="replace")))
    return {
        "users": users,
        "workers": workers,
        "seconds": round(elapsed, 1),
        "requests": len(rows),
        "requests_per_s": round(len(rows) / elapsed, 1),
        "p50_ms": round(q[49], 1),
        "p95_ms": round(q[94], 1),
        "p99_ms": round(q[98], 1),
        "errors": len(errors),
        "slowest_p95_ms": _slowest(rows),
        "error_paths": dict(Counter(f"{p} {s}" for p, s, _, _ in errors)),
        "server_errors": logged.most_common(10),
    }


def hostile_uploads() -> Iterator[tuple[str, str, bytes]]:
    """(label, file name, bytes) of the issue's hostile uploads, made here (a few seconds of compression)."""
    import gzip
    import io
    import zipfile

    blob = io.BytesIO()
    with (
        zipfile.ZipFile(blob, "w", zipfile.ZIP_DEFLATED) as z,
        z.open("rank0.pt.trace.json", "w", force_zip64=True) as f,
    ):
        zeros = b"\0" * (64 << 20)
        for _ in range(32):
            f.write(zeros)
    yield "zip: one 2 GiB entry", "bomb.zip", blob.getvalue()
    doc = (
        b'{"traceEvents": [{"ph": "X", "name": "'
        + b"a" * (300 << 20)
        + b'", "pid": 0, "tid": 0, "ts": 1, "dur": 1}]}'
    )
    yield "gz: one 300 MB event name", "rank0.pt.trace.json.gz", gzip.compress(doc, 9)
    yield (
        "gz: whitespace",
        "rank1.pt.trace.json.gz",
        gzip.compress(b'{"traceEvents": [' + b" " * (250 << 20) + b"]}", 9),
    )


def run_attacks(workers: int) -> list[dict[str, Any]]:
    import psutil
    from werkzeug.security import generate_password_hash

    root = scratch("paradiag-attacks-")
    (root / "users").write_text(f"eve:{generate_password_hash('pw')}\n")
    rows = []
    with production_server(root, {"PARADIAG_USERS": str(root / "users")}, workers=workers) as url:
        master = next(
            p
            for p in psutil.process_iter(["cmdline"])
            if p.info["cmdline"]
            and "paradiag.app.wsgi:server" in p.info["cmdline"]
            and p.ppid() == os.getpid()
        )
        s = requests.Session()
        s.post(url + "/login", data={"user": "eve", "password": "pw"}, timeout=30)
        for label, name, data in hostile_uploads():
            peak = _Peak(master)
            t = time.perf_counter()
            reply = s.post(url + "/api/upload", files=[("files", (name, data))], timeout=600)
            answer = reply.json()
            state: dict[str, Any] = {"state": "refused", "message": answer.get("error")}
            health = []
            while "id" in answer:
                h = time.perf_counter()
                requests.get(url + "/healthz", timeout=60)
                health.append(time.perf_counter() - h)
                state = s.get(url + f"/api/upload/{answer['id']}/status", timeout=60).json()
                if state.get("state") in ("done", "error"):
                    break
                time.sleep(0.5)
            peak.stop()
            left = sum(
                f.stat().st_size
                for f in (root / "uploads").rglob("*")
                if f.is_file() and f.name != "status.json"
            )
            rows.append(
                {
                    "upload": label,
                    "sent_kb": len(data) >> 10,
                    "http": reply.status_code,
                    "outcome": state.get("state"),
                    "message": state.get("message"),
                    "seconds": round(time.perf_counter() - t, 1),
                    "peak_rss_mb": round(peak.mb),
                    "slowest_healthz_ms": round(1000 * max(health, default=0)),
                    "bytes_left_in_uploads": left,
                }
            )
            for folder in (root / "uploads").glob("*/*"):
                subprocess.run(["rm", "-rf", str(folder)], check=False)
        rows.append(_guessing(url))
    return rows


def _guessing(url: str) -> dict[str, Any]:
    """420 wrong passwords as fast as one client sends them, then the right one."""
    t = time.perf_counter()
    codes = Counter(
        requests.post(url + "/login", data={"user": "eve", "password": f"guess{i}"}, timeout=60).status_code
        for i in range(420)
    )
    seconds = time.perf_counter() - t
    right = requests.post(
        url + "/login", data={"user": "eve", "password": "pw"}, allow_redirects=False, timeout=60
    ).status_code
    return {
        "attack": "420 wrong passwords, then the right one",
        "per_s": round(420 / seconds, 1),
        "answers": dict(codes),
        "right_password_then": right,
    }


class _Peak:
    """Samples the summed RSS of a process tree every 50 ms until stopped."""

    def __init__(self, proc: Any) -> None:
        self.proc, self.mb, self._stop = proc, 0.0, threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            total = 0
            for p in [self.proc, *self.proc.children(recursive=True)]:
                with contextlib.suppress(Exception):
                    total += p.memory_info().rss
            self.mb = max(self.mb, total / 2**20)
            time.sleep(0.05)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def _exception_lines(text: str) -> list[str]:
    """The last line of every traceback in the server log (the exception and its message)."""
    found = []
    for block in re.split(r"\nTraceback \(most recent call last\):\n", text)[1:]:
        lines = [ln for ln in block.splitlines() if ln and not ln.startswith((" ", "\t"))]
        if lines:
            found.append(lines[0][:200])
    return found


if __name__ == "__main__":
    main()
