"""The dashboard in real headless Chromium on a bundled sample job: every view renders with data, the views are
linked, and the browser console stays clean. Screenshots of each view land in test-output/app/."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from paradiag.app import palette
from tests.test_app_support import click_data_point, composite, screenshot, settle, severe_logs, wait_plot

pytestmark = [
    pytest.mark.browser,
    pytest.mark.slow,
    # selenium 4.2 calls a urllib3 method that urllib3 2.x deprecates
    pytest.mark.filterwarnings("ignore:HTTPResponse.getheader:DeprecationWarning"),
]
SAMPLE = "gpu_llm_slow_rank"


@pytest.fixture(scope="module")
def duo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from paradiag.app.config import Config
    from paradiag.app.factory import create_app

    root = tmp_path_factory.mktemp("app")
    mp = pytest.MonkeyPatch()
    mp.setenv("PARADIAG_CACHE_DIR", str(root / "cache"))
    config = Config.from_env(upload_dir=root / "uploads", app_cache_dir=root / "app-cache")
    yield from composite(create_app(config))
    mp.undo()


def open_job(duo: Any, query: str) -> None:
    duo.driver.get(duo.server_url + "/" + query)
    wait_plot(duo, "heatmap")
    wait_plot(duo, "timeline")


def current_search(duo: Any) -> str:
    return str(duo.driver.execute_script("return window.location.search"))


def wait_search(duo: Any, part: str, timeout: float = 20) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline and part not in current_search(duo):
        time.sleep(0.2)
    assert part in current_search(duo)


def test_every_view_renders(duo: Any) -> None:
    open_job(duo, f"?job=sample:{SAMPLE}")
    for graph_id in (
        "heatmap",
        "timeline",
        "marey",
        "detail-graph",
        "comm-matrix",
        "flow",
    ):
        wait_plot(duo, graph_id)
    settle(duo)
    screenshot(duo, "job_page")
    for element in ("heatmap", "timeline", "marey", "flow", "comm-matrix"):
        screenshot(duo, element, element)
    assert "step=" in current_search(duo)
    assert severe_logs(duo) == []


def test_the_first_screen_shows_the_culprit(duo: Any) -> None:
    """Read from the page itself: the slow rank 5's heatmap row is outlined red, it is the timeline's first row
    (bold, with its streams named), and the detail is about it, in the step its finding quotes."""
    open_job(duo, f"?job=sample:{SAMPLE}")
    wait_plot(duo, "steps")
    duo.wait_for_contains_text("#detail-title", "rank 5, step 1", timeout=30)
    outlined = duo.driver.execute_script(
        """const gd = document.querySelector('#heatmap .js-plotly-plot');
        const labels = gd.layout.yaxis.ticktext;
        return (gd.layout.shapes || []).filter(s => s.type === 'rect' && s.line.color === arguments[0])
            .map(s => labels[Math.round((s.y0 + s.y1) / 2)]);""",
        palette.CULPRIT,
    )
    assert len(outlined) == 1 and outlined[0].startswith("⚠ rank 5 · s1 ")
    rows = duo.driver.execute_script(
        "return document.querySelector('#timeline .js-plotly-plot').layout.yaxis.ticktext"
    )
    assert rows[0].startswith("<b>r5 compute") and all(
        not r.startswith("<b>") for r in rows if "r5 " not in r
    )
    assert "step=1" in current_search(duo)
    settle(duo)
    screenshot(duo, "first_screen")
    screenshot(duo, "heatmap_culprit", "heatmap")
    screenshot(duo, "timeline_culprit", "timeline")
    assert severe_logs(duo) == []


def test_the_critical_path_toggle_draws_the_path_on_the_culprit(duo: Any) -> None:
    """Read from the page: the slow rank 5 is the timeline's first row; ticking "critical path" draws the path's
    segments, and those on rank 5's rows name it in their hover."""
    open_job(duo, f"?job=sample:{SAMPLE}")
    settle(duo)
    script = "return document.querySelector('#timeline .js-plotly-plot').layout.yaxis.ticktext"
    assert duo.driver.execute_script(script)[0].startswith("<b>r5 compute")
    toggle = duo.find_element("#timeline-path input")
    duo.driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", toggle)
    toggle.click()
    read = """const gd = document.querySelector('#timeline .js-plotly-plot');
        const t = gd._fullData.find(t => t.name === 'critical path' && t.hoveron === 'points' && t.customdata);
        return t ? {rows: Array.from(t.y), text: Array.from(t.text), labels: gd.layout.yaxis.ticktext} : null;"""
    deadline, drawn = time.time() + 20, None
    while time.time() < deadline and not drawn:
        drawn = duo.driver.execute_script(read)
        time.sleep(0.2)
    assert drawn, "no critical path drawn after the toggle"
    on_culprit = [
        text
        for row, text in zip(drawn["rows"], drawn["text"], strict=True)
        if drawn["labels"][row].startswith("<b>r5 ")
    ]
    assert on_culprit and all("rank 5" in text for text in on_culprit)
    assert {text.split(" · ")[0] for text in drawn["text"]} <= {"compute", "communication", "waiting", "host"}
    settle(duo)
    screenshot(duo, "timeline_critical_path", "timeline")
    assert severe_logs(duo) == []


