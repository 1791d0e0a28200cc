"""The page under its own Content-Security-Policy (no 'unsafe-eval') in headless Chromium: it loads, every view
draws its figure, the views answer a click, and the browser reports no policy violation (the page's
``securitypolicyviolation`` events and the console)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.test_app_support import click_data_point, fresh_app, settle, severe_logs, wait_plot

pytestmark = [
    pytest.mark.browser,
    pytest.mark.slow,
    pytest.mark.filterwarnings("ignore:HTTPResponse.getheader:DeprecationWarning"),
]
SAMPLE = "gpu_llm_slow_rank"
VIEWS = (
    "heatmap",
    "steps",
    "timeline",
    "marey",
    "detail-graph",
    "comm-matrix",
    "flow",
)
# Installed before any of the page's scripts runs: every violation the browser reports is kept.
RECORD = "window.__cspViolations = []; document.addEventListener('securitypolicyviolation', e => window.__cspViolations.push([e.violatedDirective, e.blockedURI, e.sourceFile, e.lineNumber].join(' ')));"


@pytest.fixture(scope="module")
def duo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    yield from fresh_app(tmp_path_factory)


def test_every_view_draws_under_the_policy_without_unsafe_eval(duo: Any) -> None:
    import requests

    policy = requests.get(duo.server_url + "/", timeout=30).headers["Content-Security-Policy"]
    assert "'unsafe-eval'" not in policy and "script-src 'self'" in policy
    duo.driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": RECORD})
    duo.driver.get(duo.server_url + f"/?job=sample:{SAMPLE}")
    for graph_id in VIEWS:
        wait_plot(duo, graph_id)
    click_data_point(duo, "heatmap", 2, 0)  # a click on a cell: the selection and every view follow
    duo.wait_for_contains_text("#selection-text", "step 2", timeout=30)
    for graph_id in VIEWS:
        wait_plot(duo, graph_id)
    settle(duo)  # no request left in flight when the server stops
    violations = duo.driver.execute_script("return window.__cspViolations")
    assert violations == [], violations
    logs = severe_logs(duo)
    assert not [
        e
        for e in logs
        if "Content Security Policy" in str(e.get("message")) or "unsafe-eval" in str(e.get("message"))
    ], logs
    assert logs == []


def test_a_link_lists_its_instances_in_one_markdown_table_under_the_policy(duo: Any) -> None:
    """A click on a link between two ranks: its instances in a table (one dcc.Markdown, its script loaded under
    the policy), the link named above it, and the page's other views answering as before."""
    duo.driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": RECORD})
    duo.driver.get(duo.server_url + f"/?job=sample:{SAMPLE}")
    wait_plot(duo, "comm-matrix")
    settle(duo)
    x, row, y = duo.driver.execute_script(
        """const t = document.querySelector('#comm-matrix .js-plotly-plot')._fullData[0];
        for (let i = 0; i < t.z.length; i++) { for (let j = 0; j < t.z[i].length; j++) {
            if (t.z[i][j] !== null && String(t.x[j]) !== String(t.y[i])) { return [t.x[j], i, t.y[i]]; } } }
        return [null, null, null];"""
    )
    assert x is not None, "no link between two ranks in the sample's matrix"
    click_data_point(duo, "comm-matrix", x, row)
    duo.wait_for_element("#comm-instances table tbody tr", timeout=30)
    settle(duo)
    text = duo.driver.find_element("id", "comm-instances").text
    assert text.startswith(f"link {y} → {x}: slowest instances first"), text
    head = [th.text for th in duo.driver.find_elements("css selector", "#comm-instances table th")]
    assert head == ["collective", "group", "step", "transfer ms", "wait ms", "MB"]
    rows = duo.driver.find_elements("css selector", "#comm-instances table tbody tr")
    assert rows and all(len(r.find_elements("css selector", "td")) == 6 for r in rows)
    assert duo.driver.execute_script("return window.__cspViolations") == []
    assert severe_logs(duo) == []
