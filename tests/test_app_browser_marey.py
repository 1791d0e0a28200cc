"""Marey's graph in real headless Chromium: a single click selects one instance at once, a double-click only resets
the zoom (what its first click selected is taken back), and the "critical path" toggle draws the step's path."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qs

import pytest

from tests.test_app_support import click_data_point, fresh_app, screenshot, settle, severe_logs, wait_plot

pytestmark = [
    pytest.mark.browser,
    pytest.mark.slow,
    pytest.mark.filterwarnings("ignore:HTTPResponse.getheader:DeprecationWarning"),
]
SAMPLE = "gpu_llm_slow_rank"  # rank 5 computes 1.4x slower


@pytest.fixture(scope="module")
def duo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    yield from fresh_app(tmp_path_factory)


def search(duo: Any) -> str:
    return str(duo.driver.execute_script("return window.location.search"))


def until(check: Any, timeout: float = 20) -> bool:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if check():
            return True
        time.sleep(0.2)
    return False


def bar(duo: Any, gemm: bool = True) -> tuple[float, float]:
    """Data coordinates of a gemm bar's hover point in view (``gemm=False``: another operator's)."""
    x, y = duo.driver.execute_script(
        """const gd = document.querySelector('#marey .js-plotly-plot');
        const [lo, hi] = gd._fullLayout.xaxis.range;
        for (const t of gd._fullData.filter(d => d.hoveron === 'points' && d.name === 'compute')) {
            const names = gd.layout.meta.operators;  // a point's operator is its index there
            const i = [...t.customdata.keys()].find(k => names[t.customdata[k][0]].includes('gemm') === arguments[0] && t.x[k] > lo && t.x[k] < hi);
            if (i !== undefined) { return [t.x[i], t.y[i]]; }
        }""",
        gemm,
    )
    return float(x), float(y)


def picked(duo: Any) -> dict[str, list[str]]:
    """The selected instance in the page's address: its operator, stage and time."""
    query = parse_qs(search(duo).lstrip("?"))
    return {k: query[k] for k in ("op", "stage", "at") if k in query}


def zoomed(duo: Any) -> bool:
    """Whether the page's address holds a window (``t``)."""
    return "t" in parse_qs(search(duo).lstrip("?"))


def zoom_in(duo: Any) -> None:
    """Marey's graph zoomed to the middle of the step, every view drawn for it."""
    duo.driver.execute_script(
        """const gd = document.querySelector('#marey .js-plotly-plot'); gd.scrollIntoView({block: 'center'});
        const [a, b] = gd._fullLayout.xaxis.range;
        Plotly.relayout(gd, {'xaxis.range[0]': a + (b - a) * 0.3, 'xaxis.range[1]': a + (b - a) * 0.6});"""
    )
    assert until(lambda: zoomed(duo)), search(duo)  # zoomed: the window is in the link
    # The zoomed window's figures drawn: a plot landing between the double-click's two clicks (a busy page draws
    # for longer than plotly's 300 ms double-click delay) made them two single clicks, and the zoom stayed.
    settle(duo)


def pointer(duo: Any, x: float, y: float, gesture: str) -> None:
    """The mouse moved to data coordinates (x, y) of Marey's graph, then ``gesture``: "double_click",
    "slow_double_click" or "pause" (hover only)."""
    from selenium.webdriver.common.action_chains import ActionChains

    pos = duo.driver.execute_script(
        """const gd = document.querySelector('#marey .js-plotly-plot');
        const fl = gd._fullLayout, box = gd.getBoundingClientRect();
        return [box.left + fl.xaxis._offset + fl.xaxis.l2p(arguments[0]), box.top + fl.yaxis._offset + fl.yaxis.l2p(arguments[1])];""",
        x,
        y,
    )
    actions = ActionChains(duo.driver)
    actions.w3c_actions.pointer_action.move_to_location(int(pos[0]), int(pos[1]))
    if gesture == "slow_double_click":  # 300 ms apart: the first click's answer lands between the two presses
        actions.w3c_actions.pointer_action.click()
        actions.w3c_actions.pointer_action.pause(0.3)
        actions.w3c_actions.pointer_action.click()
    else:
        getattr(actions.w3c_actions.pointer_action, gesture)()
    actions.perform()


def double_click(duo: Any, gesture: str, gemm: bool) -> None:
    """A double-click (``gesture``) on a bar of Marey's graph; the test is skipped where the page received its two
    presses further apart than a double-click (window.__pdDoubleMs, Chrome's interval, by the events' own time
    stamps): the driver sends them 0-300 ms apart, and on a machine at load 10 they reached the page 500+ ms apart,
    which the page and the browser rightly take for two clicks."""
    stamps = "const t = window.__pdClicks.marey; return [t.lastPressAt, t.pressAt];"
    before = duo.driver.execute_script(stamps)[1]
    pointer(duo, *bar(duo, gemm=gemm), gesture)
    assert until(lambda: duo.driver.execute_script(stamps)[0] > before)  # both presses seen
    first, second = duo.driver.execute_script(stamps)
    if second - first >= duo.driver.execute_script("return window.__pdDoubleMs"):
        pytest.skip(f"the page received the double-click's presses {second - first:.0f} ms apart: two clicks")