def test_heatmap_click_updates_timeline_and_detail(duo: Any) -> None:
    open_job(duo, f"?job=sample:{SAMPLE}&step=1")
    click_data_point(duo, "heatmap", 2, 6)  # step 2, the row of rank 6
    duo.wait_for_contains_text("#detail-title", "rank 6, step 2", timeout=20)
    duo.wait_for_contains_text("#timeline-info", "ranks 6 (selected)", timeout=20)
    assert "ranks=6" in current_search(duo) and "step=2" in current_search(duo)
    screenshot(duo, "after_heatmap_click")
    assert severe_logs(duo) == []


def test_a_timeline_interval_answers_hover_and_click_at_its_middle_without_a_node_per_interval(
    duo: Any,
) -> None:
    """The hover points at the intervals' middles are not drawn (each marker was an SVG node, built on every
    redraw), yet the mouse over an interval's middle shows its name and a click there reports it."""
    from selenium.webdriver.common.action_chains import ActionChains

    open_job(duo, f"?job=sample:{SAMPLE}")
    settle(duo)
    x, y, intervals, nodes = duo.driver.execute_script(
        """const gd = document.querySelector('#timeline .js-plotly-plot');
        gd.on('plotly_click', e => { window.__timelineClick = e.points.map(p => [p.data.name, p.y]); });
        const t = gd._fullData.find(t => t.name === 'compute' && t.hoveron === 'points');
        return [t.x[0], t.y[0], t._length, gd.querySelectorAll('path.point').length];"""
    )
    assert intervals > 100 and nodes < 50  # the few visible markers (none per interval)
    pos = duo.driver.execute_script(
        """const gd = document.querySelector('#timeline .js-plotly-plot');
        gd.scrollIntoView({block: 'center'});
        const fl = gd._fullLayout, box = gd.getBoundingClientRect();
        return [box.left + fl.xaxis._offset + fl.xaxis.l2p(arguments[0]), box.top + fl.yaxis._offset + fl.yaxis.l2p(arguments[1])];""",
        x,
        y,
    )
    actions = ActionChains(duo.driver)
    actions.w3c_actions.pointer_action.move_to_location(int(pos[0]), int(pos[1]))
    actions.perform()
    duo.wait_for_contains_text("#timeline .hoverlayer", "µs · at", timeout=10)
    actions.w3c_actions.pointer_action.click()
    actions.perform()
    deadline, clicked = time.time() + 10, None
    while time.time() < deadline and not clicked:
        clicked = duo.driver.execute_script("return window.__timelineClick")
        time.sleep(0.1)
    assert clicked == [["compute", y]]
    assert severe_logs(duo) == []


