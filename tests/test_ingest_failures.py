"""A local ingest whose rank fails for another reason than its input: a worker process killed (as the kernel's OOM
killer would), a storage error while writing the cache. The rank runs once more; failing again, it is a problem
naming its file, whatever it wrote is gone and the other ranks load. Never a half-written cache."""

from __future__ import annotations

import os
import signal
from multiprocessing import get_context
from pathlib import Path
from typing import Any

import pytest

from paradiag import ingest, parse_worker, pool
from paradiag.cache import JobError
from paradiag.simulator import SimConfig, parse_fault, simulate
from tests.helpers import assert_same_cache


@pytest.fixture(scope="module")
def sim_job(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("sim") / "job"
    faults = (parse_fault("slow_device:ranks=2,factor=1.4"),)
    simulate(
        SimConfig(
            output=out,
            dp=2,
            pp=2,
            layers=2,
            hidden=256,
            heads=4,
            seq_len=128,
            vocab=1024,
            steps=2,
            faults=faults,
        )
    )
    return out


@pytest.fixture(scope="module")
def one_process(sim_job: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    cache = tmp_path_factory.mktemp("one") / "cache"
    ingest.ingest(sim_job, cache, workers=1)
    return cache


def _dying(monkeypatch: pytest.MonkeyPatch, name: str, times: int, attempts: Path, how: str) -> None:
    """The parse of source ``name`` fails its first ``times`` times (counted in ``attempts``: the workers are other
    processes), after writing a half part: its process killed (``kill``) or an OSError (``oserror``)."""
    real = parse_worker.parse_rank

    def parse(source: Any, root: Path, out_dir: Path, index: int) -> Any:
        if source.path.name == name:
            with attempts.open("a") as f:
                f.write("x\n")
            if len(attempts.read_text().split()) <= times:
                (out_dir / "events").mkdir(parents=True, exist_ok=True)
                (out_dir / "events" / f"part-{index:05d}.parquet").write_bytes(b"PAR1 half-written")
                if how == "kill":
                    os.kill(os.getpid(), signal.SIGKILL)
                raise OSError(28, "No space left on device")
        return real(source, root, out_dir, index)

    monkeypatch.setattr(parse_worker, "parse_rank", parse)
    monkeypatch.setattr(pool, "IN_PROCESS_BYTES", 0)  # the small job goes to worker processes too
    # Forked workers inherit the replaced parse (a fork server would import paradiag afresh).
    monkeypatch.setattr(pool, "pool_context", lambda: get_context("fork"))


def _name(sim_job: Path) -> str:
    return sorted(p.name for p in sim_job.glob("*.pt.trace.json"))[1]


@pytest.mark.parametrize("how", ["kill", "oserror"])
def test_a_rank_whose_worker_fails_once_is_parsed_again(
    how: str, sim_job: Path, one_process: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    attempts = tmp_path / "attempts"
    _dying(monkeypatch, _name(sim_job), 1, attempts, how)
    seen: list[tuple[int, int, str]] = []
    job = ingest.ingest(sim_job, tmp_path / "cache", workers=2, progress=lambda *a: seen.append(a))
    assert attempts.read_text().split() == ["x", "x"] and job.problems == []
    assert [d for d, _, s in seen if s != "analysing"] == [1, 2, 3, 4]
    assert_same_cache(tmp_path / "cache", one_process)


@pytest.mark.parametrize("how", ["kill", "oserror"])
def test_a_rank_failing_twice_is_a_problem_naming_its_file(
    how: str, sim_job: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    name = _name(sim_job)
    attempts = tmp_path / "attempts"
    _dying(monkeypatch, name, 4, attempts, how)  # twice for each of the two ingests
    job = ingest.ingest(sim_job, tmp_path / "cache", workers=2)
    assert attempts.read_text().split() == ["x", "x"]
    assert [(p.source, p.severity) for p in job.problems] == [(name, "error")]
    why = "its worker process died" if how == "kill" else "OSError: [Errno 28] No space left on device"
    assert (
        "its parse failed twice (retried once)" in job.problems[0].message and why in job.problems[0].message
    )
    assert len(job.rank_ids) == 3
    events = {p.name for p in (tmp_path / "cache" / "events").iterdir()}
    assert events == {
        Path(s["events_file"]).name for s in job.manifest["sources"]
    }  # the half-written part is gone
    with pytest.raises(JobError, match=r"its parse failed twice"):
        ingest.ingest(sim_job, tmp_path / "strict", workers=2, strict=True)
    assert not (tmp_path / "strict").exists() and not [
        p for p in tmp_path.iterdir() if p.name.startswith(".")
    ]


def test_a_storage_error_in_one_process_is_retried_then_a_problem(
    sim_job: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    name = _name(sim_job)
    attempts = tmp_path / "attempts"
    _dying(monkeypatch, name, 2, attempts, "oserror")
    job = ingest.ingest(sim_job, tmp_path / "cache", workers=1)
    assert attempts.read_text().split() == ["x", "x"]
    assert [p.source for p in job.problems] == [name] and "No space left on device" in job.problems[0].message
