"""Sign-in, sessions and the web-facing rules every request goes through.

Sign-in uses flask-login when ``PARADIAG_USERS`` names a users file (``name:password-hash`` per line, the hash
from ``werkzeug.security.generate_password_hash``). Without it the app is open and uploads are private to a
browser session. Failed sign-ins are throttled per (client address, user name), with looser caps per address and
per name (``FREE_TRIES``; exponential lock-out beyond them);
signing out ends every cookie issued to that user before (a per-user session generation kept on disk, so every
worker agrees). Throttle counts and generations live in one SQLite file beside the app cache (mode 0600).
"""

from __future__ import annotations

import contextlib
import html
import logging
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

from dash import Dash
from dash.exceptions import DependencyException
from flask import Flask, Request, Response, abort, jsonify, redirect, request, session
from flask.sessions import SecureCookieSessionInterface
from flask_login import LoginManager, UserMixin, current_user, login_user, logout_user
from werkzeug.security import check_password_hash, generate_password_hash

from paradiag.app.config import Config, private_dir, private_file

_FORM = """<!doctype html><title>paradiag · sign in</title>
<form method=post style="font-family:sans-serif;max-width:20em;margin:4em auto">
<h2>paradiag</h2>{error}
<p><label>user <input name=user autofocus></label></p>
<p><label>password <input name=password type=password></label></p>
<p><button type=submit>sign in</button></p></form>"""
OPEN_PATHS = frozenset({"/login", "/healthz", "/_favicon.ico"})
OPEN_PREFIXES = ("/_dash-component-suites/", "/assets/")
UNSAFE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
# Failed sign-ins allowed before lock-outs start, and the longest lock-out. A guesser is stopped by its
# (address, name) pair; the looser caps stop one address guessing many names ("addr") and many addresses guessing
# one name ("user"), without one user's typos (or a guesser behind a shared NAT or proxy) locking out the others at
# that address, or a guesser elsewhere locking out a user at once.
FREE_TRIES = {"pair": 5, "addr": 100, "user": 50}
MAX_LOCK_S = 15 * 60
log = logging.getLogger("paradiag.app.auth")


class User(UserMixin):
    """A signed-in user; the session id carries the user's session generation, so sign-out revokes it."""

    def __init__(self, name: str, generation: int) -> None:
        self.name = name
        self.id = f"{name}:{generation}"


def read_users(path: Path) -> dict[str, str]:
    users = {}
    for line in path.read_text().splitlines():
        name, sep, digest = line.strip().partition(":")
        if sep and name and not name.startswith("#"):
            users[name] = digest
    return users


class AuthStore:
    """Failed sign-ins and session generations, shared by every worker through one SQLite file."""

    def __init__(self, path: Path) -> None:
        self.path = path
        private_dir(path.parent)
        private_file(path)
        with self._db() as db:
            db.execute(
                "CREATE TABLE IF NOT EXISTS failures (key TEXT PRIMARY KEY, count INTEGER, until REAL)"
            )
            db.execute("CREATE TABLE IF NOT EXISTS generations (user TEXT PRIMARY KEY, gen INTEGER)")
        self._wal()

    def _wal(self, wait_s: float = 30.0) -> None:
        """WAL journal: readers (every request's session check) never wait for writers. Switching to it takes the
        file alone, and SQLite answers "database is locked" at once rather than wait while another connection
        reads it: two gunicorn workers booting together failed so, and the master shut down. Tried again until
        ``wait_s`` has passed."""
        deadline = time.monotonic() + wait_s
        while True:
            try:
                with contextlib.closing(sqlite3.connect(self.path, timeout=wait_s)) as db:
                    db.execute("PRAGMA journal_mode=WAL")
                return
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    @contextlib.contextmanager
    def _db(self, write: bool = True) -> Iterator[sqlite3.Connection]:
        db = sqlite3.connect(self.path, timeout=30, isolation_level=None)
        try:
            # A writer takes the lock up front: read-modify-write stays whole across workers.
            db.execute("BEGIN IMMEDIATE" if write else "BEGIN")
            yield db
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        finally:
            db.close()

    def attempt(self, keys: list[str]) -> float:
        """Seconds until ``keys`` may try again (the attempt is refused), or 0: the attempt may go on, and is
        counted as failed until ``succeeded`` says otherwise, so parallel guesses are counted before any of
        them is checked."""
        with self._db() as db:
            rows = {
                key: db.execute("SELECT count, until FROM failures WHERE key = ?", (key,)).fetchone()
                for key in keys
            }
            wait = max([row[1] - time.time() for row in rows.values() if row] + [0.0])
            if wait > 0:
                return wait
            for key, row in rows.items():
                count = (row[0] if row else 0) + 1
                over = count - FREE_TRIES[key.partition(":")[0]]
                until = time.time() + min(2.0 ** min(over, 30), MAX_LOCK_S) if over > 0 else 0.0
                db.execute("INSERT OR REPLACE INTO failures VALUES (?, ?, ?)", (key, count, until))
        return 0.0

    def succeeded(self, keys: list[str]) -> None:
        """The (address, name) pair's count starts afresh; the address and the name give back the attempt they
        were charged."""
        with self._db() as db:
            for key in keys:
                kind = key.partition(":")[0]
                if kind == "pair":
                    db.execute("DELETE FROM failures WHERE key = ?", (key,))
                else:
                    db.execute(
                        "UPDATE failures SET count = count - 1, until = CASE WHEN count - 1 <= ? THEN 0 ELSE until END WHERE key = ?",
                        (FREE_TRIES[kind], key),
                    )

    def generation(self, user: str) -> int:
        with self._db(write=False) as db:
            row = db.execute("SELECT gen FROM generations WHERE user = ?", (user,)).fetchone()
        return int(row[0]) if row else 0

    def revoke(self, user: str) -> None:
        """End every session of ``user`` issued so far."""
        with self._db() as db:
            db.execute(
                "INSERT INTO generations VALUES (?, 1) ON CONFLICT(user) DO UPDATE SET gen = gen + 1", (user,)
            )


