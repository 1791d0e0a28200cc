"""The team server as the security tests run it: the image's gunicorn command on loopback (two workers), a few
users with cheap password hashes (the dummy hash for unknown names follows the file's method), and the requests a
signed-in browser makes to upload and wait for the parse."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import requests
from werkzeug.security import generate_password_hash

from benchmarks.load import production_server

USERS = {
    "alice": "a-secret",
    "bob": "b-secret",
    "carol": "c-secret",
    "dave": "d-secret",
    "erin": "e-secret",
    "frank": "f-secret",
}


@contextlib.contextmanager
def team_server(root: Path, env: dict[str, str] | None = None) -> Iterator[str]:
    """The server's URL, with USERS in its users file under ``root`` and ``env`` added to its environment."""
    (root / "users").write_text(
        "".join(f"{n}:{generate_password_hash(p, method='pbkdf2:sha256:1000')}\n" for n, p in USERS.items())
    )
    with production_server(root, {"PARADIAG_USERS": str(root / "users"), **(env or {})}, workers=2) as url:
        yield url


def signed_in(url: str, name: str) -> requests.Session:
    s = requests.Session()
    r = s.post(
        url + "/login", data={"user": name, "password": USERS[name]}, allow_redirects=False, timeout=30
    )
    assert r.status_code == 302, r.text
    return s


def post_upload(s: requests.Session, url: str, files: list[tuple[str, bytes]]) -> requests.Response:
    return s.post(url + "/api/upload", files=[("files", (name, data)) for name, data in files], timeout=120)


def wait_parsed(s: requests.Session, url: str, upload_id: str) -> dict[str, Any]:
    """The upload's status once its parse is done or failed."""
    deadline = time.time() + 120
    while time.time() < deadline:
        state = dict(s.get(url + f"/api/upload/{upload_id}/status", timeout=10).json())
        if state.get("state") in ("done", "error"):
            return state
        time.sleep(0.3)
    raise AssertionError("the parse never finished")
