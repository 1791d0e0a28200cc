"""Helpers for the dashboard's browser tests: start one app server and one headless Chromium per module,
click on a plot at data coordinates, read what a plot holds, save screenshots under test-output/."""

from __future__ import annotations

import os
import shutil
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "test-output" / "app"


def need_chromium() -> None:
    if not shutil.which("chromedriver") or not (
        os.environ.get("DASH_TEST_CHROMEPATH") or shutil.which("chromium")
    ):
        pytest.skip("chromium and chromedriver are not installed (apt-get install chromium chromium-driver)")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def composite(app: Any) -> Iterator[Any]:
    """A started Dash app and a headless Chromium driving it (dash.testing's DashComposite)."""
    need_chromium()
    os.environ.setdefault("DASH_TEST_CHROMEPATH", shutil.which("chromium") or "/usr/bin/chromium")
    from dash.testing.application_runners import ThreadedRunner
    from dash.testing.composite import DashComposite

    OUT.mkdir(parents=True, exist_ok=True)
    with (
        ThreadedRunner() as runner,
        DashComposite(
            runner, browser="chrome", headless=True, options=None, percy_run=False, wait_timeout=30
        ) as duo,
    ):
        duo.driver.set_window_size(1600, 2400)
        duo.start_server(app, port=free_port())  # several suites may run side by side on one machine
        yield duo


def fresh_app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """:func:`composite` on a new app with its own caches and upload folder (a module fixture's body)."""
    from paradiag.app.config import Config
    from paradiag.app.factory import create_app

    root: Path = tmp_path_factory.mktemp("app")
    mp = pytest.MonkeyPatch()
    mp.setenv("PARADIAG_CACHE_DIR", str(root / "cache"))
    try:
        yield from composite(
            create_app(Config.from_env(upload_dir=root / "uploads", app_cache_dir=root / "app-cache"))
        )
    finally:
        mp.undo()


# The page's own signals of work in progress: Dash's callbacks not yet answered (its store, as dash.testing reads
# it), components marked loading, plots begun and not finished and figures kept out of sight, not drawn yet
# (assets/plots.js, window.__pdPlots).
BUSY = """const s = window.store && window.store.getState();
if (!s || !window.__pdPlots) { return -1; }
const c = s.callbacks || {};
let n = 0;
for (const k of Object.keys(c)) { if (k !== 'stored' && k !== 'completed' && Array.isArray(c[k])) { n += c[k].length; } }
return n + document.querySelectorAll('[data-dash-is-loading="true"]').length + window.__pdPlots.inFlight + (window.__pdPlots.keptNow || 0);"""


def settle(duo: Any, timeout: float = 90, polls: int = 3) -> None:
    """Until the page has no callback pending, nothing loading and no plot being drawn, on ``polls`` polls in a
    row (a callback's answer can queue the next one a tick later). A busy machine only makes it take longer."""
    deadline, quiet = time.time() + timeout, 0
    while time.time() < deadline:
        quiet = quiet + 1 if duo.driver.execute_script(BUSY) == 0 else 0
        if quiet >= polls:
            return
        time.sleep(0.1)
    raise AssertionError(f"the page never settled in {timeout} s (busy: {duo.driver.execute_script(BUSY)})")


def drawn(duo: Any, graph_id: str) -> int:
    """How many times the graph ``graph_id`` has been drawn (plots and resizes finished)."""
    return int(
        duo.driver.execute_script(
            "return (window.__pdPlots && window.__pdPlots.drawn[arguments[0]]) || 0", graph_id
        )
    )


def plot_state(duo: Any, graph_id: str) -> dict[str, Any]:
    """How many traces and points the plot in ``graph_id`` holds."""
    return duo.driver.execute_script(
        """const gd = document.querySelector('#' + arguments[0] + ' .js-plotly-plot');
        if (!gd || !gd.data) return {traces: 0, points: 0, title: null};
        let points = 0;
        // _fullData: typed arrays sent as {dtype, bdata} are decoded there
        for (const t of (gd._fullData || gd.data)) { const v = t.x || t.z || t.y || []; points += v.length || 0; }
        const ann = (gd.layout.annotations || []).map(a => a.text);
        return {traces: gd.data.length, points: points, annotations: ann};""",
        graph_id,
    )


def wait_plot(duo: Any, graph_id: str, timeout: float = 30, min_points: int = 1) -> dict[str, Any]:
    end = time.time() + timeout
    state: dict[str, Any] = {}
    while time.time() < end:
        state = plot_state(duo, graph_id)
        if state["points"] >= min_points:
            return state
        time.sleep(0.2)
    raise AssertionError(f"{graph_id} never showed data: {state}")


def click_data_point(duo: Any, graph_id: str, x: float, y: float, double: bool = False) -> None:
    """A real mouse click (``double``: a double-click) where data coordinates (x, y) are drawn in the plot
    ``graph_id``."""
    from selenium.webdriver.common.action_chains import ActionChains

    pos = duo.driver.execute_script(
        """const gd = document.querySelector('#' + arguments[0] + ' .js-plotly-plot');
        gd.scrollIntoView({block: 'center'});
        const fl = gd._fullLayout, xa = fl.xaxis, ya = fl.yaxis, box = gd.getBoundingClientRect();
        const xv = xa.type === 'category' ? xa.d2l(String(arguments[1])) : arguments[1];
        return [box.left + xa._offset + xa.l2p(xv), box.top + ya._offset + ya.l2p(arguments[2])];""",
        graph_id,
        x,
        y,
    )
    actions = ActionChains(duo.driver)
    actions.w3c_actions.pointer_action.move_to_location(int(pos[0]), int(pos[1]))
    if double:
        actions.w3c_actions.pointer_action.double_click()
    else:
        actions.w3c_actions.pointer_action.click()
    actions.perform()


def screenshot(duo: Any, name: str, element_id: str | None = None) -> Path:
    path = OUT / f"{name}.png"
    if element_id:
        duo.driver.find_element("id", element_id).screenshot(str(path))
    else:
        duo.driver.save_screenshot(str(path))
    return path


def severe_logs(duo: Any) -> list[dict[str, Any]]:
    return [entry for entry in duo.get_logs() or [] if entry.get("level") == "SEVERE"]
