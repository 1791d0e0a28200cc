"""A shared instance as a team lead runs it: gunicorn with several workers, sign-in, private uploads."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
from werkzeug.security import generate_password_hash

from tests.conftest import REPO

pytestmark = pytest.mark.slow
SAMPLE = REPO / "sample_traces" / "gpu_moe_expert_imbalance"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    root = tmp_path_factory.mktemp("shared")
    users = root / "users"
    users.write_text(f"alice:{generate_password_hash('a-secret')}\nbob:{generate_password_hash('b-secret')}\n")
    port = free_port()
    env = {
        **os.environ,
        "PARADIAG_USERS": str(users),
        "PARADIAG_SECRET_KEY": "test-secret",
        "PARADIAG_CACHE_DIR": str(root / "cache"),
        "PARADIAG_UPLOAD_DIR": str(root / "uploads"),
        "PARADIAG_APP_CACHE_DIR": str(root / "app-cache"),
    }
    log = root / "access.log"
    gunicorn = [sys.executable, "-m", "gunicorn", "-w", "2", "-b", f"127.0.0.1:{port}", "--access-logfile", str(log)]
    gunicorn += ["--access-logformat", "%(p)s %(U)s %(s)s", "paradiag.app.wsgi:server"]
    proc = subprocess.Popen(gunicorn, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 60
        while time.time() < deadline:
            try:
                requests.get(url + "/login", timeout=2)
                break
            except requests.ConnectionError:
                time.sleep(0.3)
        yield url, log
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)


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
        state = requests.get(url + f"/api/upload/{upload_id}/status", cookies=alice.cookies, timeout=10).json()
        if state.get("state") in ("done", "error"):
            break
        time.sleep(0.5)
    assert state.get("state") == "done", state
    bob = signed_in(url, "bob", "b-secret")
    theirs = bob.get(url + f"/api/upload/{upload_id}/status", timeout=10)
    assert theirs.json().get("state") != "done"  # bob cannot see alice's upload
    for _ in range(20):
        requests.get(url + "/login", timeout=10)
    workers = {line.split()[0] for line in log.read_text().splitlines() if line.strip()}
    assert len(workers) >= 2, "every request went to one worker"
    shutil.rmtree(log.parent / "uploads", ignore_errors=True)
