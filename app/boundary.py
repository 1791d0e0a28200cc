"""The trust boundary of the callbacks: what a client posts to ``/_dash-update-component`` is checked here, before
any callback code sees it.

Two layers, both for every callback:

* The request's envelope (``check_request``, a ``before_request`` hook): a JSON object naming a registered
  callback, with that callback's inputs, states and outputs, in its order and with its ids. Anything else is
  answered 400 with what is wrong (Dash itself would fail on it with a 500).
* Each value (``In`` and ``St``, the only dependencies ``callback`` registers): every input and state declares
  how its value is read (``Spec``, built from ``paradiag.app.coerce``), and the callback is called with the
  values so read. A value that is not what its component can hold (a forged one) is read as None, or as the
  component's default, and the view answers what it answers without it: its empty state, never a 500. The
  selection's fields are read in one place, ``Selection.from_store``.

A callback registered otherwise has no declared reading: ``callback`` refuses it, and
``tests/test_app_callback_fuzz.py`` checks that every callback of the app was registered through it.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import urlsplit

from dash import Dash, Input, State, ctx
from flask import Response, jsonify, request

from paradiag.app import coerce
from paradiag.app.selection import Selection

Spec = Callable[[Any], Any]
MAX_URL = 1 << 16  # a URL's query names at most MAX_ITEMS ranks
GUARDED = "__paradiag_specs__"  # the attribute of a registered function naming its inputs' specs
DISPATCH = "/_dash-update-component"


class In(Input):
    """A callback input with the reading of its value."""

    def __init__(self, component_id: Any, component_property: str, spec: Spec) -> None:
        super().__init__(component_id, component_property)
        self.spec = spec


class St(State):
    """A callback state with the reading of its value."""

    def __init__(self, component_id: Any, component_property: str, spec: Spec) -> None:
        super().__init__(component_id, component_property)
        self.spec = spec


def callback(
    app: Dash, *dependencies: Any, **options: Any
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """``app.callback`` for a function whose every input and state is an ``In``/``St``: the function is called
    with each value read by its spec (Dash passes inputs first, then states, each in their order)."""
    inputs = [d for d in dependencies if isinstance(d, Input)]
    states = [d for d in dependencies if isinstance(d, State)]
    plain = [d for d in (*inputs, *states) if not isinstance(d, In | St)]
    if plain:
        raise TypeError(
            f"callback inputs without a declared reading: {', '.join(map(str, plain))} (use boundary.In / boundary.St)"
        )
    specs = [d.spec for d in (*inputs, *states)]  # type: ignore[attr-defined]

    def register(fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def guarded(*args: Any) -> Any:
            return fn(*(spec(value) for spec, value in zip(specs, args, strict=True)))

        setattr(guarded, GUARDED, specs)
        app.callback(*dependencies, **options)(guarded)
        return fn

    return register


def clientside(app: Dash, code: str, *dependencies: Any, **options: Any) -> None:
    """A callback run in the browser: nothing reaches the server, but it is listed among the app's callbacks."""
    app.clientside_callback(code, *dependencies, **options)


# Readings of the values the dashboard's components hold.


def selection(value: Any) -> dict[str, Any] | None:
    """A selection store (the whole selection, or one view's part): every field read by ``Selection.from_store``;
    None when it is no dict."""
    return Selection.from_store(value).to_store() if isinstance(value, dict) else None


def text(max_len: int = coerce.MAX_TEXT) -> Spec:
    return lambda value: coerce.text(value, max_len)


def query_of_href(value: Any) -> str | None:
    """The query string of a URL (``dcc.Location.href``); None when it is no URL."""
    href = coerce.text(value, MAX_URL)
    try:
        return urlsplit(href).query if href else None
    except ValueError:  # "http://[": no URL
        return None


def one_of(allowed: Iterable[Any], default: Any = None) -> Spec:
    """A dropdown's or radio button's value: one of ``allowed``, else ``default`` (what the layout sets)."""
    known = frozenset(allowed)
    return lambda value: coerce.choice(value, known, default)


def count(value: Any) -> int | None:
    """A button's ``n_clicks``, an interval's ``n_intervals``."""
    return coerce.integer(value, 0)


def step(value: Any) -> int | None:
    return coerce.integer(value, 0)


