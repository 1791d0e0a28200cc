"""``paradiag serve``: the dashboard on a job folder (or cache), or the start page."""

from __future__ import annotations

from pathlib import Path

import click


@click.command()
@click.argument("path", required=False, type=click.Path(exists=True, path_type=Path))
@click.option("--port", default=8050, show_default=True, help="port to listen on")
@click.option("--host", default="127.0.0.1", show_default=True, help="address to listen on (0.0.0.0 for everyone)")
@click.option("--debug", is_flag=True, help="Dash debug mode (reloads on change, shows callback errors)")
def serve(path: Path | None, port: int, host: str, debug: bool) -> None:
    """Open the dashboard on PATH (a trace folder or a paradiag cache); without PATH, the start page with the
    bundled sample jobs and an upload area. This is a one-user development server: for a shared instance use
    the container image (Dockerfile) or its gunicorn command (docs/dashboard.md, "Hosted instance")."""
    from paradiag.app.config import Config
    from paradiag.app.factory import create_app

    job = None
    if path is not None:
        import paradiag

        click.echo(f"opening {path} ...")
        paradiag.open(path)  # parse (or check the cache) before the first page asks for it
        job = str(path.resolve())
    app = create_app(Config.from_env(job=job))
    if job:
        from paradiag.app.warm import warm

        warm(app, "served")
    click.echo(f"paradiag dashboard on http://{host}:{port}/")
    app.run(host=host, port=port, debug=debug)
