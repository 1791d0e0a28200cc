"""Ingest on a Dask cluster (paradiag.distributed) gives the cache and the report of a local ingest.

Real clusters on loopback: distributed's LocalCluster (worker processes), and the ``dask scheduler`` /
``dask worker`` commands as subprocesses on free ports. A task that raises is retried once, then its source is
reported as a problem and the rest of the job loads. The per-rank part of the analysis, computed where each rank
is parsed, gives the Diagnosis the whole-job computation gives."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

import paradiag
from paradiag import ingest, parse_worker
from paradiag.analysis.diagnose import RANK_TABLES, diagnose
from paradiag.analysis.diagnosis_types import TABLES
from paradiag.cache import MANIFEST, JobError
from paradiag.cli import main
from paradiag.simulator.config import SimConfig
from paradiag.simulator.run import simulate
from tests.helpers import assert_same_cache, two_host_job

distributed = pytest.importorskip("distributed")
VENV_BIN = Path(sys.executable).parent


@pytest.fixture(scope="module")
def cluster() -> Iterator[Any]:
    with distributed.LocalCluster(
        n_workers=2, processes=True, threads_per_worker=1, dashboard_address=":0"
    ) as c:
        yield c


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_local_cluster_equals_local_ingest(
    sim_job: Path, local_cache: Path, cluster: Any, tmp_path: Path
) -> None:
    job = ingest.ingest(sim_job, tmp_path / "cache", dask=cluster.scheduler_address)
    assert job.rank_ids == [0, 1, 2, 3] and job.problems == []
    assert_same_cache(tmp_path / "cache", local_cache)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no scratch folder left beside it


def test_progress_reports_every_rank(sim_job: Path, cluster: Any, tmp_path: Path) -> None:
    seen: list[tuple[int, int, str]] = []
    ingest.ingest(
        sim_job, tmp_path / "cache", dask=cluster.scheduler_address, progress=lambda *a: seen.append(a)
    )
    parsed = [s for s in seen if s[2] != "analysing"]
    assert [d for d, _, _ in parsed] == [1, 2, 3, 4] and {t for _, t, _ in parsed} == {4}
    assert sorted(s for _, _, s in parsed) == sorted(p.name for p in sim_job.glob("*.pt.trace.json"))


@pytest.mark.slow  # starts its own cluster (worker processes import paradiag)
def test_dask_commands_cluster_via_cli(sim_job: Path, local_cache: Path, tmp_path: Path) -> None:
    """``dask scheduler`` and two ``dask worker`` processes on loopback, driven by ``paradiag ingest --dask``."""
    port = _free_port()
    address = f"tcp://127.0.0.1:{port}"
    common = ["--no-dashboard"]
    procs = [
        subprocess.Popen(
            [VENV_BIN / "dask", "scheduler", "--host", "127.0.0.1", "--port", str(port), *common],
            stderr=subprocess.DEVNULL,
        )
    ]
    try:
        worker = [VENV_BIN / "dask", "worker", address, "--nthreads", "1", "--host", "127.0.0.1", *common]
        procs += [subprocess.Popen(worker, stderr=subprocess.DEVNULL, cwd=tmp_path) for _ in range(2)]
        with distributed.Client(address, timeout=30) as client:
            client.wait_for_workers(2, timeout=60)
        result = CliRunner().invoke(
            main, ["ingest", str(sim_job), "-o", str(tmp_path / "cache"), "--dask", address]
        )
        assert result.exit_code == 0, result.output
        assert "4 ranks" in result.output
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait(timeout=30)
    assert_same_cache(tmp_path / "cache", local_cache)


@pytest.mark.slow  # starts its own cluster (worker processes import paradiag)
def test_local_n_via_cli(sim_job: Path, local_cache: Path, tmp_path: Path) -> None:
    result = CliRunner().invoke(
        main, ["ingest", str(sim_job), "-o", str(tmp_path / "cache"), "--dask", "local:2"]
    )
    assert result.exit_code == 0, result.output
    assert_same_cache(tmp_path / "cache", local_cache)


@pytest.fixture
def threaded_cluster() -> Iterator[Any]:
    """Workers as threads of this process, so that a test can make one rank's task raise."""
    with distributed.LocalCluster(
        n_workers=2, processes=False, threads_per_worker=1, dashboard_address=":0"
    ) as c:
        yield c


