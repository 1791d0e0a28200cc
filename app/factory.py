"""The app factory: one Dash app (and its Flask server) per config."""

from __future__ import annotations

from pathlib import Path

from dash import Dash

from paradiag.app import context
from paradiag.app.auth import setup_login
from paradiag.app.config import Config
from paradiag.app.layouts import shell
from paradiag.app.store import init_cache

ASSETS = Path(__file__).resolve().parent.parent / "assets"


def create_app(config: Config | None = None) -> Dash:
    config = config or Config.from_env()
    app = Dash(
        __name__,
        title="paradiag",
        assets_folder=str(ASSETS),
        update_title="",
        suppress_callback_exceptions=False,
    )
    server = app.server
    server.config["PARADIAG"] = config
    server.config["SECRET_KEY"] = config.secret_key
    server.config["MAX_CONTENT_LENGTH"] = config.max_upload_mb * 1024 * 1024
    init_cache(server, config)
    if config.users_file:
        setup_login(server, config.users_file)
    from paradiag.app import uploads
    from paradiag.app.callbacks import register

    uploads.register_routes(server)
    # The page request fixes the browser's anonymous id, so its callbacks and uploads all see the same user.
    server.before_request(_fix_user)
    app.layout = shell.layout
    register(app)
    return app


def _fix_user() -> None:
    context.user_id()
