"""paradiag snapshot (self-contained HTML + verdict JSON + gating) and paradiag compare."""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from paradiag import gate
from paradiag.cli import main
from tests.conftest import REPO

SAMPLES = REPO / "sample_traces"
OUT = REPO / "test-output" / "snapshot"


def run(*args: str) -> Any:
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


@pytest.fixture(scope="module")
def slow_rank_snapshot(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any], Any]:
    out = tmp_path_factory.mktemp("snap")
    result = run(
        "snapshot",
        str(SAMPLES / "gpu_llm_slow_rank"),
        "-o",
        str(out / "report.html"),
        "--json",
        str(out / "verdict.json"),
        "--fail-on",
        "finding:slow_device,bubble_ratio>0.9",
    )
    return out, json.loads((out / "verdict.json").read_text()), result


def test_faulty_sample_fails_its_threshold(slow_rank_snapshot: tuple[Path, dict[str, Any], Any]) -> None:
    _, verdict, result = slow_rank_snapshot
    assert result.exit_code == gate.EXIT_GATE
    assert "FAIL finding:slow_device" in result.output and "rank 5" in result.output
    assert "ok   bubble_ratio>0.9" in result.output
    assert verdict["verdict"]["passed"] is False
    assert [c["crossed"] for c in verdict["verdict"]["conditions"]] == [True, False]


def test_fault_free_sample_passes(tmp_path: Path) -> None:
    result = run(
        "snapshot",
        str(SAMPLES / "gpu_llm_fault_free"),
        "-o",
        str(tmp_path / "r.html"),
        "--fail-on",
        "finding:any,stage_imbalance>1.3",
    )
    assert result.exit_code == gate.EXIT_OK, result.output
    assert "ok   finding:any: no finding" in result.output


def test_verdict_validates_against_the_report_schema(
    slow_rank_snapshot: tuple[Path, dict[str, Any], Any],
) -> None:
    import jsonschema

    _, verdict, _ = slow_rank_snapshot
    jsonschema.validate(verdict, json.loads((REPO / "docs" / "report.schema.json").read_text()))


def test_bad_fail_on_expression_is_a_usage_error(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        main,
        [
            "snapshot",
            str(SAMPLES / "gpu_llm_fault_free"),
            "-o",
            str(tmp_path / "r.html"),
            "--fail-on",
            "stage_imbalance>>1",
        ],
    )
    assert result.exit_code == gate.EXIT_USAGE
    assert "cannot read the condition" in result.output
    assert not (tmp_path / "r.html").exists()


def test_unreadable_job_exits_1(tmp_path: Path) -> None:
    (tmp_path / "job").mkdir()
    (tmp_path / "job" / "broken.json").write_text("{")
    result = CliRunner().invoke(main, ["snapshot", str(tmp_path / "job"), "-o", str(tmp_path / "r.html")])
    assert result.exit_code == gate.EXIT_ERROR
    assert "broken.json: invalid JSON" in result.output


def test_gate_conditions() -> None:
    report = {
        "findings": [{"kind": "slow_link", "severity": "medium", "impact_pct": 7.5, "evidence": "link 1-2"}],
        "metrics": {
            "pipeline": None,
            "step_time_ns": {"median": 12_500_000},
            "idle_pct": {"mean": 3.0, "max": 9.0},
        },
        "job": {"num_ranks": 8},
    }
    outcomes = gate.evaluate(
        report,
        "step_time_ms>=12.5, metrics.idle_pct.max>10, finding:slow_link>=high, finding:slow_link, stage_imbalance>1.1, impact_pct>5, job.num_ranks==8",
    )
    assert [o.crossed for o in outcomes] == [True, False, False, True, False, True, True]
    assert "not measured" in outcomes[4].reason
    with pytest.raises(gate.GateError):
        gate.parse("finding:")


