"""The folded timeline in real headless Chromium, on the simulated 64-rank job of test_app_timeline_folds: the
culprit is the first row and the other ranks fold per stage; a click on a folded row opens it, the opened fold
survives a step change, and "fold all" closes it again. Screenshots land in test-output/app/."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.test_app_support import click_data_point, composite, screenshot, settle, severe_logs, wait_plot
from tests.test_app_timeline_folds import CULPRIT, MESH

pytestmark = [
    pytest.mark.browser,
    pytest.mark.slow,
    pytest.mark.filterwarnings("ignore:HTTPResponse.getheader:DeprecationWarning"),
]
TICKS = "return document.querySelector('#timeline .js-plotly-plot').layout.yaxis.ticktext"
CHECKED = "return Array.from(document.querySelectorAll('#timeline-expand input:checked')).map(i => i.value)"


@pytest.fixture(scope="module")
def duo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from paradiag.app.config import Config
    from paradiag.app.factory import create_app
    from paradiag.simulator import SimConfig, parse_fault, simulate

    root = tmp_path_factory.mktemp("folds-app")
    mp = pytest.MonkeyPatch()
    mp.setenv("PARADIAG_CACHE_DIR", str(root / "cache"))
    folder = simulate(
        SimConfig(
            output=root / "job", faults=(parse_fault(f"slow_device:ranks={CULPRIT},factor=1.5"),), **MESH
        )
    )
    yield from composite(
        create_app(
            Config.from_env(job=str(folder), upload_dir=root / "uploads", app_cache_dir=root / "app-cache")
        )
    )
    mp.undo()


def wait_for(duo: Any, script: str, test: Any, timeout: float = 30) -> Any:
    deadline, value = time.time() + timeout, None
    while time.time() < deadline:
        value = duo.driver.execute_script(script)
        if test(value):
            return value
        time.sleep(0.2)
    raise AssertionError(f"never came: {value}")


def test_a_folded_row_opens_on_a_click_stays_open_across_steps_and_folds_back(duo: Any) -> None:
    duo.driver.get(duo.server_url + "/")
    wait_plot(duo, "timeline", timeout=120)
    ticks = wait_for(duo, TICKS, lambda t: t and any(x.startswith("▸ s") for x in t))
    assert ticks[0].startswith(f"<b>r{CULPRIT} compute") and len(ticks) < 64
    row = next(i for i, t in enumerate(ticks) if t.startswith("▸ s"))
    key = ticks[row].split()[1]
    point = duo.driver.execute_script(
        """const gd = document.querySelector('#timeline .js-plotly-plot');
        const t = gd._fullData.find(t => t.name === 'compute folded');
        const i = Array.from(t.y).indexOf(arguments[0]);
        return [t.x[i], t.y[i]];""",
        row,
    )
    click_data_point(duo, "timeline", point[0], point[1])  # a bar of the folded row
    opened = wait_for(duo, TICKS, lambda t: any(x.startswith(f"▸ {key}.dp") for x in t))
    assert not any(x.startswith(f"▸ {key} ") for x in opened) and opened[0].startswith(f"<b>r{CULPRIT} ")
    assert duo.driver.execute_script(CHECKED) == [key]
    screenshot(duo, "timeline_fold_opened", "timeline")

    search = duo.driver.execute_script("return window.location.search")
    step = int(search.split("step=")[1].split("&")[0])
    xy = duo.driver.execute_script(
        "const t = document.querySelector('#steps .js-plotly-plot')._fullData[0]; const i = Array.from(t.x).findIndex(x => x !== arguments[0]); return [t.x[i], t.y[i]];",
        step,
    )
    span = "return document.querySelector('#timeline .js-plotly-plot').layout.xaxis.range"
    before = duo.driver.execute_script(span)
    click_data_point(duo, "steps", xy[0], xy[1])  # another step
    wait_for(duo, "return window.location.search", lambda s: f"step={xy[0]}" in s)
    wait_for(duo, span, lambda r: r != before)  # the new step's timeline is drawn ...
    assert any(
        x.startswith(f"▸ {key}.dp") for x in duo.driver.execute_script(TICKS)
    )  # ... with the fold still open

    duo.find_element("#timeline-fold-all").click()
    wait_for(duo, TICKS, lambda t: any(x.startswith(f"▸ {key} ") for x in t))
    # A double-click on the folded row zooms out and leaves it folded: its first click opened the fold at once,
    # the zoom out folded it back.
    settle(duo)
    row = next(i for i, t in enumerate(duo.driver.execute_script(TICKS)) if t.startswith(f"▸ {key} "))
    point = duo.driver.execute_script(
        """const gd = document.querySelector('#timeline .js-plotly-plot');
        const t = gd._fullData.find(t => t.name === 'compute folded');
        const i = Array.from(t.y).indexOf(arguments[0]);
        return [t.x[i], t.y[i]];""",
        row,
    )
    click_data_point(duo, "timeline", point[0], point[1], double=True)
    settle(duo)
    assert any(x.startswith(f"▸ {key} ") for x in duo.driver.execute_script(TICKS))
    assert duo.driver.execute_script(CHECKED) == []
    assert severe_logs(duo) == []


DRAWS = """window.__draws = {};
for (const id of ['heatmap', 'timeline']) {
    document.querySelector('#' + id + ' .js-plotly-plot').on('plotly_afterplot', () => { window.__draws[id] = (window.__draws[id] || 0) + 1; });
}"""


def test_a_click_on_a_folded_heatmap_row_selects_its_ranks_unfolds_it_and_draws_each_view_once(
    duo: Any,
) -> None:
    """The unfolded rows and the new selection come in one reply, and a view whose new figure is taller is not laid
    out again for its new size (assets/plots.js)."""
    duo.driver.get(duo.server_url + "/")
    wait_plot(duo, "timeline", timeout=120)
    heat = "return document.querySelector('#heatmap .js-plotly-plot').layout.yaxis.ticktext"
    ticks = wait_for(duo, heat, lambda t: t and any("ranks" in x for x in t))
    row = next(i for i, t in enumerate(ticks) if t.endswith("ranks") and "⚠" not in t)
    steps = duo.driver.execute_script(
        "return Array.from(document.querySelector('#heatmap .js-plotly-plot').data[0].x)"
    )
    duo.driver.execute_script(DRAWS)
    click_data_point(duo, "heatmap", steps[-1], row)
    search = wait_for(
        duo, "return window.location.search", lambda s: f"step={steps[-1]}" in s and "ranks=" in s
    )
    opened = wait_for(duo, heat, lambda t: len(t) > len(ticks))
    assert ticks[row] not in opened  # the folded row gave way to its groups or ranks
    wait_for(duo, TICKS, lambda t: t and t[0].startswith("<b>r"))
    settle(duo)  # a second layout for the new size would be a plot or resize in flight, then drawn
    assert duo.driver.execute_script("return window.__draws") == {"heatmap": 1, "timeline": 1}
    assert len(search.split("ranks=")[1].split("&")[0].split("%2C")) > 1
    assert severe_logs(duo) == []
