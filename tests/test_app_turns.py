"""Callbacks take turns (paradiag.app.turns): one at a time, the page's top first, none held past its wait."""

from __future__ import annotations

import threading
import time

from flask import Flask

from paradiag.app import ids
from paradiag.app.turns import CALLBACK_PATH, PAGE_ORDER, SIGHT_HEADER, Turns, install, out_of_sight, place


def test_a_callbacks_place_is_its_first_outputs_place_on_the_page() -> None:
    assert place("heatmap.figure") == PAGE_ORDER.index(ids.HEATMAP)
    assert place("..timeline.figure...timeline-info.children...timeline-folds.data..") == PAGE_ORDER.index(
        ids.TIMELINE
    )
    assert place("..flow.figure...flow-expand.options...flow-drawn.data..") == PAGE_ORDER.index(ids.FLOW)
    # The selection's reducer, which writes the URL too, before every view; a view above another first.
    assert place("..selection.data...url.search...step-picker.value..") == PAGE_ORDER.index(ids.URL)
    assert place("steps.figure") < place("heatmap.figure") < place("..marey.figure...marey-drawn.data..")
    # Anything else after them all, and a malformed output is no error.
    assert place("upload-state.data") == len(PAGE_ORDER)
    assert place(None) == place(42) == place("") == len(PAGE_ORDER)


def test_a_callback_whose_graphs_are_all_out_of_sight_goes_after_every_other() -> None:
    away = out_of_sight("heatmap,steps,flow,no-such-graph")
    assert away == {"heatmap", "steps", "flow"}  # the page's own graph ids only
    assert (
        place("heatmap.figure", away)
        > place("..flow.figure...flow-drawn.data..")
        > place("marey.figure", away)
    )
    assert place("..selection.data...url.search..", away) == PAGE_ORDER.index(ids.URL)  # no graph: its place
    # The device detail draws four graphs: out of sight only when all four are.
    detail = "..detail-title.children...detail-graph.figure...detail-drawn.data.."
    assert place(detail, out_of_sight("marey")) == place(detail)
    assert place(detail, out_of_sight("detail-graph")) > place("flow.figure")
    assert out_of_sight(None) == out_of_sight("") == frozenset()


def _queue(turns: Turns, places: list[int], served: list[int]) -> list[threading.Thread]:
    """A thread per place, each started once the one before waits for its turn; each notes its place when served."""

    def ask(p: int) -> None:
        held = turns.enter(p)
        served.append(p)
        if held:
            turns.leave()

    threads = []
    for p in places:
        t = threading.Thread(target=ask, args=(p,))
        t.start()
        threads.append(t)
        deadline = time.monotonic() + 5
        while len(turns._waiting) < len(threads) and time.monotonic() < deadline:
            time.sleep(0.005)
    return threads


def test_the_waiting_callback_highest_on_the_page_goes_next_then_the_earliest() -> None:
    turns = Turns(max_wait_s=30)
    assert turns.enter(5)  # one callback holds the turn
    served: list[int] = []
    threads = _queue(turns, [9, 3, 7, 3], served)
    assert served == []  # all wait
    turns.leave()
    for t in threads:
        t.join(5)
    assert served == [3, 3, 7, 9]


def test_a_callback_waits_for_its_turn_at_most_its_wait_then_runs_beside_the_holder() -> None:
    turns = Turns(max_wait_s=0.1)
    assert turns.enter(0)  # held and never given back (a slow callback)
    start = time.monotonic()
    assert turns.enter(3) is False  # ran anyway, without the turn
    assert 0.09 <= time.monotonic() - start < 2
    assert turns._waiting == []
    turns.leave()
    assert turns.enter(1) is True  # the turn is free again


def test_the_servers_callbacks_take_and_give_back_turns_and_other_requests_do_not() -> None:
    server = Flask(__name__)
    turns = install(server, Turns(max_wait_s=5))
    seen: list[bool] = []

    @server.post(CALLBACK_PATH)
    def callback() -> str:
        seen.append(turns._held)
        if server.config.get("fail"):
            raise RuntimeError("a failing callback")
        return "{}"

    @server.get("/page")
    def page() -> str:
        seen.append(turns._held)
        return "page"

    client = server.test_client()
    assert client.post(CALLBACK_PATH, json={"output": "heatmap.figure"}).status_code == 200
    assert (
        client.post(
            CALLBACK_PATH, json={"output": "heatmap.figure"}, headers={SIGHT_HEADER: "heatmap," + "x" * 5000}
        ).status_code
        == 200
    )
    assert client.get("/page").status_code == 200
    assert client.post(CALLBACK_PATH, data="not json", content_type="application/json").status_code == 200
    server.config["fail"] = True
    server.testing = False
    assert client.post(CALLBACK_PATH, json={"output": "flow.figure"}).status_code == 500
    assert seen == [
        True,
        True,
        False,
        True,
        True,
    ]  # each callback held the turn while it ran, the page did not
    assert turns._held is False  # given back after each, a failing one too
