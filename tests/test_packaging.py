"""The wheel installs everything under the single import package `paradiag` and its CLI runs from anywhere."""

from __future__ import annotations

import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.helpers import write_job

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(out), str(REPO)],
        check=True,
        capture_output=True,
    )
    (built,) = out.glob("paradiag-*.whl")
    return built


def test_wheel_holds_one_top_level_package(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names}
    assert tops == {"paradiag", wheel.name.split("-py3")[0] + ".dist-info"}
    for sub in ("parsers/kineto.py", "analysis/breakdown.py", "cli.py", "schema.py"):
        assert f"paradiag/{sub}" in names
    assert not any(n.startswith(("app/", "parsers/", "analysis/")) for n in names)


def test_installed_cli_runs_from_another_directory(
    wheel: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(
        "PYTHONPATH", raising=False
    )  # the installed wheel, not a checkout on the path, must answer
    env_dir = tmp_path / "venv"
    # The new venv sees the dependencies installed in this (virtual) environment through a .pth file;
    # paradiag itself comes from the wheel.
    venv.create(env_dir, with_pip=True)
    bin_dir = env_dir / "bin"
    site_dir = subprocess.run(
        [str(bin_dir / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    ours = [p for p in sys.path if p.endswith("site-packages")]
    Path(site_dir, "parent-env.pth").write_text("\n".join(ours) + "\n")
    subprocess.run(
        [str(bin_dir / "python"), "-m", "pip", "install", "--quiet", "--no-deps", str(wheel)], check=True
    )
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    where = subprocess.run(
        [str(bin_dir / "python"), "-c", "import paradiag, paradiag.parsers.kineto as k; print(k.__file__)"],
        cwd=elsewhere,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    assert where.startswith(str(env_dir))
    help_text = subprocess.run(
        [str(bin_dir / "paradiag"), "--help"], cwd=elsewhere, check=True, capture_output=True, text=True
    ).stdout
    assert "analyze" in help_text and "ingest" in help_text
    job = write_job(tmp_path / "job", ranks=2)
    info = subprocess.run(
        [str(bin_dir / "paradiag"), "info", str(job), "-o", str(tmp_path / "cache")],
        cwd=elsewhere,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    assert "2 ranks" in info
    site = next((env_dir / "lib").glob("python3*/site-packages"))
    assert not any((site / bare).exists() for bare in ("app", "parsers", "analysis", "simulator"))
