"""What a callback needs from the request: the app's config, the signed-in (or anonymous) user, the job; and
the one place where a callback's failure becomes what the user sees."""

from __future__ import annotations

import logging
import secrets

from dash import callback_context, set_props
from flask import current_app, has_request_context, request, session
from flask_login import current_user

from paradiag.app import jobs
from paradiag.app.config import Config
from paradiag.job import Job

_fallback: list[Config] = []
NOTICE = "job-notice"  # the banner under the header (layouts/shell.py)
log = logging.getLogger("paradiag.app.callbacks")


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
        return str(current_user.name)
    uid = session.get("uid")
    if not uid:
        uid = session["uid"] = "anon-" + secrets.token_hex(8)
    return str(uid)


def job(token: str) -> Job:
    return jobs.open_token(token, config(), user_id())


def on_callback_error(exc: Exception) -> None:
    """Dash's error handler for every callback (factory.py). A job token that names nothing this user may
    open (forged, stale, someone else's upload, an expired one) is the user's to read: a banner says so and
    every output of the callback stays as it was. Anything else is a bug: logged whole, then a 500."""
    if isinstance(exc, jobs.JobNotFound):
        log.info("%s %s: %s", user_id(), request.path, exc)
        set_props(
            NOTICE,
            {
                "children": f"{exc}: it does not exist, or it is not yours to open. Open a job from the start page.",
                "hidden": False,
            },
        )
        return None
    # Flask logs the traceback (its logger is paradiag.app.factory); this line adds who and which callback.
    log.error("callback %s failed for %s: %s: %s", _outputs(), user_id(), type(exc).__name__, exc)
    raise exc


def _outputs() -> str:
    outputs = callback_context.outputs_list
    listed = outputs if isinstance(outputs, list) else [outputs]
    return ",".join(f"{o.get('id')}.{o.get('property')}" for o in listed if isinstance(o, dict))
