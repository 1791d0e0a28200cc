"""The container image's design, checked on its text (no Docker daemon runs here), and its exact CMD run here."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import requests

from benchmarks.load import dockerfile, final_stage, image_env, production_command, production_server
from paradiag.app.config import _NUMBERS
from tests.conftest import REPO


def test_multi_stage_slim_non_root() -> None:
    steps = dockerfile()
    froms = [args for word, args in steps if word == "FROM"]
    assert len(froms) >= 2 and re.search(r"\bAS build$", froms[0], re.IGNORECASE)
    assert "-slim" in froms[-1] and " AS " not in froms[-1].upper()
    final = final_stage(steps)
    assert any(word == "COPY" and "--from=build" in args for word, args in final)
    users = [args for word, args in final if word == "USER"]
    assert users and users[-1] not in ("root", "0") and not users[-1].startswith(("root:", "0:"))
    # The package builds with its bundled sample jobs (package data), which the build stage checks.
    assert "sample_traces" in (REPO / "pyproject.toml").read_text()
    assert any(word == "RUN" and "SAMPLES_DIR" in args for word, args in steps)
    # The server is the web extra (the core install has no Dash, flask-login or gunicorn).
    assert any(
        word == "RUN" and re.search(r"pip install [\"']?\.\[([a-z,]*,)?web[],]", args) for word, args in steps
    )


def test_health_volume_settings_and_command() -> None:
    steps = final_stage(dockerfile())
    health = [args for word, args in steps if word == "HEALTHCHECK"]
    assert health and "/healthz" in health[0]
    volumes = [json.loads(args) for word, args in steps if word == "VOLUME"]
    assert volumes == [["/data"]]
    env = image_env(dockerfile())
    known = set(_NUMBERS.values()) | {
        "PARADIAG_CACHE_DIR",
        "PARADIAG_UPLOAD_DIR",
        "PARADIAG_APP_CACHE_DIR",
        "PARADIAG_LOG_LEVEL",
    }
    settings = {k: v for k, v in env.items() if k.startswith("PARADIAG_")}
    assert settings and set(settings) <= known, set(settings) - known
    for name in ("PARADIAG_CACHE_DIR", "PARADIAG_UPLOAD_DIR", "PARADIAG_APP_CACHE_DIR"):
        assert settings[name].startswith("/data/"), f"{name} must live on the data volume"
    readme = (REPO / "README.md").read_text()
    assert all(f"`{k}`" in readme for k in settings), "every image setting is documented"
    cmd = production_command(dockerfile())
    assert cmd[0] == "gunicorn" and cmd[-1] == "paradiag.app.wsgi:server"
    assert (
        "--bind" not in cmd and "-b" not in cmd and "--workers" not in cmd
    )  # $PORT and $WEB_CONCURRENCY decide
    assert (REPO / "compose.yaml").is_file() and "paradiag-data:/data" in (REPO / "compose.yaml").read_text()


@pytest.mark.slow
def test_the_exact_cmd_serves_its_health_check(tmp_path: Path) -> None:
    with production_server(tmp_path, workers=1) as url:
        reply = requests.get(url + "/healthz", timeout=10)
        assert reply.status_code == 200 and reply.json() == {"status": "ok"}
        # The HEALTHCHECK's own command, run as Docker would (python from the image's PATH, $PORT set).
        health = next(args for word, args in final_stage(dockerfile()) if word == "HEALTHCHECK")
        command = shlex.split(health.split(" CMD ", 1)[1])
        assert command[0] == "python"
        port = str(urlsplit(url).port)
        done = subprocess.run(
            [sys.executable, *command[1:]], env={"PORT": port}, capture_output=True, timeout=30
        )
        assert done.returncode == 0, done.stderr
        page = requests.get(url + "/", timeout=30)
        assert page.status_code == 200 and "_dash-config" in page.text  # the open start page (no users file)
    assert (tmp_path / "app-cache" / "secret_key").stat().st_mode & 0o777 == 0o600
