"""Never silent: a job in which the analysis found no collective, no device or compute activity or no step says so
as a problem in every output (``analyze`` text and --json, the snapshot's verdict and page, the app's findings
bar), instead of an empty findings list that reads like a clean job."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import paradiag
from paradiag.analysis.report import build_report
from paradiag.cli import main
from tests.helpers import kineto_trace, write_job, write_trace

COMM = ("record_param_comms", "ncclDevKernel")


def _job(folder: Path, keep: Any) -> Path:
    """Two ranks of the helpers' trace with only the events ``keep`` accepts (metadata always kept)."""
    folder.mkdir(parents=True)
    for rank in range(2):
        doc = kineto_trace(rank, world=2)
        doc["traceEvents"] = [e for e in doc["traceEvents"] if e["ph"] == "M" or keep(e)]
        write_trace(folder / f"rank{rank}.pt.trace.json", doc)
    return folder


def no_collectives(e: dict[str, Any]) -> bool:
    return not any(e["name"].startswith(c) for c in COMM)


def no_steps(e: dict[str, Any]) -> bool:
    return not e["name"].startswith("ProfilerStep")


def nothing(
    e: dict[str, Any],
) -> bool:  # a host call, outside any step: no step, no compute, no communication
    return e["name"] == "cudaLaunchKernel" and e["args"]["correlation"] == 1


CASES = {
    "no_collectives": (no_collectives, ["no collective and no send/recv"]),
    "no_steps": (no_steps, ["no profiled step"]),
    "nothing": (
        nothing,
        ["no profiled step", "no device or compute activity", "no collective and no send/recv"],
    ),
}


@pytest.fixture(scope="module", params=sorted(CASES))
def case(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, Path, list[str]]:
    keep, missing = CASES[request.param]
    root = tmp_path_factory.mktemp(request.param)
    return _job(root / "job", keep), root / "cache", missing


def _run(*args: str) -> Any:
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def test_report_says_what_is_missing(case: tuple[Path, Path, list[str]]) -> None:
    folder, cache, missing = case
    result = _run("analyze", "--json", "--cache", str(cache), str(folder))
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["job"]["analysed"] is False
    said = [
        p["message"] for p in report["job"]["problems"] if p["source"] == "." and p["severity"] == "error"
    ]
    assert len(said) == len(missing)
    for words in missing:
        assert any(m.startswith(words) for m in said), (words, said)
    assert report["findings"] == []


def test_analyze_text_prints_the_problems(case: tuple[Path, Path, list[str]]) -> None:
    folder, cache, missing = case
    result = _run("analyze", "--cache", str(cache), str(folder))
    assert result.exit_code == 0, result.output
    for words in missing:
        assert f"error: .: {words}" in result.output
    assert "could not analyse the job fully" in result.output


def test_snapshot_verdict_could_not_analyse(case: tuple[Path, Path, list[str]], tmp_path: Path) -> None:
    folder, cache, missing = case
    page, verdict = tmp_path / "report.html", tmp_path / "verdict.json"
    result = _run("snapshot", "--cache", str(cache), "-o", str(page), "--json", str(verdict), str(folder))
    assert result.exit_code == 0, result.output
    doc = json.loads(verdict.read_text())["verdict"]
    assert doc["status"] == "could not analyse" and doc["passed"] is False
    assert all(any(r.startswith(w) for r in doc["reasons"]) for w in missing)
    text = page.read_text()
    assert "Could not analyse this job" in text and "No finding above the threshold" not in text
    assert "verdict: could not analyse" in result.output
    # A gate that nothing was measured against has not passed: exit 1, not 0 ("no finding:any").
    gated = _run("snapshot", "--cache", str(cache), "-o", str(page), "--fail-on", "finding:any", str(folder))
    assert gated.exit_code == 1, gated.output


def test_app_findings_bar_shows_the_problems(case: tuple[Path, Path, list[str]]) -> None:
    from paradiag.app.callbacks.header import findings_list
    from paradiag.app.data.findings import findings_of

    folder, cache, missing = case
    job = paradiag.open(folder, cache_dir=cache)
    items = findings_list(findings_of(job), build_report(job)["job"])
    shown = [str(item.children) for item in items]
    assert len(shown) == len(missing) and all("could not analyse" in s for s in shown)
    assert all(any(w in s for s in shown) for w in missing)


def test_a_whole_job_is_analysed(tmp_path: Path) -> None:
    """The same traces with everything in them: analysed, no problem, and the snapshot's verdict is about
    findings."""
    folder = write_job(tmp_path / "job")
    report = json.loads(_run("analyze", "--json", "--cache", str(tmp_path / "cache"), str(folder)).stdout)
    assert report["job"]["analysed"] is True and report["job"]["problems"] == []
    verdict = tmp_path / "verdict.json"
    result = _run(
        "snapshot",
        "--cache",
        str(tmp_path / "cache"),
        "-o",
        str(tmp_path / "r.html"),
        "--json",
        str(verdict),
        str(folder),
    )
    assert result.exit_code == 0, result.output
    assert json.loads(verdict.read_text())["verdict"]["status"] in ("no finding", "findings")
