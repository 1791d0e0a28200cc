"""Attacks on the team server, against the real thing: the image's gunicorn command on loopback, several workers,
sign-in. Each test is one thing a user (or a page on another site) could send, and what must come of it."""

from __future__ import annotations

import io
import os
import shutil
import stat
import tarfile
import time
import zipfile
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from werkzeug.security import generate_password_hash

from tests.conftest import REPO
from tests.helpers import kineto_trace, write_trace
from tests.teamserver import USERS, post_upload, signed_in, team_server, wait_parsed

pytestmark = pytest.mark.slow
FOREIGN = "https://evil.example"
SAMPLE = REPO / "sample_traces" / "gpu_moe_expert_imbalance"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    root = tmp_path_factory.mktemp("team")
    with team_server(
        root, {"PARADIAG_UPLOAD_MAX_UNPACKED_MB": "16", "PARADIAG_UPLOAD_MAX_RATIO": "50"}
    ) as url:
        yield url, root


def uploads_of(root: Path, user: str) -> list[Path]:
    folder = root / "uploads" / user
    return sorted(folder.iterdir()) if folder.is_dir() else []


def zip_bomb(entry_mb: int) -> bytes:
    blob = io.BytesIO()
    with (
        zipfile.ZipFile(blob, "w", zipfile.ZIP_DEFLATED) as z,
        z.open("rank0.pt.trace.json", "w", force_zip64=True) as f,
    ):
        chunk = b"\0" * (1 << 20)
        for _ in range(entry_mb):
            f.write(chunk)
    return blob.getvalue()


def test_archive_bombs_are_refused_named_and_removed(server: tuple[str, Path]) -> None:
    url, root = server
    alice = signed_in(url, "alice")
    before = uploads_of(root, "alice")
    bomb = zip_bomb(64)  # 64 MB of zeros in ~64 KB: 1000x
    r = post_upload(alice, url, [("bomb.zip", bomb)])
    assert r.status_code == 413 and "PARADIAG_UPLOAD_MAX_RATIO" in r.json()["error"], r.text
    tar = io.BytesIO()
    with tarfile.open(fileobj=tar, mode="w:gz") as t:
        info = tarfile.TarInfo("job/rank0.json")
        info.size = 64 << 20
        t.addfile(info, io.BytesIO(b"\0" * info.size))
    r = post_upload(alice, url, [("bomb.tar.gz", tar.getvalue())])
    assert r.status_code == 413 and "PARADIAG_UPLOAD_MAX_RATIO" in r.json()["error"], r.text
    stored = io.BytesIO()
    with zipfile.ZipFile(stored, "w", zipfile.ZIP_STORED) as z:  # no compression: only the total cap stops it
        for i in range(3):
            z.writestr(f"rank{i}.json", os.urandom(8 << 20))
    r = post_upload(alice, url, [("big.zip", stored.getvalue())])
    assert (
        r.status_code == 413
        and "16 MB" in r.json()["error"]
        and "PARADIAG_UPLOAD_MAX_UNPACKED_MB" in r.json()["error"]
    ), r.text
    assert uploads_of(root, "alice") == before, "what a refused archive wrote stays behind"


def test_secrets_and_user_data_are_private(server: tuple[str, Path]) -> None:
    url, root = server
    alice = signed_in(url, "alice")
    r = post_upload(alice, url, [(p.name, p.read_bytes()) for p in sorted(SAMPLE.iterdir()) if p.is_file()])
    assert r.status_code == 200, r.text
    assert wait_parsed(alice, url, r.json()["id"])["state"] == "done"
    mode = lambda p: stat.S_IMODE(p.stat().st_mode)  # noqa: E731
    assert mode(root / "app-cache" / "secret_key") == 0o600
    assert mode(root / "app-cache" / "auth.sqlite") == 0o600
    assert (
        mode(root / "app-cache") == 0o700
        and mode(root / "uploads") == 0o700
        and mode(root / "cache") == 0o700
    )
    upload_dir = root / "uploads" / "alice" / r.json()["id"]
    assert mode(root / "uploads" / "alice") == 0o700 and mode(upload_dir) == 0o700
    assert mode(upload_dir / "status.json") == 0o600
    assert all(mode(p) == 0o600 for p in (upload_dir / "files").rglob("*") if p.is_file())


