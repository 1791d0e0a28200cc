"""Upload progress on the start page: assets/upload.js sends the files and fills the upload state; this polls
the parse status (from disk, so any worker can answer) and opens the job when it is ready."""

from __future__ import annotations

from typing import Any

from dash import Dash, Output, no_update

from paradiag.app import boundary, context, ids, jobs
from paradiag.app.boundary import In, St
from paradiag.app.uploads import live_status


def poll(_: int | None, state: dict[str, Any] | None) -> tuple[Any, Any, Any, Any]:
    """(progress value, message, polling disabled, URL to open)."""
    if not state or not state.get("id"):
        return no_update, no_update, True, no_update
    upload_id = str(state["id"])
    if not jobs.SAFE_NAME.match(upload_id):
        return 0, "bad upload id", True, no_update
    status = live_status(
        jobs.user_upload_root(context.config(), context.user_id()) / upload_id, context.config()
    )
    if status.get("state") == "done":
        problems = len(status.get("problems") or [])
        note = f" ({problems} file(s) skipped or with warnings)" if problems else ""
        return (
            100,
            f"parsed {status.get('ranks', '?')} ranks{note}: opening",
            True,
            f"/?job=upload:{upload_id}",
        )
    if status.get("state") == "error":
        return 0, f"could not parse the upload: {status.get('message')}", True, no_update
    if status.get("state") not in ("receiving", "queued", "parsing"):
        return 0, "no such upload (it was removed, or it is not yours)", True, no_update
    if status.get("waiting"):
        return 50, "queued: waiting for a free parse slot (other uploads are being parsed)", False, no_update
    done, total = status.get("done", 0), status.get("total", 0)
    value = 50 + int(50 * done / total) if total else 50
    return value, f"parsing: {done} of {total or '?'} sources", False, no_update


def register(app: Dash) -> None:
    boundary.callback(
        app,
        Output(ids.UPLOAD_PROGRESS, "value"),
        Output(ids.UPLOAD_MESSAGE, "children"),
        Output(ids.UPLOAD_POLL, "disabled"),
        Output(ids.URL, "href"),
        In(ids.UPLOAD_POLL, "n_intervals", boundary.count),
        In(ids.UPLOAD_STATE, "data", boundary.ignored),
        St(ids.UPLOAD_STATE, "data", boundary.upload_state),
        prevent_initial_call=True,
    )(lambda n, _state, state: poll(n, state))