def _failing(monkeypatch: pytest.MonkeyPatch, name: str, times: int) -> list[str]:
    """Make the parse of source ``name`` raise its first ``times`` times (after writing a partial file)."""
    calls: list[str] = []
    real = parse_worker.parse_rank

    def parse(source: Any, root: Path, out_dir: Path, index: int) -> Any:
        if source.path.name == name:
            calls.append(name)
            if len(calls) <= times:
                (out_dir / "events").mkdir(parents=True, exist_ok=True)
                (out_dir / "events" / f"part-{index:05d}.parquet").write_bytes(b"PAR1 half-written")
                raise OSError(5, "Input/output error (stale file handle)")
        return real(source, root, out_dir, index)

    monkeypatch.setattr(parse_worker, "parse_rank", parse)
    return calls


def test_failed_task_is_retried_once(
    sim_job: Path, local_cache: Path, threaded_cluster: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    name = sorted(p.name for p in sim_job.glob("*.pt.trace.json"))[1]
    calls = _failing(monkeypatch, name, times=1)
    job = ingest.ingest(sim_job, tmp_path / "cache", dask=threaded_cluster.scheduler_address)
    assert calls == [name, name] and job.problems == []
    assert_same_cache(tmp_path / "cache", local_cache)


def test_task_failing_twice_is_a_problem(
    sim_job: Path, threaded_cluster: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    name = sorted(p.name for p in sim_job.glob("*.pt.trace.json"))[1]
    calls = _failing(monkeypatch, name, times=4)  # twice for each of the two ingests
    job = ingest.ingest(sim_job, tmp_path / "cache", dask=threaded_cluster.scheduler_address)
    assert calls == [name, name]
    assert [(p.source, p.severity) for p in job.problems] == [(name, "error")]
    assert (
        "failed on the Dask cluster twice" in job.problems[0].message
        and "stale file handle" in job.problems[0].message
    )
    assert len(job.rank_ids) == 3
    events = {p.name for p in (tmp_path / "cache" / "events").iterdir()}
    assert events == {
        Path(s["events_file"]).name for s in job.manifest["sources"]
    }  # the half-written part is gone
    with pytest.raises(JobError, match="failed on the Dask cluster twice"):
        ingest.ingest(sim_job, tmp_path / "strict", dask=threaded_cluster.scheduler_address, strict=True)
    assert not (tmp_path / "strict").exists() and not [
        p for p in tmp_path.iterdir() if p.name.startswith(".")
    ]


def test_worker_that_cannot_see_the_cache_is_refused(
    sim_job: Path, threaded_cluster: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from paradiag import distributed as backend

    monkeypatch.setattr(
        backend, "_sees", lambda *paths: list(paths[1:])
    )  # every worker blind to the scratch folder
    with pytest.raises(JobError, match=r"cannot see .*\.cache\.tmp-.*shared path"):
        ingest.ingest(sim_job, tmp_path / "cache", dask=threaded_cluster.scheduler_address)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("spec", ["local:0", "local:x", "127.0.0.1:8786", ""])
def test_bad_address_is_a_clear_error(sim_job: Path, tmp_path: Path, spec: str) -> None:
    result = CliRunner().invoke(main, ["ingest", str(sim_job), "-o", str(tmp_path / "cache"), "--dask", spec])
    assert (
        result.exit_code == 1 and "expected a scheduler address (tcp://HOST:8786) or local:N" in result.output
    )
    assert "Traceback" not in result.output and not (tmp_path / "cache").exists()


def test_unreachable_scheduler_is_a_clear_error(
    sim_job: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from paradiag import distributed as backend

    monkeypatch.setattr(backend, "CONNECT_TIMEOUT_S", 1)
    address = f"tcp://127.0.0.1:{_free_port()}"
    with pytest.raises(JobError, match="cannot reach the Dask scheduler"):
        ingest.ingest(sim_job, tmp_path / "cache", dask=address)
    for unusable in ("tcp://127.0.0.1:", "tcp://127.0.0.1:port", "nosuchscheme://127.0.0.1:8786"):
        with pytest.raises(JobError, match="not a scheduler address Dask can use"):
            ingest.ingest(sim_job, tmp_path / "cache", dask=unusable)


def test_without_dask_installed(sim_job: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "distributed", None)  # import distributed then fails
    result = CliRunner().invoke(
        main, ["ingest", str(sim_job), "-o", str(tmp_path / "cache"), "--dask", "local:2"]
    )
    assert (
        result.exit_code == 1
        and "pip install 'paradiag[dask]'" in result.output
        and "Traceback" not in result.output
    )


@pytest.mark.parametrize(
    "device", ["h100", "910b"]
)  # Kineto (paradiag's breakdown), Ascend (step_trace_time's)
def test_rank_tables_give_the_whole_job_diagnosis(device: str, local_cache: Path, tmp_path: Path) -> None:
    """The map's tables, computed on each rank's own clock at parse time, give the Diagnosis that computing them
    from the aligned events does (what a cache written before they existed gets)."""
    if device != "h100":
        local_cache = ingest.ingest(
            two_host_job(tmp_path / "job", device=device, format="ascend"), tmp_path / "cache"
        ).cache_dir
    old = tmp_path / "old"
    shutil.copytree(local_cache, old)
    manifest = json.loads((old / MANIFEST).read_text())
    assert all(set(s["rank_tables"]) == set(RANK_TABLES) for s in manifest["sources"])
    for s in manifest["sources"]:
        del s["rank_tables"]
    (old / MANIFEST).write_text(json.dumps(manifest))
    shutil.rmtree(old / "analysis")
    mapped, whole = diagnose(paradiag.open(local_cache)), diagnose(paradiag.open(old))
    assert mapped.document() == whole.document()
    for name in TABLES:
        assert getattr(mapped, name).equals(getattr(whole, name)), name
    assert (
        mapped.participation.num_rows and mapped.p2p.num_rows and mapped.passes.num_rows and mapped.findings
    )
    offsets = paradiag.open(local_cache).ranks.column("clock_offset_ns").to_pylist()
    assert any(offsets), "the job's clocks must differ, or the test shows nothing about clock independence"
    assert pq.read_table(local_cache / "diagnosis" / "breakdowns.parquet").equals(mapped.breakdowns)


def test_send_recv_peers_from_the_per_rank_records(tmp_path: Path) -> None:
    """Four stages whose send/recv kernels do not name their peer: the map tells each one's direction from its own
    rank's passes, the reduce its stage neighbour; the pairs are those of the same job traced with its peers."""
    pairs = []
    for named in (True, False):
        out = tmp_path / f"job{named}"
        simulate(
            SimConfig(
                output=out,
                dp=1,
                pp=4,
                layers=4,
                hidden=256,
                heads=4,
                seq_len=128,
                vocab=1024,
                steps=2,
                microbatches=4,
                p2p_peer=named,
                seed=4,
            )
        )
        job = ingest.ingest(out, tmp_path / f"cache{named}", workers=1)
        pairs.append(job.diagnosis().p2p)
    assert (
        pairs[0].num_rows == 2 * 2 * 3 * 4
    )  # steps x directions (activations, gradients) x stage links x micro-batches
    assert pairs[1].equals(pairs[0])


def test_rank_tables_of_another_analysis_version_are_computed_again(
    local_cache: Path, tmp_path: Path
) -> None:
    """Stored per-rank tables that another version of the analysis wrote are not read: the reduce computes them
    from the events (as for a cache written before they existed)."""
    stale = tmp_path / "stale"
    shutil.copytree(local_cache, stale)
    assert paradiag.open(stale).rank_tables(0, RANK_TABLES) is not None
    manifest = json.loads((stale / MANIFEST).read_text())
    manifest["analysis_version"] = "an older analysis"
    (stale / MANIFEST).write_text(json.dumps(manifest))
    for part in (stale / "analysis" / "passes").iterdir():
        part.write_bytes(b"not what this version reads")
    job = paradiag.open(stale)
    assert job.rank_tables(0, RANK_TABLES) is None
    assert diagnose(job).document() == diagnose(paradiag.open(local_cache)).document()


@pytest.mark.slow  # two workers are killed and restarted
def test_local_cluster_tries_a_task_whose_worker_dies_twice(tmp_path: Path) -> None:
    """With ``local:N`` a task that kills its worker (as the kernel's OOM killer would) runs on a second worker,
    then fails with KilledWorker, which the ingest reports as a problem (test_task_failing_twice_is_a_problem)."""
    from paradiag.distributed import RETRIES, connect

    attempts = tmp_path / "attempts"
    with connect("local:2") as client:
        future = client.submit(os.system, f"echo x >> {attempts}; kill -9 $PPID", pure=False, retries=RETRIES)
        with pytest.raises(distributed.KilledWorker):
            future.result()
    assert attempts.read_text().split() == ["x", "x"]