def test_compare_names_the_injected_culprit_as_top_change(tmp_path: Path) -> None:
    """Two simulated runs that differ by one injected fault; also across formats (GPU baseline, NPU candidate)."""
    from paradiag.simulator.cli import simulate

    base = [
        "--dp",
        "2",
        "--tp",
        "2",
        "--pp",
        "2",
        "--microbatches",
        "4",
        "--steps",
        "2",
        "--layers",
        "4",
        "--hidden",
        "1024",
    ]
    base += ["--seq-len", "512", "--vocab", "8192", "--seed", "11", "--quiet"]
    runner = CliRunner()
    for name, extra in (
        ("a", []),
        ("b", ["--inject", "slow_device:ranks=3,factor=1.3"]),
        ("n", ["--format", "ascend", "--inject", "slow_device:ranks=3,factor=1.3"]),
    ):
        assert (
            runner.invoke(
                simulate, [*base, *extra, "-o", str(tmp_path / name)], catch_exceptions=False
            ).exit_code
            == 0
        )
    for candidate, matched_by in (("b", "name"), ("n", "category")):
        result = run("compare", str(tmp_path / "a"), str(tmp_path / candidate), "--json")
        doc = json.loads(result.output)
        assert doc["schema"] == "paradiag.compare/1"
        assert doc["top_change"]["kind"] == "slow_device"
        assert doc["top_change"]["culprit"]["ranks"] == [3]
        assert doc["operators"]["matched_by"] == matched_by
        assert [f["kind"] for f in doc["findings"]["appeared"]] == ["slow_device"]
        rank3 = next(r for r in doc["ranks"] if r["rank"] == 3)
        assert rank3["compute_ns"]["delta_pct"] > 15
    html_out = tmp_path / "diff.html"
    assert run("compare", str(tmp_path / "a"), str(tmp_path / "b"), "-o", str(html_out)).exit_code == 0
    assert "slow_device" in html_out.read_text()


@pytest.mark.browser
@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:HTTPResponse.getheader:DeprecationWarning")
def test_snapshot_renders_offline_in_chromium(slow_rank_snapshot: tuple[Path, dict[str, Any], Any]) -> None:
    if not shutil.which("chromedriver") or not shutil.which("chromium"):
        pytest.skip("chromium and chromedriver are not installed (apt-get install chromium chromium-driver)")
    from selenium import webdriver

    out, _, _ = slow_rank_snapshot
    options = webdriver.ChromeOptions()
    options.binary_location = os.environ.get("DASH_TEST_CHROMEPATH", shutil.which("chromium") or "")
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1400,4200"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options)
    try:
        driver.set_network_conditions(offline=True, latency=0, download_throughput=0, upload_throughput=0)
        driver.get((out / "report.html").as_uri())
        deadline = time.time() + 30
        drawn = 0
        while time.time() < deadline:
            drawn = driver.execute_script(
                "return [...document.querySelectorAll('.js-plotly-plot')].filter(g => g.data && g.querySelector('.main-svg')).length"
            )
            if drawn >= 5:
                break
            time.sleep(0.3)
        # step chart, heatmap, Marey graph, timeline, communication matrix: every figure on the page is drawn
        assert drawn == 5
        assert driver.execute_script("return document.querySelectorAll('.js-plotly-plot').length") == 5
        OUT.mkdir(parents=True, exist_ok=True)
        driver.save_screenshot(str(OUT / "snapshot_gpu_llm_slow_rank.png"))
        severe = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
        assert severe == []
        assert "slow_device" in driver.page_source
    finally:
        driver.quit()


@pytest.mark.slow
def test_snapshot_of_a_64_rank_job_stays_under_10_mb(tmp_path: Path) -> None:
    from paradiag.simulator.cli import simulate

    args = [
        "--dp",
        "4",
        "--tp",
        "4",
        "--pp",
        "4",
        "--microbatches",
        "8",
        "--steps",
        "3",
        "--layers",
        "8",
        "--hidden",
        "1024",
    ]
    args += [
        "--seq-len",
        "512",
        "--vocab",
        "8192",
        "--inject",
        "slow_device:ranks=21,factor=1.3",
        "--gzip",
        "--seed",
        "2",
        "--quiet",
    ]
    assert (
        CliRunner().invoke(simulate, [*args, "-o", str(tmp_path / "job")], catch_exceptions=False).exit_code
        == 0
    )
    result = run(
        "snapshot", str(tmp_path / "job"), "-o", str(tmp_path / "r.html"), "--fail-on", "finding:slow_device"
    )
    assert result.exit_code == gate.EXIT_GATE
    assert "rank 21" in result.output
    assert (tmp_path / "r.html").stat().st_size <= 10 * 1024 * 1024
    page = (tmp_path / "r.html").read_text()
    assert "rank 21 \\u00b7 s1" in page  # the culprit keeps a row of its own in the heatmap ...
    assert "rank 21 \\u26a0" in page  # ... and is marked in Marey's graph
