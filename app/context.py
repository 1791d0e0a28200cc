"""What a callback needs from the request: the app's config, the signed-in (or anonymous) user, the job."""

from __future__ import annotations

import secrets

from flask import current_app, has_request_context, session
from flask_login import current_user

from paradiag.app import jobs
from paradiag.app.config import Config
from paradiag.dataset import Job

_fallback: list[Config] = []


def config() -> Config:
    if current_app:
        cfg = current_app.config.get("PARADIAG")
        if isinstance(cfg, Config):
            return cfg
    if not _fallback:
        _fallback.append(Config.from_env())
    return _fallback[0]


def use_config(cfg: Config) -> None:
    """The config for callbacks called outside a request (tests, benchmarks)."""
    _fallback[:] = [cfg]


def user_id() -> str:
    """The signed-in user's name; without sign-in, an anonymous id kept in this browser's session cookie."""
    if not has_request_context():
        return "local"
    if current_app.config.get("PARADIAG_LOGIN") and current_user.is_authenticated:
        return str(current_user.get_id())
    uid = session.get("uid")
    if not uid:
        uid = session["uid"] = "anon-" + secrets.token_hex(8)
    return str(uid)


def job(token: str) -> Job:
    return jobs.open_token(token, config(), user_id())
