"""Every callback of the dashboard, sent what no component would send, on the team server (the image's gunicorn
on loopback, two workers, two signed-in users): no answer is a 500, nothing is logged as a failure, and the
server answers as before afterwards.

The callbacks are read from ``/_dash-dependencies``; each is first called with the values a real page holds once a
job is open (a simulated browser, ``benchmarks.load.Client``), then with some of them replaced by hostile values
(None, wrong types, huge and negative numbers, NaN, nested lists, unknown ids, long strings, dicts for lists...;
for a selection or a plotly event, also one field at a time, so the job stays valid and the forged field is the
one read). The generator is seeded and the number of cases per callback bounded.
"""

from __future__ import annotations

import json
import os
import random
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from benchmarks.load import Client
from benchmarks.load import _walk as walk
from tests.teamserver import USERS, team_server

pytestmark = pytest.mark.slow
JOB = "sample:gpu_llm_slow_rank"
CASES_PER_CALLBACK = int(os.environ.get("PARADIAG_FUZZ_CALLBACK_CASES", "16"))  # more for a longer hunt
SEED = int(os.environ.get("PARADIAG_FUZZ_SEED", "21"))


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    root = tmp_path_factory.mktemp("team")
    with team_server(root) as url:
        yield url, root


def browser(url: str, name: str) -> Client:
    """A signed-in simulated browser with the job open (every callback fired as dash-renderer fires them)."""
    statuses: list[int] = []
    c = Client(url, [], {}, lambda _path, status, _s, _e: statuses.append(status))
    c.sign_in(name, USERS[name])
    c.deps = c.http.get(url + "/_dash-dependencies", timeout=30).json()
    walk(c.http.get(url + "/_dash-layout", timeout=30).json(), c.props)
    query = f"?job={JOB}&step=1"
    c.act({"url.search": query, "url.href": url + "/" + query, "url.pathname": "/"})
    assert statuses and set(statuses) <= {200, 204, 302}, Counter(statuses)
    return c


HOSTILE: list[Any] = [
    None,
    True,
    False,
    0,
    -1,
    1,
    7,
    3,
    12345,
    2**31 - 1,
    2**31,
    2**63,
    10**30,
    -(10**30),
    0.5,
    1e308,
    -1e308,
    float("nan"),
    float("inf"),
    float("-inf"),
    "",
    "x",
    "1",
    "-5",
    "nan",
    "1e999",
    "a" * 20000,
    "\x00",
    "../../../../etc/passwd",
    "<script>alert(1)</script>",
    "sample:" + "z" * 300,
    "upload:0123456789abcdef",
    "served",
    "no_such_op",
    "all_reduce/group 9/#999999",
    "group:0:x",
    ["group:0:x"],
    ["stage:1", "1:x", "x"],
    ["devices"],
    [12345],
    [3, 12345],
    [2**31 - 1],
    [],
    [None],
    [None, None],
    ["a"],
    [1, "a"],
    [[1, [2, [3, [4]]]]],
    [0] * 70000,
    [5, 1],
    [1e308, -1e308],
    {},
    {"a": {"b": [None]}},
    {"points": None},
    {"points": []},
    {"points": [None]},
    {"points": "x"},
    {"job": JOB},
    {"id": ["x"]},
]


def hostile(rng: random.Random) -> Any:
    value = rng.choice(HOSTILE)
    if rng.random() < 0.15:  # nested once more: a list or a dict of hostile values
        value = [value, rng.choice(HOSTILE)] if rng.random() < 0.5 else {"x": value, "points": [value]}
    return value


def forged(value: Any, rng: random.Random) -> Any:
    """``value`` with one part replaced by a hostile value: a field of a dict (a selection, a drawn figure), a
    field of a plotly event's first point, an item of a list; or the whole value."""
    if isinstance(value, dict) and value and rng.random() < 0.7:
        key = rng.choice(sorted(value))
        return {**value, key: hostile(rng)}
    if isinstance(value, list) and value and rng.random() < 0.5:
        i = rng.randrange(len(value))
        return [*value[:i], hostile(rng), *value[i + 1 :]]
    return hostile(rng)


