"""The timeline's free-text search of events: the matches in the step shown, each a link that selects its rank
and zooms the timeline onto it (the URL, which the selection reads)."""

from __future__ import annotations

from typing import Any

from dash import Dash, Output, dcc, html, no_update

from paradiag.app import boundary, context, ids, store
from paradiag.app.boundary import In, St
from paradiag.app.data import overview as overview_data
from paradiag.app.data.overview import opening_step
from paradiag.app.data.search import MAX_QUERY, search_events
from paradiag.app.data.timeline_fold import LIMITS
from paradiag.app.figures.common import short_name
from paradiag.app.selection import Selection, view_store


def matches(text: str | None, view: dict[str, Any] | None) -> Any:
    """What the search box found in the step the timeline shows: a line of counts and names, then a link per
    match."""
    sel = Selection.from_store(view)
    if not sel.job:
        return no_update
    text = (text or "").strip()
    if not text:
        return []
    job = context.job(sel.job)
    step = sel.step if sel.step is not None else opening_step(job)
    if step is None:
        return "no step to search"
    shown = overview_data.shown_ranks(job, sel.ranks, step, LIMITS)
    found = store.memo(
        "event-search", job, [step, text.lower(), shown], lambda: search_events(job, step, text, shown)
    )
    if not found["count"]:
        return f"no event of step {step} has “{found['text']}” in its name"
    names = " · ".join(
        f"{short_name(n['name'], 50)} ×{n['count']:,} ({n['total_ms']:.2f} ms)" for n in found["names"]
    )
    links = []
    for m in found["matches"]:
        pad = max(m["dur_us"] / 1e3, 0.02)  # the event and as much again on either side
        window = [m["start_ms"] - pad, m["start_ms"] + m["dur_us"] / 1e3 + pad]
        href = Selection(job=sel.job, step=step, ranks=[m["rank"]], window=window).to_query()
        links.append(
            html.Li(
                dcc.Link(
                    f"r{m['rank']} · {m['kind']} · {short_name(m['name'], 60)} · at {m['start_ms']:.3f} ms · {m['dur_us']:.1f} µs",
                    href=href,
                )
            )
        )
    more = (
        f" (the first {len(links)}: the ranks drawn first, earliest first)"
        if found["count"] > len(links)
        else ""
    )
    return [
        html.Div(f"{found['count']:,} events of step {step} match “{found['text']}”{more}: {names}"),
        html.Ul(links, className="pd-matches"),
    ]


def register(app: Dash) -> None:
    boundary.callback(
        app,
        Output(ids.EVENT_MATCHES, "children"),
        In(ids.EVENT_SEARCH, "value", boundary.text(MAX_QUERY)),
        St(view_store("timeline"), "data", boundary.selection),
        prevent_initial_call=True,
    )(matches)
