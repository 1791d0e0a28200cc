"""Failed sign-ins are counted per (address, name), with looser caps per address and per name: a guesser is
stopped, the other users behind its address (a shared NAT or proxy) are not, nor is its target elsewhere at once.
The shared store (``AuthStore``) is tested here with addresses apart; tests/test_app_security.py sends the same
attacks to the team server."""

from __future__ import annotations

from pathlib import Path

import pytest
from werkzeug.security import generate_password_hash

from paradiag.app.auth import FREE_TRIES, AuthStore, throttle_keys


@pytest.fixture
def store(tmp_path: Path) -> AuthStore:
    return AuthStore(tmp_path / "auth.sqlite")


def fail(store: AuthStore, addr: str, name: str, times: int) -> list[float]:
    """``times`` failed attempts; the wait each was answered (0: it was checked, and failed)."""
    return [store.attempt(throttle_keys(addr, name)) for _ in range(times)]


def test_one_name_guessed_from_one_address_is_locked_there_only(store: AuthStore) -> None:
    tries = FREE_TRIES["pair"]
    assert fail(store, "10.0.0.1", "carol", tries) == [0.0] * tries
    assert (
        store.attempt(throttle_keys("10.0.0.1", "carol")) == 0.0
    )  # the one that starts the lock-out is checked
    assert store.attempt(throttle_keys("10.0.0.1", "carol")) > 0  # then refused, right password or not
    assert store.attempt(throttle_keys("10.0.0.1", "alice")) == 0.0  # another user at the same address (NAT)
    assert store.attempt(throttle_keys("10.0.0.2", "carol")) == 0.0  # carol from elsewhere
    store.succeeded(throttle_keys("10.0.0.1", "alice"))


def test_many_names_from_one_address_lock_that_address_out(store: AuthStore) -> None:
    for i in range(FREE_TRIES["addr"]):
        assert store.attempt(throttle_keys("10.0.0.9", f"name{i}")) == 0.0
    assert store.attempt(throttle_keys("10.0.0.9", "one-more")) == 0.0
    assert store.attempt(throttle_keys("10.0.0.9", "erin")) > 0  # every name, from that address
    assert store.attempt(throttle_keys("10.0.0.10", "erin")) == 0.0  # not from the next one


def test_one_name_from_many_addresses_is_locked_after_the_looser_cap(store: AuthStore) -> None:
    for i in range(FREE_TRIES["user"]):
        assert store.attempt(throttle_keys(f"10.1.{i}.1", "frank")) == 0.0
    assert store.attempt(throttle_keys("10.2.0.1", "frank")) == 0.0
    assert store.attempt(throttle_keys("10.2.0.2", "frank")) > 0
    assert store.attempt(throttle_keys("10.2.0.2", "grace")) == 0.0


def test_a_success_clears_its_pair_and_gives_back_its_charge(store: AuthStore) -> None:
    keys = throttle_keys("10.0.0.3", "heidi")
    fail(store, "10.0.0.3", "heidi", FREE_TRIES["pair"] - 1)
    assert store.attempt(keys) == 0.0
    store.succeeded(keys)  # the right password at the last free try
    assert (
        fail(store, "10.0.0.3", "heidi", FREE_TRIES["pair"]) == [0.0] * FREE_TRIES["pair"]
    )  # counted afresh


def test_sign_in_through_a_proxy_is_throttled_per_forwarded_address(tmp_path: Path) -> None:
    """Behind a trusted proxy (PARADIAG_PROXY_HOPS) the address is the forwarded one: users behind one proxy
    are told apart by their own addresses, and locking one out leaves the others."""
    from paradiag.app.config import Config
    from paradiag.app.factory import create_app

    (tmp_path / "users").write_text(
        "".join(
            f"{n}:{generate_password_hash('pw', method='pbkdf2:sha256:1000')}\n" for n in ("ivan", "judy")
        )
    )
    config = Config(
        upload_dir=tmp_path / "up",
        app_cache_dir=tmp_path / "app",
        secret_key="k",
        users_file=tmp_path / "users",
        proxy_hops=1,
    )
    client = create_app(config).server.test_client()

    def login(name: str, password: str, addr: str) -> int:
        return client.post(
            "/login", data={"user": name, "password": password}, headers={"X-Forwarded-For": addr}
        ).status_code

    assert [login("ivan", "guess", "192.0.2.1") for _ in range(FREE_TRIES["pair"] + 1)] == [401] * (
        FREE_TRIES["pair"] + 1
    )
    assert login("ivan", "pw", "192.0.2.1") == 429
    assert login("ivan", "pw", "192.0.2.2") == 302  # ivan from his other address
    assert login("judy", "pw", "192.0.2.1") == 302  # judy behind the same address


def test_workers_booting_together_each_open_the_auth_store(tmp_path: Path) -> None:
    """Two gunicorn workers booting together: one switched the file to WAL while the other held it, SQLite said
    "database is locked" at once (no wait), the worker exited and the master shut the server down (a CI run). Four
    workers (threads) open one new store at once, 40 times: none fails (before the retry: 3 of 40 here)."""
    import threading

    for trial in range(40):
        path = tmp_path / f"auth{trial}.sqlite"
        start = threading.Barrier(4)
        errors: list[Exception] = []

        def boot(
            path: Path = path, start: threading.Barrier = start, errors: list[Exception] = errors
        ) -> None:
            start.wait()
            try:
                AuthStore(path)
            except Exception as exc:  # what a worker's boot would die of
                errors.append(exc)

        workers = [threading.Thread(target=boot) for _ in range(4)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        assert not errors, (trial, errors)
