"""Each view's "CSV" download: the table behind the view (``paradiag.app.data.export``) for the selection it
shows, named after the job and the view."""

from __future__ import annotations

import re
from typing import Any

from dash import Dash, Output, no_update

from paradiag.app import boundary, context
from paradiag.app.boundary import In, St
from paradiag.app.data.export import TABLES, to_csv
from paradiag.app.layouts.common import csv_button, csv_download
from paradiag.app.selection import Selection, view_store


def csv_file(view: str, clicks: int | None, store: dict[str, Any] | None) -> Any:
    """The download of ``view``'s table (``dcc.Download``'s data), once its button was clicked."""
    sel = Selection.from_store(store)
    if not clicks or not sel.job:
        return no_update
    job = context.job(sel.job)
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", (job.source or "job").rstrip("/").rsplit("/", 1)[-1]) or "job"
    step = f"-step{sel.step}" if sel.step is not None else ""
    return {
        "content": to_csv(TABLES[view][1](job, sel)),
        "filename": f"{name}-{view}{step}.csv",
        "type": "text/csv",
        "base64": False,
    }


def register(app: Dash) -> None:
    for view, (store, _) in TABLES.items():
        boundary.callback(
            app,
            Output(csv_download(view), "data"),
            In(csv_button(view), "n_clicks", boundary.count),
            St(view_store(store), "data", boundary.selection),
            prevent_initial_call=True,
        )(lambda clicks, sel, view=view: csv_file(view, clicks, sel))
