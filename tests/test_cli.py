"""The command line: info, ingest, analyze (human and JSON forms)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from paradiag.cli import main
from tests.conftest import shared_path
from tests.helpers import write_job


def run(*args: str) -> str:
    result = CliRunner().invoke(main, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def test_help_lists_the_commands() -> None:
    text = run("--help")
    for command in ("info", "ingest", "analyze"):
        assert command in text


def test_ingest_then_info(tmp_path: Path) -> None:
    folder = write_job(tmp_path / "job", ranks=2)
    cache = tmp_path / "c"
    text = run("ingest", str(folder), "-o", str(cache))
    assert "2 ranks" in text and str(cache) in text
    info = json.loads(run("info", "--json", str(folder), "-o", str(cache)))
    assert [r["rank"] for r in info["ranks"]] == [0, 1]
    assert info["ranks"][0]["format"] == "kineto"
    assert info["ranks"][0]["steps"] == [0, 1]
    assert info["problems"] == []
    assert "rank0.pt.trace.json.gz" in run("info", str(folder), "-o", str(cache))


def test_analyze_json_report(tmp_path: Path) -> None:
    folder = write_job(tmp_path / "job", ranks=2)
    report = json.loads(run("analyze", "--json", str(folder)))
    assert report["schema"] == "paradiag.report/1"
    assert set(report) == {"schema", "job", "ranks", "findings", "metrics", "critical_path"}
    assert report["job"]["num_ranks"] == 2 and report["job"]["world_size"] == 2
    assert report["job"]["steps"] == [0, 1]
    rank0 = report["ranks"][0]
    b = rank0["breakdown"]
    # Per step: 3 gemm kernels of 100 us back to back, then a 50 us all-reduce, 80 us later the next step.
    assert b["compute_ns"] == 2 * 3 * 100_000
    assert b["comm_exposed_ns"] == 2 * 50_000
    total = (
        b["compute_pct"]
        + b["comm_exposed_pct"]
        + b["memory_exposed_pct"]
        + b["sync_exposed_pct"]
        + b["idle_pct"]
    )
    assert total == pytest.approx(100, abs=0.01)  # each share is rounded to 3 decimals
    assert [s["step"] for s in rank0["steps"]] == [0, 1]
    assert report["findings"] == []
    assert report["metrics"]["step_time_ns"]["median"] == rank0["step_time_ns"]["median"]


def test_analyze_human_form(tmp_path: Path) -> None:
    text = run("analyze", str(write_job(tmp_path / "job", ranks=2)))
    assert "Time breakdown" in text and "compute" in text


def test_a_missing_path_is_a_usage_error(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["info", str(tmp_path / "nope")])
    assert result.exit_code == 2
    assert "does not exist" in result.output


@pytest.mark.real
def test_analyze_real_multi_rank_job() -> None:
    report = json.loads(run("analyze", "--json", str(shared_path("gpu", "hta_sampled_128rank_job"))))
    assert report["job"]["ranks"] == [0, 1]
    assert report["job"]["world_size"] == 128
    assert report["job"]["clock_alignment"]["instances"] > 0
    assert all(r["breakdown"]["window_ns"] > 1e9 for r in report["ranks"])