def test_keys_zoom_the_timeline_and_slash_searches_an_operator(duo: Any) -> None:
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.common.keys import Keys

    open_job(duo, f"?job=sample:{SAMPLE}")
    settle(duo)  # a view still arriving would redraw the timeline under the key
    body = duo.driver.find_element("tag name", "body")
    body.send_keys("w")  # zoom in around the centre: the window goes into the URL
    wait_search(duo, "t=")
    body.send_keys("/")
    deadline = time.time() + 10
    while time.time() < deadline and duo.driver.switch_to.active_element.tag_name != "input":
        time.sleep(0.1)  # the dropdown opens, then its field takes the cursor
    assert duo.driver.switch_to.active_element.tag_name == "input"  # the operator search's field
    for _ in range(20):  # the matches appear once the dropdown has filtered its options
        try:  # the dropdown may render its field anew meanwhile: always the focused one, typed into once
            box = duo.driver.switch_to.active_element
            if box.tag_name == "input" and "gemm" not in (box.get_attribute("value") or ""):
                box.send_keys("gemm")
            if not wait_option(duo, "gemm"):  # the dropdown has filtered its options to the matches
                continue
            duo.driver.switch_to.active_element.send_keys(Keys.ENTER)
        except StaleElementReferenceException:
            continue
        if "op=" in current_search(duo):
            break
    wait_search(duo, "op=")
    assert "gemm" in current_search(duo)
    screenshot(duo, "after_keys", "timeline")
    assert severe_logs(duo) == []


def test_finding_click_focuses_its_culprit(duo: Any) -> None:
    open_job(duo, f"?job=sample:{SAMPLE}")
    duo.wait_for_element("button.pd-finding", timeout=20)
    duo.find_elements("button.pd-finding")[0].click()  # the top finding: rank 5 computes slowly
    wait_search(duo, "ranks=5")
    duo.wait_for_contains_text("#detail-title", "rank 5, step 1", timeout=20)  # the step its evidence quotes
    pick_baseline(duo, "gpu_llm_fault_free")
    duo.wait_for_contains_text(
        "#compare-summary", "rank 5", timeout=30
    )  # against the fault-free run, rank 5 is the top change
    wait_plot(duo, "compare-ranks")
    assert "base=sample%3Agpu_llm_fault_free" in current_search(duo)
    screenshot(duo, "compare", "compare-summary")
    screenshot(duo, "compare_panel", "compare-ranks")
    assert severe_logs(duo) == []


def pick_baseline(duo: Any, name: str) -> None:
    """Open the baseline dropdown, type part of the job's name and take the match."""
    from selenium.webdriver.common.keys import Keys

    duo.find_element("#baseline-picker").click()
    search = duo.wait_for_element(
        "#baseline-picker input, .dash-dropdown-search, input[type=search]:not(#event-search)", timeout=10
    )
    search.send_keys(name)
    assert wait_option(duo, name), f"no dropdown option holding {name!r}"
    search.send_keys(Keys.ENTER)


def wait_option(duo: Any, text: str, timeout: float = 5) -> bool:
    """Whether an open dropdown came to list only options holding ``text`` (it filters as one types).

    Every option, not any: until the filter has run the full list is still shown, and Enter then takes
    its first option (a CI run picked a SendRecv kernel so, while a gemm was listed further down)."""
    script = (
        "return Array.from(document.querySelectorAll('.dash-dropdown-content [role=option]'))"
        ".map(o => o.textContent.toLowerCase())"
    )  # the open dropdown's options (radio and check items are options in listboxes too)
    deadline = time.time() + timeout
    while time.time() < deadline:
        options = duo.driver.execute_script(script) or []
        if options and all(text.lower() in o for o in options):
            return True
        time.sleep(0.1)
    return False


def test_marey_band_click_selects_the_flow_node(duo: Any) -> None:
    open_job(duo, f"?job=sample:{SAMPLE}&step=1")
    wait_plot(duo, "marey")
    wait_plot(duo, "flow")
    x, y = duo.driver.execute_script(
        """const gd = document.querySelector('#marey .js-plotly-plot');
        const gemm = c => gd.layout.meta.operators[c[0]].includes('gemm');  // a point's operator: its index there
        const t = gd._fullData.find(d => d.hoveron === 'points' && d.name === 'compute' && Array.from(d.customdata).some(gemm));
        const i = Array.from(t.customdata).findIndex(gemm);  // the bars' hover points (typed arrays decoded)
        return [t.x[i], t.y[i]];"""
    )
    click_data_point(duo, "marey", x, y)
    wait_search(duo, "op=")  # a click reaches the selection once no double-click can follow
    deadline = time.time() + 20
    names: list[str] = []
    while time.time() < deadline:
        names = duo.driver.execute_script(
            "return document.querySelector('#flow .js-plotly-plot').data.map(d => d.name)"
        )
        if "selected" in names:
            break
        time.sleep(0.3)
    assert "selected" in names, names
    assert "op=" in current_search(duo)
    screenshot(duo, "flow_selected", "flow")
    screenshot(duo, "marey_selected", "marey")
    assert severe_logs(duo) == []


