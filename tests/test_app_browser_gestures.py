"""Zoom gestures in real headless Chromium, counted by the page's own signal of what it drew (assets/plots.js,
``window.__pdPlots.drawn``): a drag redraws the two views that show the window once each and no other; the same
drag again after "back" is heard; a double-click on the timeline zooms out."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.test_app_support import click_data_point, drawn, fresh_app, settle, severe_logs, wait_plot

pytestmark = [
    pytest.mark.browser,
    pytest.mark.slow,
    pytest.mark.filterwarnings("ignore:HTTPResponse.getheader:DeprecationWarning"),
]
SAMPLE = "gpu_llm_slow_rank"
GRAPHS = ("steps", "heatmap", "timeline", "marey", "flow", "comm-matrix", "detail-graph")


@pytest.fixture(scope="module")
def duo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    yield from fresh_app(tmp_path_factory)


def window(duo: Any) -> str | None:
    """The selected window in the URL (``t=``), None when there is none."""
    return duo.driver.execute_script("return new URLSearchParams(window.location.search).get('t')")


def until(check: Any, timeout: float = 30) -> bool:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if check():
            return True
        time.sleep(0.1)
    return False


def counts(duo: Any) -> dict[str, int]:
    return {g: drawn(duo, g) for g in GRAPHS}


def painted(duo: Any) -> dict[str, int]:
    """Each graph's plotly "afterplot" events (assets/plots.js): its draws, also those of plotly's own zoom."""
    return duo.driver.execute_script("return Object.assign({}, window.__pdPlots.painted)")


def point(duo: Any, graph_id: str, fx: float, fy: float = 0.5) -> tuple[int, int]:
    pos = duo.driver.execute_script(
        """const gd = document.querySelector('#' + arguments[0] + ' .js-plotly-plot');
        gd.scrollIntoView({block: 'center'});
        const fl = gd._fullLayout, box = gd.getBoundingClientRect();
        return [box.left + fl.xaxis._offset + fl.xaxis._length * arguments[1], box.top + fl.yaxis._offset + fl.yaxis._length * arguments[2]];""",
        graph_id,
        fx,
        fy,
    )
    return int(pos[0]), int(pos[1])


def drag(duo: Any, graph_id: str, fx0: float, fx1: float) -> None:
    from selenium.webdriver.common.action_chains import ActionChains

    (x0, y), (x1, _) = point(duo, graph_id, fx0), point(duo, graph_id, fx1)
    actions = ActionChains(duo.driver, duration=50)
    pointer = actions.w3c_actions.pointer_action
    pointer.move_to_location(x0, y)
    pointer.pointer_down()
    for k in range(1, 6):
        pointer.move_to_location(x0 + (x1 - x0) * k // 5, y)
    pointer.pointer_up()
    actions.perform()


def double_click(duo: Any, graph_id: str) -> None:
    from selenium.webdriver.common.action_chains import ActionChains

    x, y = point(duo, graph_id, 0.5)
    actions = ActionChains(duo.driver, duration=10)
    actions.w3c_actions.pointer_action.move_to_location(x, y)
    actions.w3c_actions.pointer_action.double_click()
    actions.perform()


def redrawn_by(duo: Any, gesture: Any, changed: Any) -> dict[str, int]:
    """Each graph's redraws (plots finished) from ``gesture`` until ``changed`` holds and the page settled; plotly
    drew each of them that many times too (a zoom is not drawn by plotly first, then by the server's figure)."""
    before, shown = counts(duo), painted(duo)
    gesture()
    assert until(changed), window(duo)
    settle(duo)
    after, now = counts(duo), painted(duo)
    redrawn = {g: after[g] - before[g] for g in GRAPHS if after[g] != before[g]}
    assert {g: now.get(g, 0) - shown.get(g, 0) for g in GRAPHS if now.get(g, 0) != shown.get(g, 0)} == redrawn
    return redrawn


def test_zooms_redraw_the_window_views_once_and_are_heard_every_time(duo: Any) -> None:
    duo.driver.get(f"{duo.server_url}/?job=sample:{SAMPLE}&step=1")
    for g in ("timeline", "marey", "heatmap"):
        wait_plot(duo, g)
    settle(duo)
    assert window(duo) is None
    # A drag on the timeline: it and Marey (which share the window) drawn once each with the new window's data:
    # plotly does not zoom the graph first (assets/plots.js), and dcc.Graph's write-back of the axes is not drawn.
    assert redrawn_by(duo, lambda: drag(duo, "timeline", 0.3, 0.5), lambda: window(duo) is not None) == {
        "timeline": 1,
        "marey": 1,
    }
    first = window(duo)
    # A double-click zooms out: no window, both views drawn once more.
    assert redrawn_by(duo, lambda: double_click(duo, "timeline"), lambda: window(duo) is None) == {
        "timeline": 1,
        "marey": 1,
    }
    # The same on Marey's graph; then back, then the very same drag again, which must be heard (dcc.Graph drops a
    # relayout equal to the last one it reported: the zoom stores clear it once read).
    assert redrawn_by(duo, lambda: drag(duo, "marey", 0.3, 0.5), lambda: window(duo) is not None) == {
        "timeline": 1,
        "marey": 1,
    }
    zoomed = window(duo)
    assert zoomed != first or zoomed is not None
    duo.driver.find_element("id", "marey-back").click()
    assert until(lambda: window(duo) is None)
    settle(duo)
    assert redrawn_by(duo, lambda: drag(duo, "marey", 0.3, 0.5), lambda: window(duo) is not None) == {
        "timeline": 1,
        "marey": 1,
    }
    assert window(duo) == zoomed
    # ... and a second double-click after a zoom is heard too.
    assert redrawn_by(duo, lambda: double_click(duo, "marey"), lambda: window(duo) is None) == {
        "timeline": 1,
        "marey": 1,
    }
    # A double-click that plotly did not tell (on a busy page its handlers of the two presses run more than its
    # 300 ms apart): the browser's own dblclick event on the plot area zooms out, once.
    assert redrawn_by(duo, lambda: drag(duo, "timeline", 0.2, 0.6), lambda: window(duo) is not None) == {
        "timeline": 1,
        "marey": 1,
    }
    only_dom = "document.querySelector('#timeline .nsewdrag').dispatchEvent(new MouseEvent('dblclick', {bubbles: true}))"
    assert redrawn_by(duo, lambda: duo.driver.execute_script(only_dom), lambda: window(duo) is None) == {
        "timeline": 1,
        "marey": 1,
    }
    assert severe_logs(duo) == []


def flow_drawn_for(duo: Any) -> str | None:
    """The step of the flow graph on screen (its ``uirevision``: ``flow|<step>``), None before its first plot."""
    return duo.driver.execute_script(
        "const gd = document.querySelector('#flow .js-plotly-plot'); return gd && gd._fullLayout ? gd._fullLayout.uirevision : null"
    )


def test_a_graph_out_of_sight_is_drawn_once_the_page_is_idle_and_an_outline_recomputes_nothing(
    duo: Any,
) -> None:
    duo.driver.set_window_size(1600, 900)  # the flow graph, at the page's foot, out of sight
    try:
        duo.driver.get(f"{duo.server_url}/?job=sample:{SAMPLE}&step=0")
        for g in ("flow", "marey", "heatmap", "steps"):
            wait_plot(duo, g)
        settle(duo)
        duo.driver.execute_script("window.scrollTo(0, 0)")
        assert until(
            lambda: duo.driver.execute_script(
                "return document.querySelector('#flow .js-plotly-plot')._pdInSight === false"
            )
        )
        assert flow_drawn_for(duo) == "flow|0"
        before, kept = drawn(duo, "flow"), duo.driver.execute_script("return window.__pdPlots.kept.flow || 0")
        # Another step from the step chart, at the page's top: the flow graph's new figure is kept while the views
        # in sight are drawn, then drawn once the page is idle (settle waits for it), once, without a scroll.
        x, y = duo.driver.execute_script(
            "const t = document.querySelector('#steps .js-plotly-plot')._fullData.find(d => d.x && d.x.length > 1); return [t.x[1], t.y[1]];"
        )
        click_data_point(duo, "steps", x, y)
        assert until(lambda: "step=1" in duo.driver.execute_script("return window.location.search"))
        settle(duo)
        assert duo.driver.execute_script("return window.__pdPlots.kept.flow || 0") == kept + 1
        assert flow_drawn_for(duo) == "flow|1"
        assert drawn(duo, "flow") == before + 1
        # A click on a Marey band outlines it with a Patch of one shape: plotly computes none of the figure's
        # traces again (their typed arrays are decoded once, so it finds them unchanged), it only draws the shape.
        duo.driver.execute_script(
            "const gd = document.querySelector('#marey .js-plotly-plot'); gd.scrollIntoView({block: 'center'}); window.__pdCalc = gd.calcdata;"
        )
        bx, by = duo.driver.execute_script(
            """const gd = document.querySelector('#marey .js-plotly-plot');
            const t = gd._fullData.find(d => d.hoveron === 'points' && d.name === 'compute' && d.x.length > 0);
            return [t.x[0], t.y[0]];"""
        )
        click_data_point(duo, "marey", bx, by)
        assert until(lambda: "op=" in duo.driver.execute_script("return window.location.search"))
        settle(duo)
        outline, kept_calc = duo.driver.execute_script(
            """const gd = document.querySelector('#marey .js-plotly-plot');
            const s = gd.layout.shapes[gd.layout.shapes.length - 1];
            return [s.visible === false ? '' : s.path, gd.calcdata === window.__pdCalc];"""
        )
        assert outline and outline != "M0,0", outline  # the clicked band outlined ...
        drawn_outline = duo.driver.execute_script(
            """const paths = [...document.querySelectorAll('#marey .shapelayer path')];
            return paths.filter(p => p.style.strokeWidth === '2.5px' && p.getAttribute('d').length > 20).length;"""
        )
        assert drawn_outline == 1  # ... on screen
        assert kept_calc  # ... and nothing computed again
        assert painted(duo)["marey"] == drawn(duo, "marey")  # its redraw told as one (plotly_afterplot)
    finally:
        duo.driver.set_window_size(1600, 2400)
    assert severe_logs(duo) == []