def events(rng: random.Random) -> dict[str, Any]:
    """Plotly events as the graphs send them, each with one point whose fields are what the figures draw, some
    replaced by hostile values."""

    def point() -> dict[str, Any]:
        p = {
            "x": rng.choice([1, 0, "3", "stage 0"]),
            "y": rng.choice([0, 1, "5", "stage 1"]),
            "customdata": rng.choice(["5", "4,5", ["gemm", 0, 1.5], ["gemm", 0, [1.0, 2.0], "0:1"]]),
            "curveNumber": 0,
            "pointNumber": 0,
        }
        if rng.random() < 0.6:
            p[rng.choice(sorted(p))] = hostile(rng)
        return p

    relayout = {
        "xaxis.range[0]": rng.choice([1.0, hostile(rng)]),
        "xaxis.range[1]": rng.choice([2.0, hostile(rng)]),
    }
    brushed = {"range": rng.choice([{"x": [0, 2]}, {"x": hostile(rng)}, hostile(rng)]), "points": [point()]}
    return {
        "clickData": {"points": [point()]},
        "relayoutData": rng.choice([relayout, {"xaxis.autorange": hostile(rng)}]),
        "selectedData": brushed,
        "data": {"points": [point()]},
    }


def body(dep: dict[str, Any], props: dict[str, Any], changed: list[str]) -> dict[str, Any]:
    outputs = [
        dict(zip(("id", "property"), part.rsplit(".", 1), strict=True))
        for part in dep["output"].strip(".").split("...")
    ]

    def value(d: dict[str, Any]) -> Any:
        key = f"{d['id']}.{d['property']}"
        if d["id"].startswith("{"):  # the finding buttons: a few, with hostile indices and clicks
            return props.get(key, [])
        return {"id": d["id"], "property": d["property"], "value": props.get(key)}

    return {
        "output": dep["output"],
        "outputs": outputs if len(outputs) > 1 else outputs[0],
        "inputs": [value(d) for d in dep["inputs"]],
        "state": [value(d) for d in dep.get("state", [])],
        "changedPropIds": changed,
    }


def cases(dep: dict[str, Any], page: dict[str, Any], rng: random.Random, n: int) -> Iterator[dict[str, Any]]:
    """``n`` requests for callback ``dep``: the page's values with one to three inputs or states forged."""
    deps = list(dep["inputs"] + dep.get("state", []))
    for _ in range(n):
        props = dict(page)
        for d in deps:  # the events a user's click would send
            key = f"{d['id']}.{d['property']}"
            if d["property"] in ("clickData", "relayoutData", "selectedData"):
                props[key] = events(rng)[d["property"]]
            elif key in (
                "marey-click.data",
                "timeline-click.data",
            ):  # a click passed on once no double-click followed
                props[key] = events(rng)["data"]
            elif key in (
                "timeline-zoom.data",
                "marey-zoom.data",
            ):  # a graph's relayoutData passed on (ids.TIMELINE_ZOOM)
                props[key] = events(rng)["relayoutData"]
            if d["id"].startswith("{"):
                props[key] = [
                    {
                        "id": {"type": "finding-button", "index": rng.choice([0, 1, 99, -1, "a"])},
                        "property": "n_clicks",
                        "value": rng.choice([1, None, hostile(rng)]),
                    }
                ]
        for d in rng.sample(deps, min(len(deps), rng.randint(1, 3))):
            if not d["id"].startswith("{"):
                key = f"{d['id']}.{d['property']}"
                props[key] = forged(props.get(key), rng)
        triggers = [d for d in dep["inputs"] if not d["id"].startswith("{")]
        changed = [
            f"{t['id']}.{t['property']}" for t in rng.sample(triggers, min(len(triggers), rng.randint(0, 2)))
        ]
        if any(d["id"].startswith("{") for d in dep["inputs"]) and rng.random() < 0.3:
            changed = [
                json.dumps(
                    {"index": rng.choice([0, 99, "a"]), "type": "finding-button"}, separators=(",", ":")
                )
                + ".n_clicks"
            ]
        yield body(dep, props, changed)


