"""The app factory: one Dash app (and its Flask server) per config, with its web rules, logging and health."""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Any

from dash import Dash
from flask import Flask, g, jsonify, request, send_file
from werkzeug.middleware.proxy_fix import ProxyFix

from paradiag.app import boundary, context, plotly_bundle, turns, warm
from paradiag.app.auth import AuthStore, harden, setup_login
from paradiag.app.config import Config, private_dir
from paradiag.app.layouts import shell
from paradiag.app.store import init_cache
from paradiag.cache import default_cache_root

ASSETS = Path(__file__).resolve().parent.parent / "assets"
log = logging.getLogger("paradiag.app.request")


def create_app(config: Config | None = None) -> Dash:
    config = config or Config.from_env()
    app = Dash(
        __name__,
        title="paradiag",
        assets_folder=str(ASSETS),
        update_title="",
        suppress_callback_exceptions=False,
        on_error=context.on_callback_error,
    )
    server = app.server
    server.config["PARADIAG"] = config
    server.config["SECRET_KEY"] = config.secret_key
    server.config["MAX_CONTENT_LENGTH"] = config.max_upload_mb * 1024 * 1024
    if config.proxy_hops:
        hops = config.proxy_hops
        server.wsgi_app = ProxyFix(server.wsgi_app, x_for=hops, x_proto=hops, x_host=hops)
    private_dir(config.upload_dir)
    _private_cache_root()
    init_cache(server, config)
    _health_and_timing(server)
    _plotly_bundle(server)
    harden(app, config)
    if config.users_file:
        setup_login(
            server,
            config.users_file,
            AuthStore(config.app_cache_dir / "auth.sqlite"),
            config.session_hours * 3600,
        )
    from paradiag.app import uploads
    from paradiag.app.callbacks import register

    uploads.register_routes(server)
    server.before_request(boundary.check_request(app))  # after sign-in's check: a stranger is answered 401
    # The page request fixes the browser's anonymous id, so its callbacks and uploads all see the same user.
    server.before_request(_fix_user)
    turns.install(server)  # callbacks one at a time, the top of the page first (after the checks above)
    with server.app_context():  # Dash builds the layout once here to validate it; it reads this config
        app.layout = shell.layout
    register(app)
    return app


def _private_cache_root() -> None:
    """Parsed uploads land in the Parquet cache: its root is this user's alone (when it is ours to close)."""
    root = default_cache_root()
    root.mkdir(mode=0o700, parents=True, exist_ok=True)
    if root.stat().st_uid == os.getuid():
        root.chmod(0o700)


def _fix_user() -> None:
    context.user_id()


def _health_and_timing(server: Flask) -> None:
    @server.route("/healthz")
    def healthz() -> Any:
        """For the container's HEALTHCHECK and load balancers: answers when a worker can serve; says nothing
        about the host, the users or the version."""
        return jsonify({"status": "ok"})

    @server.before_request
    def started() -> None:
        g.started = time.perf_counter()
        warm.requests.started()

    @server.teardown_request
    def ended(_exc: BaseException | None) -> None:
        warm.requests.ended()  # the background warming gives way while requests are in flight

    @server.after_request
    def timed(response: Any) -> Any:
        if request.path != "/healthz" and not request.path.startswith(
            ("/_dash-component-suites/", "/assets/")
        ):
            ms = 1000 * (time.perf_counter() - g.get("started", time.perf_counter()))
            log.info(
                "%s %s %s user=%s %.0f ms", request.method, request.path, response.status_code, _user(), ms
            )
            # The browser's developer tools (and benchmarks/browser.py) split a request's time into the server's
            # and the transfer's with this standard header.
            response.headers["Server-Timing"] = f"app;dur={ms:.1f}"
        return response


def _plotly_bundle(server: Flask) -> None:
    """dcc.Graph loads plotly.js from Dash's path for it on demand: answer that path with the cartesian bundle where
    set-up fetched it (a third of the size: the first page's heatmap is drawn sooner). This static rule takes
    precedence over Dash's own rule for its files (werkzeug matches static paths first)."""
    bundle = plotly_bundle.available()
    if bundle is None:
        return

    def plotly_js() -> Any:
        return send_file(bundle, mimetype="text/javascript", max_age=3600)

    server.add_url_rule(plotly_bundle.DASH_PLOTLY_PATH, "plotly_cartesian", plotly_js)


def _user() -> str:
    try:
        return context.user_id()
    except RuntimeError:  # outside a session (a response built before one exists)
        return "-"
