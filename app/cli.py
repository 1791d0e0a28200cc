"""``paradiag serve``: the dashboard on a job folder (or cache), or the start page."""

from __future__ import annotations

from pathlib import Path

import click

from paradiag.commands import Location


@click.command()
@click.argument("paths", nargs=-1, type=Location(exists=True))
@click.option("--port", default=8050, show_default=True, help="port to listen on")
@click.option(
    "--host", default="127.0.0.1", show_default=True, help="address to listen on (0.0.0.0 for everyone)"
)
@click.option("--debug", is_flag=True, help="Dash debug mode (reloads on change, shows callback errors)")
def serve(paths: tuple[Path | str, ...], port: int, host: str, debug: bool) -> None:
    """Open the dashboard on PATH (a trace folder, a paradiag cache, or a cache's URL); without PATH, the start page with the
    bundled sample jobs and an upload area. Further PATHs are served too: the start page lists them and the compare
    panel offers them as baselines. This is a one-user development server: for a shared instance use
    the container image (Dockerfile) or its gunicorn command (docs/dashboard.md, "Hosted instance")."""
    from paradiag.app.config import Config
    from paradiag.app.factory import create_app

    opened = []
    for path in paths:
        import paradiag
        from paradiag.cache import JobError
        from paradiag.remote import shown

        click.echo(f"opening {shown(path) if isinstance(path, str) else path} ...")
        try:
            paradiag.open(path)  # parse (or check the cache) before the first page asks for it
        except JobError as exc:
            raise click.ClickException(str(exc)) from exc
        opened.append(path if isinstance(path, str) else str(path.resolve()))
    job = opened[0] if opened else None
    app = create_app(Config.from_env(job=job, more_jobs=tuple(opened[1:])))
    if job:
        from paradiag.app.warm import warm

        warm(app, "served")
    click.echo(f"paradiag dashboard on http://{host}:{port}/")
    app.run(host=host, port=port, debug=debug)
