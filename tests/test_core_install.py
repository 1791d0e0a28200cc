"""The core install (``pip install paradiag``, no ``[web]`` extra): the CLI, the snapshot, compare and export run
without dash, flask, flask-login or gunicorn, and ``paradiag serve`` says what to install (exit 2) instead of a
traceback. Each check runs in a fresh interpreter where importing a web module fails, as it would in that install
(in this process the app's modules may already be imported by other tests, which would hide a new import)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO
from tests.helpers import write_job

WEB_MODULES = ("dash", "flask", "flask_login", "gunicorn", "werkzeug")

# Any import of a web module raises ModuleNotFoundError (a None entry in sys.modules), and find_spec answers None.
_RUN = """
import sys
for name in {modules!r}:
    sys.modules[name] = None
from paradiag.cli import main
sys.argv = ["paradiag", *sys.argv[1:]]
main()
"""


def _paradiag(*args: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    code = _RUN.format(modules=WEB_MODULES)
    env = {**os.environ, "PYTHONPATH": str(REPO)}  # this checkout's paradiag, from any folder
    return subprocess.run(
        [sys.executable, "-c", code, *map(str, args)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_the_cli_and_the_snapshot_need_no_web_module(tmp_path: Path) -> None:
    job = write_job(tmp_path / "job", ranks=2)
    cache = tmp_path / "cache"
    analyzed = _paradiag("analyze", "--json", job, "--cache", cache, cwd=tmp_path)
    assert analyzed.returncode == 0, analyzed.stderr
    report = json.loads(analyzed.stdout)
    assert report["schema"] == "paradiag.report/1" and report["job"]["num_ranks"] == 2
    page, verdict = tmp_path / "report.html", tmp_path / "verdict.json"
    snap = _paradiag("snapshot", job, "--cache", cache, "-o", page, "--json", verdict, cwd=tmp_path)
    assert snap.returncode == 0, snap.stderr
    assert "Plotly.newPlot" in page.read_text(encoding="utf-8")  # the figures are drawn, plotly.js embedded
    assert json.loads(verdict.read_text())["verdict"]["status"]
    trace = tmp_path / "job.json.gz"
    exported = _paradiag("export", job, "--cache", cache, "--perfetto", trace, cwd=tmp_path)
    assert exported.returncode == 0, exported.stderr
    assert trace.stat().st_size > 0


def test_serve_without_the_web_extra_names_it(tmp_path: Path) -> None:
    for args in (("serve",), ("serve", "--port", "1", str(tmp_path))):
        result = _paradiag(*args, cwd=tmp_path)
        assert result.returncode == 2
        assert "pip install 'paradiag[web]'" in result.stderr and "Traceback" not in result.stderr
    listed = _paradiag("--help", cwd=tmp_path)
    assert listed.returncode == 0 and "paradiag[web]" in listed.stdout
