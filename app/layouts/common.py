"""What every panel of the job page is built of: a panel with its title and help line, a graph."""

from __future__ import annotations

from typing import Any

from dash import dcc, html

# A double-click zooms out to all the figure holds (the server then sends the whole step), not back to the range the
# graph was first drawn with (plotly's default): that would be a zoomed window when the page opened on one.
# The camera of the modebar saves the figure as SVG (vector, with its legend); a panel's export bar saves PNG too.
GRAPH_CONFIG: dict[str, Any] = {
    "displaylogo": False,
    "modeBarButtonsToRemove": ["lasso2d", "select2d", "autoScale2d"],
    "doubleClick": "autosize",
    "toImageButtonOptions": {"format": "svg", "filename": "paradiag"},
}
# What a graph holds until its callback sends the first figure: a Patch (the heatmap's outline) may arrive before
# it does. Marked pending, it is not drawn (assets/plots.js): drawn, it was a whole empty plot per graph.
PENDING: dict[str, Any] = {"data": [], "layout": {"meta": "pending"}}


def panel(title: str, *children: Any, class_name: str = "", help_text: str = "") -> html.Section:
    head = [html.H3(title)] + ([html.Span(help_text, className="pd-help")] if help_text else [])
    return html.Section(
        className=f"pd-panel {class_name}", children=[html.Div(head, className="pd-panel-head"), *children]
    )


def graph(graph_id: str, modebar: bool = True, scroll_zoom: bool = False) -> dcc.Graph:
    """A graph of the job page. Not wrapped in ``dcc.Loading``: Dash's renderer told each of the page's 12 loading
    wrappers of every change to its store (a step change: ~60 of them), and each went through the whole page's
    layout hashes (~50 ms of a 256-rank step change's 450 ms in the browser). A graph being redrawn fades instead
    (assets/style.css: Dash marks its element ``data-dash-is-loading`` while its callback runs)."""
    config = {
        **(GRAPH_CONFIG if modebar else {**GRAPH_CONFIG, "displayModeBar": False}),
        "scrollZoom": scroll_zoom,
    }
    return dcc.Graph(id=graph_id, config=config, figure=PENDING)  # type: ignore[arg-type]


def csv_button(view: str) -> str:
    """The id of a view's "CSV" button (its download: ``csv_download``)."""
    return f"{view}-csv"


def csv_download(view: str) -> str:
    return f"{view}-download"


def export_bar(view: str, graph_id: str, table: bool = True) -> html.Div:
    """A view's exports: its table as CSV (the server's ``paradiag.app.data.export``) and its figure as SVG or
    PNG with its legend, drawn by plotly in the browser (assets/exports.js reads ``data-pd-image``)."""
    data: list[dict[str, Any]] = [{"data-pd-image": graph_id, "data-format": fmt} for fmt in ("svg", "png")]
    image = [
        html.Button(
            d["data-format"].upper(),
            className="pd-button pd-export-button",
            title=f"the figure as {d['data-format'].upper()}",
            **d,
        )
        for d in data
    ]
    csv = (
        [
            html.Button(
                "CSV",
                id=csv_button(view),
                className="pd-button pd-export-button",
                title="the table behind this view as CSV",
                n_clicks=0,
            ),
            dcc.Download(id=csv_download(view)),
        ]
        if table
        else []
    )
    return html.Div(["⤓ ", *csv, *image], className="pd-export")


def with_exports(section: html.Section, view: str, graph_id: str, table: bool = True) -> html.Section:
    """``section`` (a ``panel``) with its export bar at the end of its head line."""
    head = section.children[0]
    head.children = [*head.children, export_bar(view, graph_id, table)]
    return section