def server_callbacks(deps: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [d for d in deps if not d.get("clientside_function")]


def test_no_callback_answers_500_whatever_it_is_sent(server: tuple[str, Path], tmp_path: Path) -> None:
    url, root = server
    alice, bob = browser(url, "alice"), browser(url, "bob")
    page = dict(alice.props)
    assert_readings_keep(page, tmp_path)
    rng = random.Random(SEED)
    statuses: Counter[int] = Counter()
    failures: list[str] = []
    callbacks = server_callbacks(alice.deps)
    assert len(callbacks) >= 20
    for dep in callbacks:
        for case in cases(dep, page, rng, CASES_PER_CALLBACK):
            reply = alice.http.post(
                url + "/_dash-update-component",
                data=json.dumps(case),
                headers={"Content-Type": "application/json"},
                timeout=120,
            )
            statuses[reply.status_code] += 1
            if reply.status_code >= 500 or "Traceback" in reply.text:
                failures.append(f"{reply.status_code} {dep['output'][:70]}: {json.dumps(case)[:400]}")
    # Envelopes no page sends: answered 400, naming what is wrong.
    first = callbacks[0]
    envelopes: list[Any] = [{}, [], "x", {"output": "no-such.figure"}, {"output": first["output"]}]
    envelopes += [
        {**body(first, page, []), key: value}
        for key, value in (("inputs", "x"), ("outputs", 5), ("changedPropIds", ["x.y"]), ("state", [{}]))
    ]
    for bad in envelopes:
        reply = alice.http.post(url + "/_dash-update-component", json=bad, timeout=30)
        statuses[reply.status_code] += 1
        if reply.status_code != 400 or "bad callback request" not in reply.text:
            failures.append(f"{reply.status_code} envelope {json.dumps(bad)[:200]}")
    assert not failures, f"{len(failures)} of {sum(statuses.values())} forged requests failed:\n" + "\n".join(
        failures[:20]
    )
    assert set(statuses) <= {200, 204, 400}, statuses
    print("forged callback requests by answer:", dict(statuses))
    log = (root / "server.log").read_text(errors="replace")
    assert "Traceback" not in log and "failed for" not in log, log[-3000:]
    # Both users' pages still work: a click on a heatmap cell selects that rank everywhere.
    for c in (alice, bob):
        assert c.http.get(url + "/", timeout=30).status_code == 200
        c.act({"heatmap.clickData": {"points": [{"x": 1, "y": 0, "customdata": "3"}]}})
        assert c.props["selection.data"]["ranks"] == [3] and c.props["selection.data"]["job"] == JOB
        assert c.props["timeline-info.children"].startswith("ranks 3 (selected)")


def assert_readings_keep(page: dict[str, Any], tmp_path: Path) -> None:
    """What a real page holds passes every reading unchanged (a reading refuses only what no page holds)."""
    from paradiag.app.boundary import GUARDED
    from paradiag.app.config import Config
    from paradiag.app.factory import create_app

    app = create_app(Config(upload_dir=tmp_path / "up", app_cache_dir=tmp_path / "app", secret_key="k"))
    checked = 0
    for output, cb in app.callback_map.items():
        if "callback" not in cb:
            continue
        specs = getattr(_unwrapped(cb["callback"]), GUARDED)
        for spec, dep in zip(specs, cb["inputs"] + cb.get("state", []), strict=True):
            value = page.get(f"{dep['id']}.{dep['property']}")
            if value is None or dep["id"].startswith("{") or spec.__name__ == "ignored":
                continue
            checked += 1
            assert _set(spec(value)) == _set(value), (output[:60], dep, value)
    assert checked >= 30


def _set(value: Any) -> Any:
    """A dict without its unset (None) fields; anything else as it is."""
    return {k: v for k, v in value.items() if v is not None} if isinstance(value, dict) else value


def test_every_callback_reads_its_inputs_through_the_boundary(tmp_path: Path) -> None:
    """No callback is registered without a declared reading of each of its inputs and states."""
    from paradiag.app.boundary import GUARDED
    from paradiag.app.config import Config
    from paradiag.app.factory import create_app

    app = create_app(Config(upload_dir=tmp_path / "up", app_cache_dir=tmp_path / "app", secret_key="k"))
    server_side = {
        k: cb for k, cb in app.callback_map.items() if "callback" in cb
    }  # a clientside one runs in the browser
    unguarded = [k for k, cb in server_side.items() if not hasattr(_unwrapped(cb["callback"]), GUARDED)]
    assert len(server_side) >= 20 and not unguarded, unguarded


def _unwrapped(fn: Any) -> Any:
    """The function Dash wraps (``functools.wraps`` keeps the chain in ``__wrapped__``)."""
    seen = fn
    while not hasattr(seen, "__paradiag_specs__") and hasattr(seen, "__wrapped__"):
        seen = seen.__wrapped__
    return seen


def test_forged_values_read_as_absent() -> None:
    """The readings themselves: whatever a value is, it is read as the type asked for, or as None."""
    from paradiag.app import coerce
    from paradiag.app.selection import Selection

    rng = random.Random(SEED)
    for _ in range(2000):
        value = hostile(rng)
        assert coerce.integer(value) is None or isinstance(coerce.integer(value), int)
        n = coerce.number(value)
        assert n is None or (isinstance(n, float) and abs(n) <= coerce.MAX_MS)
        w = coerce.window(value)
        assert w is None or (len(w) == 2 and w[0] < w[1])
        sel = Selection.from_store(
            {
                "job": JOB,
                "step": value,
                "ranks": value,
                "window": value,
                "op": value,
                "at": value,
                "stage": value,
            }
        )
        assert (
            sel.job == JOB
            and (sel.step is None or isinstance(sel.step, int))
            and (sel.ranks is None or all(isinstance(r, int) for r in sel.ranks))
        )
        assert Selection.from_store(value) == Selection() or isinstance(value, dict)
    assert Selection.from_store(
        {"job": JOB, "window": [None, None], "ranks": ["a"], "step": True}
    ) == Selection(job=JOB)
    assert Selection.from_store(
        {"job": JOB, "window": ["1.5", 2], "ranks": [3, 3, "4"], "step": 2.0}
    ) == Selection(job=JOB, window=[1.5, 2.0], ranks=[3, 4], step=2)


def raw_get(url: str, path: str) -> tuple[int, bytes]:
    """GET ``path`` exactly as written (no client normalises its dots away), without a session."""
    import http.client
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port, timeout=30)
    conn.putrequest("GET", path, skip_host=False, skip_accept_encoding=True)
    conn.endheaders()
    reply = conn.getresponse()
    body = reply.read()
    conn.close()
    return reply.status, body