def test_cookies_and_security_headers(server: tuple[str, Path]) -> None:
    url, _ = server
    r = requests.post(
        url + "/login", data={"user": "bob", "password": USERS["bob"]}, allow_redirects=False, timeout=30
    )
    cookie = r.headers["Set-Cookie"].lower()
    assert "httponly" in cookie and "samesite=lax" in cookie and "secure" not in cookie  # plain http here
    for path in ("/login", "/healthz"):
        h = requests.get(url + path, timeout=10).headers
        assert (
            "frame-ancestors 'none'" in h["Content-Security-Policy"]
            and "default-src 'self'" in h["Content-Security-Policy"]
        )
        assert h["X-Frame-Options"] == "DENY" and h["X-Content-Type-Options"] == "nosniff"
        assert h["Referrer-Policy"] == "same-origin" and "Strict-Transport-Security" not in h


def test_posts_from_a_foreign_origin_are_refused(server: tuple[str, Path]) -> None:
    url, _ = server
    r = requests.post(
        url + "/login",
        data={"user": "bob", "password": USERS["bob"]},
        headers={"Origin": FOREIGN},
        allow_redirects=False,
        timeout=30,
    )
    assert r.status_code == 403
    bob = signed_in(url, "bob")
    r = bob.post(
        url + "/api/upload", files=[("files", ("a.json", b"{}"))], headers={"Origin": FOREIGN}, timeout=30
    )
    assert r.status_code == 403
    r = bob.post(url + "/_dash-update-component", json={}, headers={"Referer": FOREIGN + "/page"}, timeout=30)
    assert r.status_code == 403
    same = requests.post(
        url + "/login",
        data={"user": "bob", "password": USERS["bob"]},
        headers={"Origin": url},
        allow_redirects=False,
        timeout=30,
    )
    assert same.status_code == 302


def test_a_cookie_from_before_sign_out_no_longer_works(server: tuple[str, Path]) -> None:
    url, _ = server
    alice = signed_in(url, "alice")
    stolen = alice.cookies.get_dict()
    assert requests.get(url + "/", cookies=stolen, allow_redirects=False, timeout=30).status_code == 200
    alice.get(url + "/logout", timeout=30)
    r = requests.get(url + "/", cookies=stolen, allow_redirects=False, timeout=30)
    assert r.status_code == 302 and r.headers["Location"].endswith("/login")
    assert (
        requests.post(url + "/_dash-update-component", json={}, cookies=stolen, timeout=30).status_code == 401
    )


def test_only_the_sign_in_page_itself_is_open(server: tuple[str, Path]) -> None:
    url, _ = server
    for path in ("/loginx", "/login/../", "/healthzz", "/_dash-layout", "/api/upload/abc/status"):
        r = requests.get(url + path, allow_redirects=False, timeout=30)
        assert r.status_code in (302, 404) and "_dash-config" not in r.text, path


def on_selection(dep: dict[str, Any]) -> bool:
    """The reducer's store ``selection``, or one view's part of it (``selection-<view>``)."""
    return dep["id"] == "selection" or dep["id"].startswith("selection-")


def callbacks_on_selection(s: requests.Session, url: str) -> list[dict[str, Any]]:
    deps = s.get(url + "/_dash-dependencies", timeout=30).json()
    return [
        d
        for d in deps
        if "{" not in d["output"] and any(on_selection(i) and i["property"] == "data" for i in d["inputs"])
    ]


def call(s: requests.Session, url: str, dep: dict[str, Any], values: dict[str, Any]) -> requests.Response:
    outputs = [
        dict(zip(("id", "property"), p.rsplit(".", 1), strict=True))
        for p in dep["output"].strip(".").split("...")
    ]

    def value(d: dict[str, Any]) -> Any:
        if d["id"].startswith("{"):
            return []
        return {"id": d["id"], "property": d["property"], "value": values.get(f"{d['id']}.{d['property']}")}

    body = {
        "output": dep["output"],
        "outputs": outputs if len(outputs) > 1 else outputs[0],
        "inputs": [value(d) for d in dep["inputs"]],
        "state": [value(d) for d in dep.get("state", [])],
        "changedPropIds": [
            f"{d['id']}.{d['property']}"
            for d in dep["inputs"]
            if not d["id"].startswith("{") and on_selection(d)
        ][:1],
    }
    return s.post(url + "/_dash-update-component", json=body, timeout=60)


