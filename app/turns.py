"""Callbacks take turns, the top of the page first.

A gesture that changes the step asks for 5-7 callbacks at once (the step chart, the heatmap, the timeline, Marey's
graph, the device detail, the flow graph...). A worker's threads ran them side by side under the interpreter's
lock, so each was answered only when nearly all were (a 256-rank step change: every reply 270-290 ms after it was
sent, for 200 ms of the server's CPU), and the browser, which draws the figures one after the other, sat idle
until then and drew them all at the end. Run one at a time, each is answered as soon as it is done and the browser
draws it while the server computes the next: the views a user sees first (the page's top: summary, findings, step
chart, heatmap, timeline) go first, the ones below the fold last (`PAGE_ORDER`), and a callback whose graphs are
all out of the browser's window (the request names them: `SIGHT_HEADER`) after every other.

A callback waits for its turn at most `MAX_WAIT_S`, then runs beside the one that holds it: a slow callback (a
step read cold, the compare panel's first comparison) delays the others by that much at most, never serializes
them behind it. Only callback requests that passed sign-in and the envelope check take turns; a process of a
multi-worker server (gunicorn) has its own turns."""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from typing import Any

from flask import Flask, g, request

from paradiag.app import ids

CALLBACK_PATH = "/_dash-update-component"
MAX_WAIT_S = 0.5
# The page's order, top first: the first of these ids a callback writes sets its turn (the selection's reducer and
# the page's shell before every view; anything not named here after them all).
PAGE_ORDER: tuple[str, ...] = (
    ids.URL,
    ids.SELECTION,
    ids.JOB_PAGE,
    ids.SUMMARY_FACTS,
    ids.FINDINGS,
    ids.STEPS,
    ids.HEATMAP,
    ids.TIMELINE,
    ids.MAREY,
    ids.DETAIL_TITLE,
    ids.DETAIL,
    ids.COMM_MATRIX,
    ids.COMPARE_SUMMARY,
    ids.FLOW,
)
_RANK = {name: i for i, name in enumerate(PAGE_ORDER)}
# The graphs a callback may draw (a panel's id, as the browser names it).
_GRAPHS = frozenset(
    {
        ids.STEPS,
        ids.HEATMAP,
        ids.TIMELINE,
        ids.MAREY,
        ids.DETAIL,
        ids.COMM_MATRIX,
        ids.COMPARE_RANKS,
        ids.COMPARE_OPERATORS,
        ids.FLOW,
    }
)


SIGHT_HEADER = (
    "X-Paradiag-Out-Of-Sight"  # the graphs out of the browser's window (assets/plots.js), by panel id
)
MAX_SIGHT_NAMES = 32


def place(output: Any, out_of_sight: frozenset[str] = frozenset()) -> int:
    """A callback's place in the page's order, from its ``output`` ("heatmap.figure",
    "..timeline.figure...timeline-info.children.."): its earliest output's; after every other view's when each
    graph it draws is ``out_of_sight`` (the browser keeps such a figure and draws it when idle: a user scrolled to
    the communication matrix waits for it, not for the heatmap above)."""
    if not isinstance(output, str):
        return len(PAGE_ORDER)
    names = {part.split(".", 1)[0] for part in output.replace("...", "..").split("..")} - {""}
    first = min((_RANK.get(name, len(PAGE_ORDER)) for name in names), default=len(PAGE_ORDER))
    drawn = {name for name in names if name in _GRAPHS}
    return first + len(PAGE_ORDER) + 1 if drawn and drawn <= out_of_sight else first


def out_of_sight(header: str | None) -> frozenset[str]:
    """The graph ids the browser named out of sight (SIGHT_HEADER), the page's own ids only."""
    names = (header or "").split(",")[:MAX_SIGHT_NAMES]
    return frozenset(n.strip() for n in names if n.strip() in _GRAPHS)


class Turns:
    """One holder at a time; the waiting callback with the lowest place goes next (then the earliest); a callback
    that waited ``max_wait_s`` goes anyway, beside the holder."""

    def __init__(self, max_wait_s: float = MAX_WAIT_S) -> None:
        self.max_wait_s = max_wait_s
        self._cv = threading.Condition()
        self._held = False
        self._waiting: list[tuple[int, int]] = []
        self._seq = itertools.count()

    def enter(self, place: int) -> bool:
        """Wait for this callback's turn: True when it holds the turn (``leave`` must follow), False when it
        waited too long and runs beside the holder."""
        with self._cv:
            ticket = (place, next(self._seq))
            heapq.heappush(self._waiting, ticket)
            deadline = time.monotonic() + self.max_wait_s
            while self._held or self._waiting[0] != ticket:
                left = deadline - time.monotonic()
                if left <= 0:
                    self._waiting.remove(ticket)
                    heapq.heapify(self._waiting)
                    self._cv.notify_all()  # the next in line may be free to go now
                    return False
                self._cv.wait(left)
            heapq.heappop(self._waiting)
            self._held = True
            return True

    def leave(self) -> None:
        with self._cv:
            self._held = False
            self._cv.notify_all()


def install(server: Flask, turns: Turns | None = None) -> Turns:
    """Make ``server``'s callback requests take turns (hooks registered after sign-in's and the envelope's checks,
    so a refused request never queues)."""
    turns = turns or Turns()

    @server.before_request
    def take_turn() -> None:
        if request.path.endswith(CALLBACK_PATH):
            body = request.get_json(silent=True)
            output = body.get("output") if isinstance(body, dict) else None
            g.turn_held = turns.enter(place(output, out_of_sight(request.headers.get(SIGHT_HEADER))))

    @server.teardown_request
    def give_turn(_exc: BaseException | None) -> None:
        if g.pop("turn_held", False):
            turns.leave()

    return turns