def test_the_open_prefixes_serve_their_files_and_nothing_else(server: tuple[str, Path]) -> None:
    """Without a session, the static prefixes serve the component files and assets; a path that climbs out, names
    an unknown package or file, or stops at the prefix is a 404 that serves nothing (it was a 500, or the page)."""
    url, root = server
    deps = requests.get(url + "/_dash-component-suites/dash/dcc/async-graph.js", timeout=30)
    assert deps.status_code == 200 and b"passwd" not in deps.content
    hostile = [
        "/_dash-component-suites/dash/../../../../etc/passwd",
        "/_dash-component-suites/dash/dcc/../../../../../../etc/passwd",
        "/_dash-component-suites/dash/%2e%2e/%2e%2e/%2e%2e/etc/passwd",
        "/_dash-component-suites/dash/..%2f..%2f..%2f..%2fetc%2fpasswd",
        "/_dash-component-suites/dash/dcc/async-graph.js%00.txt",
        "/_dash-component-suites/os/path.py",
        "/_dash-component-suites/paradiag/app/config.py",
        "/_dash-component-suites/dash/no-such.js",
        "/_dash-component-suites/",
        "/_dash-component-suites/dash",
        "/assets/../../../../etc/passwd",
        "/assets/%2e%2e/%2e%2e/pyproject.toml",
        "/assets/..%2f..%2fpyproject.toml",
        "/assets/",
        "/assets/no-such.css",
        "/static/../../etc/passwd",
        "//etc/passwd",
        "/_dash-component-suites/plotly/package_data/../../../../etc/passwd",
    ]
    for path in hostile:
        status, body = raw_get(url, path)
        assert status in (302, 404), (path, status)  # 302: outside the open prefixes, sign in first
        assert b"root:" not in body and b"_dash-config" not in body and b"[project]" not in body, path
    log = (root / "server.log").read_text(errors="replace")
    assert "Traceback" not in log, log[-2000:]
