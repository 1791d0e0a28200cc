"""In headless Chromium: the page writes out the hover text sent once per name, a view's CSV and PNG buttons
save files, and the timeline's event search lists matches whose link selects the event's rank and window."""

from __future__ import annotations

import csv
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from paradiag.app.figures.common import short_name
from tests.test_app_support import fresh_app, settle, wait_plot

pytestmark = [
    pytest.mark.browser,
    pytest.mark.slow,
    pytest.mark.filterwarnings("ignore:HTTPResponse.getheader:DeprecationWarning"),
]
SAMPLE = "gpu_llm_slow_rank"


@pytest.fixture(scope="module")
def duo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    yield from fresh_app(tmp_path_factory)


def _saved(folder: Path, suffix: str, timeout: float = 30) -> Path:
    """The file the browser finished saving into ``folder`` (its download, not a partial one)."""
    end = time.time() + timeout
    while time.time() < end:
        done = [p for p in folder.glob(f"*{suffix}") if p.stat().st_size > 0]
        if done:
            return done[0]
        time.sleep(0.1)
    raise AssertionError(f"no {suffix} file saved in {timeout} s: {sorted(p.name for p in folder.iterdir())}")


def test_exports_hover_text_and_event_search(duo: Any, tmp_path: Path) -> None:
    duo.driver.execute_cdp_cmd(
        "Browser.setDownloadBehavior", {"behavior": "allow", "downloadPath": str(tmp_path)}
    )
    duo.driver.get(duo.server_url + f"/?job=sample:{SAMPLE}")
    for graph in ("timeline", "marey", "detail-graph"):
        wait_plot(duo, graph)
    settle(duo)
    # the Marey points' text, sent as names and indices, is written out per point before plotly draws
    texts = duo.driver.execute_script(
        """const gd = document.querySelector('#marey .js-plotly-plot');
        return gd.data.filter(t => t.meta && t.meta.pdText).map(t => [t.text.length, t.meta.pdText.index[0].length, t.text[0]]);"""
    )
    assert (
        texts and all(n == m and n > 0 for n, m, _ in texts) and all("<br>" in first for _, _, first in texts)
    )

    duo.find_element("#detail-csv").click()
    rows = list(csv.reader(_saved(tmp_path, ".csv").read_text().splitlines()))
    assert (
        rows[0] == ["rank", "step", "operator", "rank_ms", "peer_median_ms", "stands_out"] and len(rows) > 1
    )
    drawn = duo.driver.execute_script(
        "return Array.from(document.querySelector('#detail-graph .js-plotly-plot')._fullData.find(t => t.orientation === 'h').y)"
    )
    short = [short_name(r[2], 500) for r in rows[1:]]  # the bars' operators, by the names the bars show
    # (an operator that stands out from the peers' is drawn "▲ name 5.99x")
    names = [re.sub(r" [0-9.]+x$", "", name.removeprefix("▲ ")).rstrip("…") for name in drawn]
    assert drawn and all(any(s.startswith(name) for s in short) for name in names)

    png = duo.driver.find_element("css selector", "[data-pd-image='marey'][data-format='png']")
    duo.driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", png)
    png.click()
    assert _saved(tmp_path, ".png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    box = duo.find_element("#event-search")
    duo.driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", box)
    box.send_keys("ALLREDUCE\n")  # matches ncclDevKernel_AllReduce_..., case ignored
    duo.wait_for_contains_text("#event-matches", "events of step", timeout=30)
    link = duo.driver.find_element("css selector", "#event-matches a")
    rank = link.text.split(" · ")[0][1:]
    link.click()
    end = time.time() + 30
    while time.time() < end and f"ranks={rank}" not in duo.driver.current_url:
        time.sleep(0.1)
    assert f"ranks={rank}" in duo.driver.current_url and "&t=" in duo.driver.current_url
    duo.wait_for_contains_text("#selection-text", f"ranks {rank} ·", timeout=30)
    settle(duo)  # no request left in flight when the server stops
