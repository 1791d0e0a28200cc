"""What every panel of the job page is built of: a panel with its title and help line, a graph."""

from __future__ import annotations

from typing import Any

from dash import dcc, html

# A double-click zooms out to all the figure holds (the server then sends the whole step), not back to the range the
# graph was first drawn with (plotly's default): that would be a zoomed window when the page opened on one.
GRAPH_CONFIG: dict[str, Any] = {"displaylogo": False, "modeBarButtonsToRemove": ["lasso2d", "select2d", "autoScale2d"], "doubleClick": "autosize"}
# What a graph holds until its callback sends the first figure: a Patch (the heatmap's outline) may arrive before
# it does. Marked pending, it is not drawn (assets/plots.js): drawn, it was a whole empty plot per graph.
PENDING: dict[str, Any] = {"data": [], "layout": {"meta": "pending"}}


def panel(title: str, *children: Any, class_name: str = "", help_text: str = "") -> html.Section:
    head = [html.H3(title)] + ([html.Span(help_text, className="pd-help")] if help_text else [])
    return html.Section(className=f"pd-panel {class_name}", children=[html.Div(head, className="pd-panel-head"), *children])


def graph(graph_id: str, modebar: bool = True, scroll_zoom: bool = False) -> dcc.Loading:
    config = {**(GRAPH_CONFIG if modebar else {**GRAPH_CONFIG, "displayModeBar": False}), "scrollZoom": scroll_zoom}
    return dcc.Loading(dcc.Graph(id=graph_id, config=config, figure=PENDING), type="dot", delay_show=400)  # type: ignore[arg-type]