def test_double_click_resets_the_zoom_and_selects_nothing_a_click_selects(duo: Any) -> None:
    duo.driver.get(f"{duo.server_url}/?job=sample:{SAMPLE}&step=1")
    wait_plot(duo, "marey")
    settle(duo)  # every view drawn: nothing redraws the graph under the zoom
    zoom_in(duo)
    double_click(duo, "double_click", gemm=True)
    assert until(lambda: not zoomed(duo)), search(duo)  # the zoom was reset ...
    settle(duo)  # ... and, every answer in, nothing is selected: its first click's selection was taken back
    assert picked(duo) == {}, search(duo)
    click_data_point(duo, "marey", *bar(duo))
    assert until(lambda: "op=" in search(duo)), search(duo)  # a single click selects the instance
    assert "gemm" in search(duo).lower()
    settle(duo)
    chosen = picked(duo)
    # A double-click on another operator's band while one is selected: zoomed out, the one selected before it kept.
    zoom_in(duo)
    double_click(duo, "slow_double_click", gemm=False)
    assert until(lambda: not zoomed(duo)), search(duo)
    settle(duo)
    assert picked(duo) == chosen, (search(duo), chosen)
    assert severe_logs(duo) == []


def test_the_critical_path_toggle_draws_the_path(duo: Any) -> None:
    duo.driver.get(f"{duo.server_url}/?job=sample:{SAMPLE}&step=1")
    wait_plot(duo, "marey")

    def names() -> list[str]:
        return list(
            duo.driver.execute_script(
                "return document.querySelector('#marey .js-plotly-plot').data.map(d => d.name)"
            )
        )

    assert "critical path" not in names()
    duo.find_element("#marey-path input").click()
    assert until(lambda: "critical path" in names()), names()
    shapes = duo.driver.execute_script(
        "return document.querySelector('#marey .js-plotly-plot').layout.shapes.map(s => s.name)"
    )
    assert shapes[-1] == "selected operator"  # the selection's outline stays the last shape (patched alone)
    hover = duo.driver.execute_script(
        "return document.querySelector('#marey .js-plotly-plot').data.find(d => d.name === 'critical path').hovertext"
    )
    assert any("rank 5" in h for h in hover)
    screenshot(duo, "marey_critical_path", "marey")
    duo.find_element("#marey-path input").click()
    assert until(lambda: "critical path" not in names()), names()
    assert severe_logs(duo) == []


def test_a_long_bar_answers_hover_and_click_away_from_its_middle(duo: Any) -> None:
    duo.driver.get(f"{duo.server_url}/?job=sample:{SAMPLE}&step=1")
    wait_plot(duo, "marey")
    settle(duo)
    # The longest bar's hover points (those sharing an instance and a row), and a spot in its first quarter.
    bar = duo.driver.execute_script(
        """const gd = document.querySelector('#marey .js-plotly-plot'); gd.scrollIntoView({block: 'center'});
        const bars = {};
        for (const t of gd._fullData.filter(d => d.hoveron === 'points' && d.customdata)) {
            t.customdata.forEach((c, i) => { (bars[c[2] + '|' + t.y[i]] ??= {op: gd.layout.meta.operators[c[0]], mid: c[2], y: t.y[i], xs: []}).xs.push(t.x[i]); });
        }
        const bar = Object.values(bars).sort((a, b) => b.xs.length - a.xs.length)[0];
        gd.on('plotly_hover', e => { const c = [...e.points[0].customdata]; window.__pdHovered = [gd.layout.meta.operators[c[0]], ...c.slice(1), e.points[0].y]; });
        return bar;"""
    )
    xs = sorted(bar["xs"])
    assert len(xs) >= 3, bar
    x = xs[0] + (xs[1] - xs[0]) / 4  # nearer the bar's start than its middle, between two hover points
    assert abs(x - bar["mid"]) > (xs[-1] - xs[0]) / 3
    pointer(duo, x, bar["y"], "pause")
    assert until(
        lambda: duo.driver.execute_script("return window.__pdHovered || null") is not None, timeout=5
    )
    hovered = duo.driver.execute_script("return window.__pdHovered")
    assert (hovered[0], hovered[2], hovered[-1]) == (
        bar["op"],
        bar["mid"],
        bar["y"],
    )  # this bar, not a neighbour
    assert duo.driver.execute_script(
        "return document.querySelector('#marey .hoverlayer .hovertext') !== null"
    )
    screenshot(duo, "marey_hover_long_bar", "marey")
    click_data_point(duo, "marey", x, bar["y"])
    assert until(lambda: "op=" in search(duo)), search(duo)

    def outline() -> list[float]:
        path = duo.driver.execute_script(
            "const s = document.querySelector('#marey .js-plotly-plot').layout.shapes.find(s => s.name === 'selected operator'); return s.visible === false ? '' : s.path;"
        )
        return [float(x) for x in re.findall(r"[ML](-?[0-9.]+),", path or "")]

    assert until(lambda: bool(outline())), search(duo)
    assert min(outline()) <= x <= max(outline())  # the clicked instance is the one outlined
    assert severe_logs(duo) == []