def test_forged_and_foreign_job_tokens_answer_not_found(server: tuple[str, Path]) -> None:
    url, _ = server
    alice, erin = signed_in(url, "alice"), signed_in(url, "erin")
    r = post_upload(alice, url, [(p.name, p.read_bytes()) for p in sorted(SAMPLE.iterdir()) if p.is_file()])
    alices = f"upload:{r.json()['id']}"
    assert wait_parsed(alice, url, r.json()["id"])["state"] == "done"
    deps = callbacks_on_selection(erin, url)
    assert len(deps) >= 5
    for token in ("upload:0123456789abcdef", "sample:no_such_sample", "upload:../../alice", alices, "served"):
        noticed = 0
        for dep in deps:
            forged = {f"{i['id']}.data": {"job": token, "step": 1} for i in dep["inputs"] if on_selection(i)}
            reply = call(erin, url, dep, {**forged, "heatmap-metric.value": "step_ms"})
            assert reply.status_code in (200, 204), (token, dep["output"], reply.status_code)
            if reply.status_code == 200:
                side = reply.json().get("sideUpdate", {}).get("job-notice", {})
                noticed += "not yours to open" in str(side.get("children")) and side.get("hidden") is False
                assert "Traceback" not in reply.text and "/tmp" not in reply.text
        assert noticed, f"no callback told the user that {token} is not found"
    assert erin.get(url + f"/api/upload/{alices.partition(':')[2]}/status", timeout=10).status_code == 404


def test_upload_names_unknown_ids_and_errors_are_clean(server: tuple[str, Path], tmp_path: Path) -> None:
    url, root = server
    dave = signed_in(url, "dave")
    trace = write_trace(tmp_path / "t.json", kineto_trace(0, world=1)).read_bytes()
    long_name = "r" * 300 + ".pt.trace.json"
    r = post_upload(dave, url, [(long_name, trace), ("x" * 300 + "/" + long_name, trace)])
    assert r.status_code == 200, r.text
    state = wait_parsed(dave, url, r.json()["id"])
    assert state["state"] in ("done", "error") and str(root) not in str(state)
    gone = dave.get(url + "/api/upload/feedfacefeedface/status", timeout=10)
    assert gone.status_code == 404 and gone.json()["state"] == "unknown"
    poll = next(
        d
        for d in dave.get(url + "/_dash-dependencies", timeout=30).json()
        if d["output"].startswith("..upload-progress.value")
    )
    reply = call(dave, url, poll, {"upload-state.data": {"id": "feedfacefeedface"}})
    answer = reply.json()["response"]
    assert (
        "no such upload" in answer["upload-message"]["children"] and answer["upload-poll"]["disabled"] is True
    )
    r = post_upload(dave, url, [("rank0.pt.trace.json", b'{"traceEvents": [{"ph": "X", "name": ')])
    state = wait_parsed(dave, url, r.json()["id"])
    assert state["state"] == "error", state
    assert (
        str(root) not in state["message"]
        and "Traceback" not in state["message"]
        and "/tmp" not in state["message"]
    )
    deadline = time.time() + 30
    while (root / "uploads" / "dave" / r.json()["id"] / "files").exists():  # a failed upload keeps no files
        assert time.time() < deadline
        time.sleep(0.2)


def test_failed_sign_ins_are_throttled(server: tuple[str, Path]) -> None:
    url, _ = server
    for _ in range(6):
        r = requests.post(url + "/login", data={"user": "carol", "password": "guess"}, timeout=30)
        assert r.status_code == 401 and "wrong user or password" in r.text
    r = requests.post(
        url + "/login", data={"user": "carol", "password": USERS["carol"]}, allow_redirects=False, timeout=30
    )
    assert r.status_code == 429 and "too many failed sign-ins" in r.text  # the right password, but locked out
    # Only carol, from this address: another user behind the same address (a shared NAT or proxy) signs in.
    assert signed_in(url, "dave").get(url + "/", allow_redirects=False, timeout=30).status_code == 200
    # A burst of parallel guesses is counted before any is checked: at most the free tries (5) and the one
    # that starts the lock-out are checked at all.
    from concurrent.futures import ThreadPoolExecutor

    def guess(i: int) -> int:
        return requests.post(
            url + "/login", data={"user": "frank", "password": f"guess{i}"}, timeout=60
        ).status_code

    with ThreadPoolExecutor(16) as pool:
        codes = Counter(pool.map(guess, range(40)))
    assert codes[401] <= 6 and codes[429] >= 34 and set(codes) <= {401, 429}, codes
    # Per address too, with a looser cap: guessing many names from one address locks that address out, for
    # every name (tests/test_app_signin_throttle.py: each counter on its own, addresses apart).
    from paradiag.app.auth import FREE_TRIES

    for i in range(FREE_TRIES["addr"]):
        requests.post(url + "/login", data={"user": f"nobody{i}", "password": "guess"}, timeout=30)
    r = requests.post(
        url + "/login", data={"user": "erin", "password": USERS["erin"]}, allow_redirects=False, timeout=30
    )
    assert r.status_code == 429


