"""The WSGI entry point for a shared instance (the container's CMD; README and docs/dashboard.md):

    gunicorn --worker-class gthread --threads 4 paradiag.app.wsgi:server

Configure it with PARADIAG_* variables (README); every worker shares the Parquet cache, the aggregate cache and
the sign-in state on disk, so any worker can answer any request. The ``paradiag`` loggers (requests with user
and timing, jobs, uploads, sign-in, callback failures with their traceback) write to gunicorn's error log.
"""

from __future__ import annotations

import gc
import logging
import os

from paradiag.app.factory import create_app


def _logging() -> None:
    level = os.environ.get("PARADIAG_LOG_LEVEL", "INFO").upper()
    ours = logging.getLogger("paradiag")
    ours.setLevel(level)
    gunicorn = logging.getLogger("gunicorn.error")
    if gunicorn.handlers:  # under gunicorn: one log, one format
        ours.handlers[:] = gunicorn.handlers
        ours.propagate = False
    elif not logging.getLogger().handlers:
        logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s")


_logging()
app = create_app()
server = app.server
# What importing and creating the app left alive (Dash, plotly's validators, the layouts: ~130,000 objects) set
# aside from the collector, in each worker (or, with --preload, in the master before it forks): every full
# collection walked them all, 30-60 ms on this machine, and a step change's callbacks bring one about. `paradiag
# serve` does the same after it has warmed its job (paradiag.app.warm.settle).
gc.collect()
gc.freeze()