class _Checker:
    """Password checks that take as long for an unknown name as for a known one (names are not guessable by
    timing): an unknown name is checked against a dummy hash made with the users file's own method."""

    def __init__(self) -> None:
        self._dummies: dict[str, str] = {}

    def check(self, digest: str | None, password: str, users: dict[str, str]) -> bool:
        if digest is not None:
            return check_password_hash(digest, password)
        method = next(iter(users.values()), "scrypt").split("$", 1)[0]
        if method not in self._dummies:
            self._dummies[method] = generate_password_hash("unused", method=method)
        check_password_hash(self._dummies[method], password)
        return False


def setup_login(server: Flask, users_file: Path, store: AuthStore, max_age_s: int) -> None:
    """Sign-in by user file. A session ends on sign-out (every cookie of that user) and, at the latest,
    ``max_age_s`` after its sign-in however active it was: the signed cookie carries the sign-in time, so a copied
    cookie stops working too."""
    manager = LoginManager(server)
    server.config["PARADIAG_LOGIN"] = True
    checker = _Checker()

    @manager.user_loader
    def load(user_id: str) -> User | None:
        name, _, gen = user_id.rpartition(":")
        since = session.get("since")
        if not isinstance(since, int | float) or not 0 <= time.time() - since <= max_age_s:
            return None
        if name in read_users(users_file) and gen == str(store.generation(name)):
            return User(name, int(gen))
        return None

    @server.route("/login", methods=["GET", "POST"])
    def login() -> Response | tuple[str, int] | str:
        if request.method != "POST":
            return _FORM.format(error="")
        name, password = request.form.get("user", ""), request.form.get("password", "")
        keys = throttle_keys(request.remote_addr, name)
        wait = store.attempt(keys)
        if wait > 0:
            log.warning("sign-in as %r from %s refused: locked for %.0f s", name, request.remote_addr, wait)
            return _FORM.format(
                error=_error(f"too many failed sign-ins: try again in {max(wait, 1):.0f} s")
            ), 429
        users = read_users(users_file)
        if not checker.check(users.get(name), password, users):
            log.warning("failed sign-in as %r from %s", name, request.remote_addr)
            return _FORM.format(error=_error("wrong user or password")), 401
        store.succeeded(keys)
        session.clear()  # nothing from before sign-in carries over (no session fixation)
        session["since"] = time.time()
        login_user(User(name, store.generation(name)))
        log.info("%s signed in from %s", name, request.remote_addr)
        return redirect("/")  # type: ignore[return-value]

    @server.route("/logout", methods=["GET", "POST"])
    def logout() -> Response:
        if current_user.is_authenticated:
            store.revoke(current_user.name)
            log.info("%s signed out (all their sessions end)", current_user.name)
        logout_user()
        session.clear()
        return redirect("/login")  # type: ignore[return-value]

    @server.before_request
    def require_login() -> Response | tuple[Response, int] | None:
        if is_open(request.path) or current_user.is_authenticated:
            return None
        if request.method in UNSAFE_METHODS:
            return jsonify({"error": "sign in first"}), 401
        return redirect("/login")  # type: ignore[return-value]