@pytest.fixture(scope="module")
def big_trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One 96 MB trace (600k events): its parse needs more than a second and more than 480 MB of address space
    (half of it, 300k events, parsed within 480 MB once the per-rank analysis stopped reading its events back)."""
    return write_trace(
        tmp_path_factory.mktemp("big") / "rank0.pt.trace.json",
        kineto_trace(0, steps=200, world=1, kernels_per_step=1000),
    )


@pytest.fixture
def big_upload(big_trace: Path, tmp_path: Path) -> Path:
    """An upload of the big trace (a failed parse deletes its files, so each test gets its own)."""
    upload = tmp_path / "u"
    (upload / "files").mkdir(parents=True)
    shutil.copy(big_trace, upload / "files")
    return upload


@pytest.mark.parametrize(
    ("limits", "named"),
    [
        ({"parse_seconds": 1}, "PARADIAG_UPLOAD_PARSE_SECONDS"),
        ({"parse_memory_mb": 480}, "PARADIAG_UPLOAD_PARSE_MEMORY_MB"),
    ],
)
def test_a_parse_over_its_limit_is_stopped_and_named(
    big_upload: Path, limits: dict[str, int], named: str
) -> None:
    from paradiag.app.config import Config
    from paradiag.app.uploads import read_status, supervise

    supervise(big_upload, Config(upload_dir=big_upload.parent, secret_key="unused", **limits))  # type: ignore[arg-type]
    state = read_status(big_upload)
    assert state["state"] == "error" and named in state["message"], state
    assert str(big_upload) not in state["message"]


def test_secure_cookies_when_configured_or_over_tls(tmp_path: Path) -> None:
    from paradiag.app.config import Config
    from paradiag.app.factory import create_app

    def config(**extra: Any) -> Config:
        return Config(upload_dir=tmp_path / "up", app_cache_dir=tmp_path / "app", secret_key="k", **extra)

    configured = create_app(config(secure_cookies=True)).server.test_client().get("/")
    assert (
        "Secure" in configured.headers["Set-Cookie"] and "Strict-Transport-Security" not in configured.headers
    )
    tls = create_app(config()).server.test_client().get("/", base_url="https://paradiag.example")
    assert "Secure" in tls.headers["Set-Cookie"] and tls.headers["Strict-Transport-Security"].startswith(
        "max-age="
    )


def test_a_sign_in_ends_after_its_absolute_lifetime(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from paradiag.app import auth
    from paradiag.app.config import Config
    from paradiag.app.factory import create_app

    (tmp_path / "users").write_text(f"alice:{generate_password_hash('pw', method='pbkdf2:sha256:1000')}\n")
    config = Config(
        upload_dir=tmp_path / "up",
        app_cache_dir=tmp_path / "app",
        secret_key="k",
        users_file=tmp_path / "users",
        session_hours=2,
    )
    client = create_app(config).server.test_client()
    assert client.post("/login", data={"user": "alice", "password": "pw"}).status_code == 302
    assert client.get("/").status_code == 200
    now = time.time()
    monkeypatch.setattr(auth.time, "time", lambda: now + 1.9 * 3600)  # still active within the lifetime
    assert client.get("/").status_code == 200
    monkeypatch.setattr(auth.time, "time", lambda: now + 2.1 * 3600)  # however active, the sign-in has ended
    answer = client.get("/")
    assert answer.status_code == 302 and answer.headers["Location"].endswith("/login")
    assert client.post("/_dash-update-component", json={}).status_code == 401


def test_unknown_names_cost_a_password_hash(monkeypatch: pytest.MonkeyPatch) -> None:
    from paradiag.app import auth

    checked: list[str] = []
    real = auth.check_password_hash
    monkeypatch.setattr(
        auth, "check_password_hash", lambda digest, pw: checked.append(digest) or real(digest, pw)
    )
    users = {"alice": generate_password_hash("a", method="pbkdf2:sha256:1000")}
    checker = auth._Checker()
    assert checker.check(None, "a", users) is False
    assert checker.check(users["alice"], "a", users) is True
    assert len(checked) == 2 and checked[0].startswith(
        "pbkdf2:sha256:1000$"
    )  # the dummy uses the users' method


def test_snapshot_title_names_the_folder_not_the_machine(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from paradiag.snapshot import snapshot

    out = tmp_path / "r.html"
    assert CliRunner().invoke(snapshot, [str(SAMPLE), "-o", str(out)]).exit_code == 0
    page = out.read_text()
    assert f"<title>paradiag: {SAMPLE.name}</title>" in page and str(SAMPLE.parent) not in page
    assert (
        CliRunner().invoke(snapshot, [str(SAMPLE), "-o", str(out), "--title", "nightly run"]).exit_code == 0
    )
    assert "<title>paradiag: nightly run</title>" in out.read_text()


def test_every_user_gets_a_folder_of_their_own_inside_the_uploads(tmp_path: Path) -> None:
    from paradiag.app.config import Config
    from paradiag.app.jobs import SAFE_NAME, user_upload_root

    config = Config(upload_dir=tmp_path, secret_key="unused")
    folders = {
        user_upload_root(config, name) for name in ("alice", "j. doe", "j@team", "..", "../alice", "a/b")
    }
    assert len(folders) == 6 and all(f.parent == tmp_path and not f.name.startswith(".") for f in folders)
    assert not any(SAFE_NAME.match(n) for n in ("..", ".", ".hidden", "a/b", "x" * 129))


def test_uploads_beyond_the_parse_slots_wait_their_turn(tmp_path: Path) -> None:
    import threading

    from paradiag.app.config import Config
    from paradiag.app.uploads import parse_slot, read_status, supervise

    config = Config(upload_dir=tmp_path / "uploads", secret_key="unused", parse_slots=1)
    upload = tmp_path / "uploads" / "alice" / "u1"
    shutil.copytree(SAMPLE, upload / "files")
    with parse_slot(tmp_path / "other", config):  # another worker's parse holds the only slot
        waiter = threading.Thread(target=supervise, args=(upload, config))
        waiter.start()
        deadline = time.time() + 30
        while not read_status(upload).get("waiting"):
            assert time.time() < deadline and waiter.is_alive()
            time.sleep(0.1)
        assert read_status(upload)["state"] == "queued"
    waiter.join(timeout=120)
    assert read_status(upload)["state"] == "done"


def test_cached_aggregates_are_keyed_by_paradiags_version(monkeypatch: pytest.MonkeyPatch) -> None:
    from paradiag.app import store

    before = store.key_of("overview", "content-hash", {"step": 1})
    monkeypatch.setattr(store, "__version__", "99.0.0")
    assert (
        store.key_of("overview", "content-hash", {"step": 1}) != before
    )  # an upgrade never reads the old views


def test_an_entry_the_folder_cannot_take_is_named_and_nothing_stays(tmp_path: Path) -> None:
    from werkzeug.datastructures import FileStorage

    from paradiag.app.config import Config
    from paradiag.app.uploads import UploadRejected, save_upload

    blob = io.BytesIO()
    with zipfile.ZipFile(blob, "w") as z:
        z.writestr("job/rank0", b"{}")
        z.writestr("job/rank0/trace.json", b"{}")  # a file where a folder must go
    with pytest.raises(UploadRejected, match=r"'job/rank0/trace\.json': cannot be stored") as refused:
        save_upload(
            [FileStorage(io.BytesIO(blob.getvalue()), filename="job.zip")],
            tmp_path / "alice",
            Config(secret_key="unused"),
        )
    assert refused.value.http_status == 400 and not list((tmp_path / "alice").iterdir())


@pytest.mark.browser
@pytest.mark.filterwarnings("ignore:HTTPResponse.getheader:DeprecationWarning")  # selenium 4.2 on urllib3 2.x
def test_a_forged_job_link_shows_not_found_in_the_browser(tmp_path: Path) -> None:
    from paradiag.app.config import Config
    from paradiag.app.factory import create_app
    from tests.test_app_support import composite, severe_logs

    app = create_app(Config(upload_dir=tmp_path / "up", app_cache_dir=tmp_path / "app", secret_key="k"))
    for duo in composite(app):
        for query in (
            "?job=upload:0123456789abcdef&step=1",
            "?job=upload:0123456789abcdef",
        ):  # with and without a step
            duo.driver.get(duo.server_url + "/" + query)
            duo.wait_for_contains_text("#job-notice", "not yours to open", timeout=30)
            assert "upload:0123456789abcdef" in duo.find_element("#job-notice").text
            assert not [e for e in severe_logs(duo) if "500" in str(e.get("message"))]