def texts(value: Any) -> list[str] | None:
    """A checklist's or multi-dropdown's values (of strings)."""
    return coerce.texts(value)


def keys(pattern: str) -> Spec:
    """A checklist's values where each has a form its view parses (``pattern``, matched whole)."""
    form = re.compile(pattern)
    return lambda value: coerce.items(
        value, lambda v: v if isinstance(v, str) and form.fullmatch(v) else None, 1024
    )


def ranks(value: Any) -> list[int] | None:
    return coerce.integers(value)


def event(value: Any) -> dict[str, Any] | None:
    """A plotly event (``clickData``, ``selectedData``, ``relayoutData``): a dict with string keys. Its points are
    read where they are used, with ``coerce`` (``coerce.first_point``)."""
    return coerce.mapping(value)


def options(value: Any) -> list[dict[str, Any]] | None:
    """A checklist's or dropdown's options: ``{"label": ..., "value": ...}`` dicts of scalars."""

    def option(item: Any) -> dict[str, Any] | None:
        item = coerce.mapping(item)
        if item is None or not {"label", "value"} <= set(item):
            return None
        label, value = item["label"], item["value"]
        return {"label": label, "value": value} if coerce.text(label) is not None and _scalar(value) else None

    return coerce.items(value, option, 4096)


def drawn(value: Any) -> dict[str, Any] | None:
    """What a figure shows (``{"key": [...], "traces": n}``, and ``"shapes": n`` where it patches a shape; written by
    its callback to patch it later)."""
    value = coerce.mapping(value)
    if not value:
        return value  # {}: nothing drawn yet (the layout's value)
    key, traces = value.get("key"), coerce.integer(value.get("traces"), 1)
    if not isinstance(key, list) or traces is None:
        return None
    shapes = coerce.integer(value.get("shapes"), 1)
    return {"key": key, "traces": traces} | ({"shapes": shapes} if shapes is not None else {})


def drill(value: Any) -> dict[str, Any] | None:
    """The communication matrix's opened blocks: ``{"job": token, "path": [{"src": ranks, "dst": ranks}, ...]}``."""
    value = coerce.mapping(value)
    if not value:
        return value  # {}: nothing opened (the layout's value)

    def block(item: Any) -> dict[str, Any] | None:
        item = coerce.mapping(item) or {}
        src, dst = coerce.integers(item.get("src")), coerce.integers(item.get("dst"))
        return {"src": src, "dst": dst} if src and dst else None

    path = coerce.items(value.get("path"), block, 64)
    job = coerce.text(value.get("job"), 200)
    return {"job": job, "path": path} if job and path is not None else None


def windows(value: Any) -> list[Any] | None:
    """The zoom stack: windows to go back to (None: the whole step)."""
    stack = coerce.items(value, lambda v: [] if v is None else coerce.window(v), 64)
    return [w or None for w in stack] if stack is not None else None


def upload_state(value: Any) -> dict[str, Any] | None:
    """What assets/upload.js writes once the files are sent: ``{"id": upload id}``."""
    value = coerce.mapping(value)
    upload_id = coerce.text(value.get("id"), 200) if value else None
    return {"id": upload_id} if upload_id else None


def counts(value: Any) -> list[int | None] | None:
    """Pattern-matched ``n_clicks`` (each button's, None before its first click)."""
    got = coerce.items(value, lambda v: [] if v is None else coerce.integer(v, 0), 1024)
    return [None if v == [] else v for v in got] if got is not None else None


def ignored(_value: Any) -> None:
    """An input whose change is all that matters (its value is not read)."""
    return None


def fired(values: dict[tuple[str, str], Any]) -> list[Any]:
    """What fired this call: (component id, property) pairs (pattern ids as they are), in the order they happened;
    [None] on the first call. The browser merges the requests for one callback that wait together into one (a
    graph's click and the zoom out of the same double-click, both passed on at once: assets/marey_clicks.js), so
    several can come at once; those whose value ``values`` says when it came (``paradiag.at``: the graphs' clicks
    and zooms) are put in that order, after the others."""
    if not ctx.triggered_id:
        return [None]
    out: list[Any] = []
    for prop_id, cid in ctx.triggered_prop_ids.items():
        trigger = cid if isinstance(cid, dict) else (cid, str(prop_id).rsplit(".", 1)[-1])
        if trigger not in out:
            out.append(trigger)

    def when(trigger: Any) -> float:
        value = values.get(trigger) if isinstance(trigger, tuple) else None
        at = coerce.number(value.get("paradiag.at"), 0, 1e15) if isinstance(value, dict) else None
        return at or 0.0

    return sorted(out, key=when)


