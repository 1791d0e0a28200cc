"""A shared instance as a team lead runs it: gunicorn with several workers, sign-in, private uploads."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
from werkzeug.security import generate_password_hash

from benchmarks.load import production_server
from tests.conftest import REPO

pytestmark = pytest.mark.slow
SAMPLE = REPO / "sample_traces" / "gpu_moe_expert_imbalance"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """The image's command (benchmarks/load.py runs it here) with two workers; yields (URL, its log)."""
    root = tmp_path_factory.mktemp("shared")
    users = root / "users"
    users.write_text(
        f"alice:{generate_password_hash('a-secret')}\nbob:{generate_password_hash('b-secret')}\n"
    )
    env = {"PARADIAG_USERS": str(users), "PARADIAG_SECRET_KEY": "test-secret"}
    with production_server(root, env, workers=2) as url:
        yield url, root / "server.log"


def signed_in(url: str, name: str, password: str) -> requests.Session:
    s = requests.Session()
    r = s.post(url + "/login", data={"user": name, "password": password}, allow_redirects=False, timeout=10)
    assert r.status_code == 302, r.text
    return s


def test_sign_in_is_required(server: tuple[str, Path]) -> None:
    url, _ = server
    r = requests.get(url + "/", allow_redirects=False, timeout=10)
    assert r.status_code == 302 and r.headers["Location"].endswith("/login")
    r = requests.post(url + "/login", data={"user": "alice", "password": "wrong"}, timeout=10)
    assert "wrong user or password" in r.text
    page = signed_in(url, "alice", "a-secret").get(url + "/", timeout=30)
    assert page.status_code == 200 and "_dash-config" in page.text


def test_uploads_are_private_and_any_worker_answers(server: tuple[str, Path]) -> None:
    url, log = server
    alice = signed_in(url, "alice", "a-secret")
    files = [("files", (p.name, p.read_bytes())) for p in sorted(SAMPLE.iterdir()) if p.is_file()]
    r = alice.post(url + "/api/upload", files=files, timeout=60)
    assert r.status_code == 200, r.text
    upload_id = r.json()["id"]
    state = {}
    deadline = time.time() + 120
    while time.time() < deadline:
        # A fresh connection each time: the status is on disk, so whichever worker answers knows it.
        state = requests.get(
            url + f"/api/upload/{upload_id}/status", cookies=alice.cookies, timeout=10
        ).json()
        if state.get("state") in ("done", "error"):
            break
        time.sleep(0.5)
    assert state.get("state") == "done", state
    bob = signed_in(url, "bob", "b-secret")
    theirs = bob.get(url + f"/api/upload/{upload_id}/status", timeout=10)
    assert theirs.json().get("state") != "done"  # bob cannot see alice's upload
    for _ in range(20):
        requests.get(url + "/login", timeout=10)
    # The paradiag request log (gunicorn's error log format: [time] [pid] [level] ...) names the user and time.
    lines = re.findall(r"\[(\d+)\] \[INFO\] GET /login 200 user=\S+ \d+ ms", log.read_text())
    assert len(set(lines)) >= 2, "every request went to one worker"
    assert re.search(r"POST /api/upload 200 user=alice \d+ ms", log.read_text())
    shutil.rmtree(log.parent / "uploads", ignore_errors=True)


def test_a_failed_parse_leaves_its_story_in_the_server_log_only(server: tuple[str, Path]) -> None:
    url, log = server
    alice = signed_in(url, "alice", "a-secret")
    r = alice.post(
        url + "/api/upload", files=[("files", ("rank0.pt.trace.json", b'{"traceEvents": [1, 2'))], timeout=60
    )
    upload_id = r.json()["id"]
    deadline = time.time() + 60
    while (state := alice.get(url + f"/api/upload/{upload_id}/status", timeout=10).json())["state"] not in (
        "done",
        "error",
    ):
        assert time.time() < deadline
        time.sleep(0.3)
    assert state["state"] == "error" and str(log.parent) not in state["message"]
    while (
        f"upload {upload_id}: parse error" not in log.read_text()
    ):  # the supervisor logs once its child exits
        assert time.time() < deadline
        time.sleep(0.3)
    assert (
        f"upload {upload_id}: {log.parent}" in log.read_text()
    )  # the operator sees the whole message, paths too


def test_a_worker_sets_the_apps_own_objects_aside_from_the_collector(tmp_path: Path) -> None:
    """A worker imports the WSGI module: what that leaves alive is frozen, so no full collection walks it again."""
    probe = "import gc, paradiag.app.wsgi; print(gc.get_freeze_count(), len(gc.get_objects()))"
    env = {
        **os.environ,
        "PARADIAG_CACHE_DIR": str(tmp_path / "c"),
        "PARADIAG_APP_CACHE_DIR": str(tmp_path / "a"),
    }
    out = subprocess.run(
        [sys.executable, "-c", probe], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    frozen, tracked = map(int, out.stdout.split())
    assert frozen > 50_000 and tracked < frozen / 10, out.stderr[-2000:]
