"""The start page: the bundled sample jobs and an upload area (folder, several files, or one archive)."""

from __future__ import annotations

from dash import dcc, html

from paradiag.app import context, ids


def layout() -> html.Div:
    cfg = context.config()
    limits = (
        f"Up to {cfg.max_upload_mb:,} MB per upload; an archive may unpack to {cfg.max_unpacked_mb:,} MB "
        f"(at most {cfg.max_ratio}x its compressed size); a parse may take {cfg.parse_seconds} s and {cfg.parse_memory_mb:,} MB."
    )
    return html.Div(
        className="pd-start",
        children=[
            html.H2("Open a training job"),
            html.P(
                "Pick a job this server serves or a bundled sample, or upload the per-device traces of your own (Kineto JSON, Ascend *_ascend_pt folders)."
            ),
            html.Div(
                className="pd-row",
                children=[
                    html.Section(
                        className="pd-panel",
                        children=[
                            html.H3("Jobs"),
                            html.P("served by this server, then the bundled samples", className="pd-help"),
                            html.Ul(id=ids.SAMPLE_LIST, className="pd-samples"),
                        ],
                    ),
                    html.Section(
                        className="pd-panel",
                        children=[
                            html.H3("Upload"),
                            html.P(
                                "A trace folder, several trace files, or one .zip / .tar.gz. Files stream to the server; only you can open your uploads.",
                                className="pd-help",
                            ),
                            html.P(limits, className="pd-help"),
                            # assets/upload.js fills this with the file inputs and streams the files to /api/upload.
                            html.Div(id="upload-zone", className="pd-upload-zone"),
                            dcc.Store(id=ids.UPLOAD_STATE),
                            html.Progress(
                                id=ids.UPLOAD_PROGRESS, max="100", value="0", className="pd-progress"
                            ),
                            html.Div(id=ids.UPLOAD_MESSAGE, className="pd-help"),
                            dcc.Interval(id=ids.UPLOAD_POLL, interval=500, disabled=True),
                        ],
                    ),
                ],
            ),
        ],
    )
