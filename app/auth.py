"""Sign-in with flask-login when ``PARADIAG_USERS`` names a users file (``name:password-hash`` per line, the hash
from ``werkzeug.security.generate_password_hash``). Without it the app is open and uploads are private to a
browser session."""

from __future__ import annotations

from pathlib import Path

from flask import Flask, Response, redirect, request
from flask_login import LoginManager, UserMixin, login_user, logout_user
from werkzeug.security import check_password_hash

_FORM = """<!doctype html><title>paradiag · sign in</title>
<form method=post style="font-family:sans-serif;max-width:20em;margin:4em auto">
<h2>paradiag</h2>{error}
<p><label>user <input name=user autofocus></label></p>
<p><label>password <input name=password type=password></label></p>
<p><button type=submit>sign in</button></p></form>"""
OPEN_PATHS = ("/login", "/_dash-component-suites/", "/assets/")


class User(UserMixin):
    def __init__(self, name: str) -> None:
        self.id = name


def read_users(path: Path) -> dict[str, str]:
    users = {}
    for line in path.read_text().splitlines():
        name, sep, digest = line.strip().partition(":")
        if sep and name and not name.startswith("#"):
            users[name] = digest
    return users


def setup_login(server: Flask, users_file: Path) -> None:
    manager = LoginManager(server)
    server.config["PARADIAG_LOGIN"] = True

    @manager.user_loader
    def load(name: str) -> User | None:
        return User(name) if name in read_users(users_file) else None

    @server.route("/login", methods=["GET", "POST"])
    def login() -> Response | str:
        if request.method == "POST":
            name = request.form.get("user", "")
            digest = read_users(users_file).get(name)
            if digest and check_password_hash(digest, request.form.get("password", "")):
                login_user(User(name))
                return redirect("/")  # type: ignore[return-value]
            return _FORM.format(error="<p style=color:#b00>wrong user or password</p>")
        return _FORM.format(error="")

    @server.route("/logout")
    def logout() -> Response:
        logout_user()
        return redirect("/login")  # type: ignore[return-value]

    @server.before_request
    def require_login() -> Response | None:
        from flask_login import current_user

        if request.path.startswith(OPEN_PATHS) or current_user.is_authenticated:
            return None
        return redirect("/login")  # type: ignore[return-value]