def throttle_keys(addr: str | None, name: str) -> list[str]:
    """The counters one sign-in attempt is charged to: its (address, name) pair, its address, its name."""
    name = name[:256]  # a longer one is no user: it need not fill the table with keys of its own
    return [f"pair:{addr}|{name}", f"addr:{addr}", f"user:{name}"]


def _error(text: str) -> str:
    return f"<p style=color:#b00>{html.escape(text)}</p>"


def is_open(path: str) -> bool:
    """Paths served without sign-in: exact names, and the folders of static files (never a mere prefix of a
    name, so ``/loginx`` is not ``/login``)."""
    return path in OPEN_PATHS or path.startswith(OPEN_PREFIXES)


class _SessionInterface(SecureCookieSessionInterface):
    """The session cookie is ``Secure`` when configured so or when this request came over TLS."""

    def get_cookie_secure(self, app: Flask) -> bool:
        return bool(app.config["SESSION_COOKIE_SECURE"]) or request.is_secure


def harden(app: Dash, config: Config) -> None:
    """Cookie flags, security headers, and refusal of state-changing requests from a foreign origin."""
    server = app.server
    server.config.update(
        SESSION_COOKIE_HTTPONLY=True,
        SESSION_COOKIE_SAMESITE="Lax",
        SESSION_COOKIE_SECURE=config.secure_cookies,
    )
    server.config.update(
        REMEMBER_COOKIE_HTTPONLY=True,
        REMEMBER_COOKIE_SAMESITE="Lax",
        REMEMBER_COOKIE_SECURE=config.secure_cookies,
    )
    server.session_interface = _SessionInterface()
    csp: list[
        str
    ] = []  # built on the first response: Dash knows its inline scripts only once all are registered

    @server.before_request
    def static_files_only() -> None:
        """Under the open prefixes only their static files are served (nothing else is open to a stranger):
        a path no static rule matches (``/assets/``, ``/_dash-component-suites/x``) would reach the page's
        catch-all rule."""
        rule = request.url_rule
        if request.path.startswith(OPEN_PREFIXES) and (
            rule is None or not rule.rule.startswith(OPEN_PREFIXES)
        ):
            abort(404)

    # Dash refuses a component file it did not register (a name with "..", another package's, any other) with
    # this exception, which would answer 500: nothing is served, and that is a 404.
    server.register_error_handler(DependencyException, lambda _exc: (jsonify({"error": "not found"}), 404))

    @server.before_request
    def same_origin() -> tuple[Response, int] | None:
        if request.method in UNSAFE_METHODS and not _same_origin(request, config.allowed_origins):
            log.warning(
                "refused %s %s from origin %s",
                request.method,
                request.path,
                request.headers.get("Origin") or request.referrer,
            )
            return jsonify({"error": "cross-origin request refused"}), 403
        return None

    @server.after_request
    def headers(response: Response) -> Response:
        if not csp:
            csp.append(_policy(app))
        response.headers.setdefault("Content-Security-Policy", csp[0])
        response.headers["X-Content-Type-Options"] = "nosniff"
        response.headers["X-Frame-Options"] = "DENY"
        response.headers["Referrer-Policy"] = "same-origin"
        response.headers["Cross-Origin-Opener-Policy"] = "same-origin"
        if request.is_secure:
            response.headers["Strict-Transport-Security"] = "max-age=31536000"
        return response


def _policy(app: Dash) -> str:
    # No 'unsafe-eval': the cartesian plotly.js bundle and Dash's renderer run without it (no figure uses a WebGL
    # trace, whose shaders regl compiles through Function()); tests/test_app_browser_csp.py draws every view under
    # this policy and finds no violation. Inline scripts stay forbidden except Dash's own, by hash. Plotly sets
    # inline styles.
    scripts = " ".join(["'self'", *app.csp_hashes()])
    return (
        f"default-src 'self'; script-src {scripts}; style-src 'self' 'unsafe-inline'; img-src 'self' data: blob:; "
        "font-src 'self' data:; worker-src 'self' blob:; connect-src 'self'; object-src 'none'; base-uri 'self'; "
        "form-action 'self'; frame-ancestors 'none'"
    )


def _same_origin(req: Request, allowed: tuple[str, ...]) -> bool:
    """A browser names the page a request comes from (Origin, else Referer); it must be this host or an
    allowed origin. No header at all is a non-browser client, which carries no victim's cookies by accident."""
    source = req.headers.get("Origin") or req.referrer
    if not source:
        return True
    if source == "null":
        return False
    parts = urlsplit(source)
    return parts.netloc == req.host or f"{parts.scheme}://{parts.netloc}" in allowed