def test_upload_of_a_sample_folder_parses_and_opens(duo: Any) -> None:
    from paradiag.app.config import SAMPLES_DIR

    duo.driver.get(duo.server_url + "/")
    duo.wait_for_element("#upload-files", timeout=20)
    files = sorted(str(p) for p in (SAMPLES_DIR / "gpu_moe_expert_imbalance").glob("*.json.gz"))
    duo.find_element("#upload-files").send_keys("\n".join(files))
    deadline = time.time() + 60
    while time.time() < deadline and "job=upload" not in current_search(duo):
        time.sleep(0.3)
    assert "job=upload" in current_search(duo), duo.find_element("#upload-message").text
    wait_plot(duo, "heatmap")
    wait_plot(duo, "timeline")
    screenshot(duo, "after_upload")
    assert severe_logs(duo) == []


def test_double_click_on_the_timeline_zooms_out_to_the_whole_step(duo: Any) -> None:
    """W zooms in (the window goes into the link); a double-click on the plot zooms back out to the whole step."""
    from selenium.webdriver.common.action_chains import ActionChains

    open_job(duo, f"?job=sample:{SAMPLE}&step=1")
    settle(duo)
    span = "const r = document.querySelector('#timeline .js-plotly-plot')._fullLayout.xaxis.range; return r[1] - r[0];"
    whole = float(duo.driver.execute_script(span))
    duo.driver.find_element("tag name", "body").send_keys("w")
    wait_search(duo, "t=")
    settle(duo)  # the zoomed figure drawn: no plot lands between the double-click's two clicks
    assert float(duo.driver.execute_script(span)) < whole * 0.6
    pos = duo.driver.execute_script(
        """const gd = document.querySelector('#timeline .js-plotly-plot'); gd.scrollIntoView({block: 'center'});
        const fl = gd._fullLayout, box = gd.getBoundingClientRect();
        return [box.left + fl.xaxis._offset + fl.xaxis._length * 0.5, box.top + fl.yaxis._offset + fl.yaxis._length * 0.5];"""
    )
    actions = ActionChains(duo.driver)
    actions.w3c_actions.pointer_action.move_to_location(int(pos[0]), int(pos[1]))
    actions.w3c_actions.pointer_action.double_click()
    actions.perform()
    deadline = time.time() + 30
    while time.time() < deadline and "t=" in current_search(duo):
        time.sleep(0.1)
    assert "t=" not in current_search(duo)
    settle(duo)
    assert float(duo.driver.execute_script(span)) > whole * 0.9  # the whole step again
    assert severe_logs(duo) == []


def test_question_mark_lists_the_keys_and_the_dark_theme_is_remembered(duo: Any) -> None:
    from selenium.webdriver.common.keys import Keys

    open_job(duo, f"?job=sample:{SAMPLE}")
    settle(duo)
    body = duo.driver.find_element("tag name", "body")
    body.send_keys("?")
    help_box = duo.wait_for_element("#pd-keys-help", timeout=10)
    assert (
        help_box.is_displayed()
        and "zoom in around the centre" in help_box.text
        and "double-click" in help_box.text
    )
    screenshot(duo, "keys_help")
    body.send_keys(Keys.ESCAPE)
    assert not help_box.is_displayed()
    assert "How to read this page" in duo.find_element("#guide").text
    duo.find_element("#theme-toggle").click()
    paper = "return document.querySelector('#heatmap .js-plotly-plot')._fullLayout.paper_bgcolor"
    deadline = time.time() + 20
    while time.time() < deadline and duo.driver.execute_script(paper) == "#fff":
        time.sleep(0.1)
    assert duo.driver.execute_script("return document.documentElement.dataset.theme") == "dark"
    assert duo.driver.execute_script(paper) != "#fff"
    open_job(duo, f"?job=sample:{SAMPLE}")  # a new page keeps the theme, and draws its graphs dark
    settle(duo)
    assert duo.driver.execute_script("return document.documentElement.dataset.theme") == "dark"
    assert duo.driver.execute_script(paper) != "#fff"
    screenshot(duo, "dark_theme")
    duo.find_element("#theme-toggle").click()
    assert duo.driver.execute_script("return document.documentElement.dataset.theme") == "light"
    assert severe_logs(duo) == []