def _scalar(value: Any) -> bool:
    return (
        value is None
        or isinstance(value, bool | int)
        or (isinstance(value, str) and len(value) <= coerce.MAX_TEXT)
        or coerce.number(value, -1e300, 1e300) is not None
    )


# The request's envelope.


def check_request(app: Dash) -> Callable[[], tuple[Response, int] | None]:
    """The ``before_request`` hook that refuses a callback request whose envelope is not one of the app's
    callbacks (400, naming what is wrong)."""

    def hook() -> tuple[Response, int] | None:
        if request.path != DISPATCH or request.method != "POST":
            return None
        body = request.get_json(silent=True)
        problem = envelope_problem(app, body)
        if problem:
            return jsonify({"error": f"bad callback request: {problem}"}), 400
        return None

    return hook


def envelope_problem(app: Dash, body: Any) -> str | None:
    """What is wrong with a callback request's body for this app, or None."""
    if not isinstance(body, dict):
        return "the body is no JSON object"
    output = body.get("output")
    if not isinstance(output, str) or output not in app.callback_map:
        return "no such callback"
    declared = app.callback_map[output]
    for key, deps in (("inputs", declared["inputs"]), ("state", declared.get("state", []))):
        sent = body.get(key, [])
        if not isinstance(sent, list) or len(sent) != len(deps):
            return f"{key}: {len(deps)} expected"
        for dep, item in zip(deps, sent, strict=True):
            if not _matches(dep, item):
                return f"{key}: {dep['id']}.{dep['property']} expected"
    outputs = [part.rsplit(".", 1) for part in output.strip(".").split("...")]
    sent_outputs = body.get("outputs")
    listed = sent_outputs if isinstance(sent_outputs, list) and len(outputs) > 1 else [sent_outputs]
    if len(listed) != len(outputs) or not all(
        _matches({"id": cid, "property": prop}, item)
        for (cid, prop), item in zip(outputs, listed, strict=True)
    ):
        return "outputs: the callback's outputs expected"
    changed = body.get("changedPropIds", [])
    names = {f"{d['id']}.{d['property']}" for d in declared["inputs"]}
    if not isinstance(changed, list) or not all(
        isinstance(c, str) and _changed_input(c, names) for c in changed
    ):
        return "changedPropIds: the callback's inputs expected"
    return None


def _matches(dep: dict[str, Any], item: Any) -> bool:
    """Whether ``item`` (``{"id", "property", "value"}``, or a list of them for a pattern) is ``dep``'s."""
    if dep["id"].startswith("{"):  # a pattern: one item per matching component
        pattern = json.loads(dep["id"])
        return (
            isinstance(item, list)
            and len(item) <= 1024
            and all(
                isinstance(i, dict)
                and i.get("property") == dep["property"]
                and _id_fits(pattern, i.get("id"))
                for i in item
            )
        )
    prop = item.get("property") if isinstance(item, dict) else None
    return (
        isinstance(prop, str)
        and item.get("id") == dep["id"]
        and prop.split("@")[0] == dep["property"].split("@")[0]
    )


def _id_fits(pattern: dict[str, Any], cid: Any) -> bool:
    """Whether a component id (a dict) fits a pattern id: the same keys, the fixed ones equal, wildcards scalars."""
    if not isinstance(cid, dict) or set(cid) != set(pattern):
        return False
    return all(
        isinstance(cid[k], str | int) and not isinstance(cid[k], bool) if isinstance(v, list) else cid[k] == v
        for k, v in pattern.items()
    )


def _changed_input(prop_id: str, names: set[str]) -> bool:
    if prop_id in names:
        return True
    cid, _, prop = prop_id.rpartition(".")
    try:
        parsed = json.loads(cid) if cid.startswith("{") else None
    except ValueError:
        return False
    return isinstance(parsed, dict) and any(
        n.startswith("{") and n.endswith("." + prop) and _id_fits(json.loads(n.rpartition(".")[0]), parsed)
        for n in names
    )
