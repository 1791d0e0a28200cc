"""The page every URL gets: header, the selection store, and both the start page and the job page."""

from __future__ import annotations

from dash import dcc, html

from paradiag.app import ids
from paradiag.app.callbacks.header import HIDDEN, SHOWN
from paradiag.app.context import NOTICE, config
from paradiag.app.layouts import job_page, start_page
from paradiag.app.selection import START


def layout() -> html.Div:
    served = bool(config().job)
    return html.Div(
        className="pd-root",
        children=[
            dcc.Location(id=ids.URL, refresh=False),
            dcc.Store(id=ids.SELECTION, storage_type="memory"),
            html.Header(
                className="pd-header",
                children=[
                    # The start page (samples, served folders, upload) from anywhere, a served job's page too.
                    html.A(
                        "paradiag",
                        href=START,
                        className="pd-brand",
                        title="start page: open another job or upload one",
                    ),
                    html.A("open or upload a job", href=START, id=ids.START_LINK, className="pd-header-link"),
                    html.Span(id=ids.SELECTION_TEXT, className="pd-selection"),
                    dcc.Dropdown(
                        id=ids.STEP_PICKER, placeholder="step", clearable=False, className="pd-step-picker"
                    ),
                    html.Button("clear selection", id=ids.CLEAR_SELECTION, className="pd-button"),
                    # Switched in the browser alone (assets/ux.js, remembered there); "?" lists the keys.
                    html.Button(
                        "◐ dark",
                        id=ids.THEME_TOGGLE,
                        className="pd-button",
                        title="dark or light theme (remembered in this browser)",
                    ),
                    html.Span(
                        "? keys", className="pd-help pd-keys-hint", title="press ? for the keys and gestures"
                    ),
                ],
            ),
            # Filled by context.on_callback_error when a job token names nothing this user may open.
            html.Div(
                id=NOTICE,
                role="alert",
                hidden=True,
                className="pd-notice",
                style={"background": "#fde8e8", "color": "#8a1c1c", "padding": "0.5em 1em"},
            ),
            # A served job opens at once: its page is laid out visible, so its graphs are not drawn hidden first
            # and then all again when it is shown (header.page switches pages when the job changes).
            html.Div(start_page.layout(), id=ids.START_PAGE, style=HIDDEN if served else SHOWN),
            html.Div(job_page.layout(), id=ids.JOB_PAGE, style=SHOWN if served else HIDDEN),
        ],
    )
