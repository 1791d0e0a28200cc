"""The WSGI entry point for a shared instance: ``gunicorn -w 4 'paradiag.app.wsgi:server'``.

Configure it with PARADIAG_* variables (README); every worker shares the Parquet cache and the aggregate cache
on disk, so any worker can answer any request.
"""

from __future__ import annotations

from paradiag.app.factory import create_app

app = create_app()
server = app.server
