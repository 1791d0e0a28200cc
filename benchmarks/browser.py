"""Benchmark: the dashboard as a user meets it, in headless Chromium, on one or more job folders.

    python benchmarks/browser.py --job /work/jobs/j64 --job /work/jobs/j256 [--repeat 3] [--cache DIR] [--shots DIR] [-v] [--hog 2]

For each job it starts ``paradiag serve JOB`` (which parses and warms the aggregates before it listens; that
one-off cost is printed apart), opens the page and measures, in the page's own clock:

* first meaningful paint: the summary facts and the heatmap drawn (budget 2 s);
* the page complete: every graph drawn, no callback in flight; the bytes the callbacks sent; the CPU time the
  browser's processes spent from the address typed to then (scripts, callbacks, drawing);
* per interaction (a heatmap cell, a finding, a step in the step chart, the W key on the timeline): from the
  click to the last view it affects redrawn (budget 1 s), how many callbacks ran and the bytes they sent, and the
  CPU time it cost the browser's processes and the server's (which, unlike the clock, a loaded machine hardly
  changes: it tells whether a change made less work).

A hook installed before the page loads counts Dash's callback requests (wrapping ``fetch``; ``-v`` lists each
with the server's time on it, from its ``Server-Timing`` header), stamps every Plotly redraw
(``plotly_afterplot``) and the gesture's first input event, so nothing is polled from outside. Each job is visited
``--repeat`` times, each visit in a fresh browser; the medians are printed with every visit's figure, and the load
average around them (the machine may be shared). Screenshots go to ``--shots``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from paradiag.app import palette

REPO = Path(__file__).resolve().parents[1]
GRAPHS = ("steps", "heatmap", "timeline", "marey", "flow", "comm-matrix", "detail-graph")
# The issue-23 budgets on a quiet machine (a loaded one: 1.5 s per gesture).
FIRST_PAINT_MS, CLICK_MS, BUSY_CLICK_MS = 1500.0, 500.0, 1500.0
GESTURE_TIMEOUT_S = 60.0
HOOK = """
window.__pd = {pending: 0, calls: 0, bytes: 0, lastDone: 0, draws: {}, times: {}, hooked: new Set(), firstPaint: null, log: [], input: null, release: null};
// The gesture's own moment: the first pointer or key event after a reset (not when the driver was asked); for a
// drag, the button's release (the user waits from there).
for (const kind of ['pointerdown', 'mousedown', 'keydown']) {
  window.addEventListener(kind, function () { if (window.__pd.input === null) { window.__pd.input = performance.now(); } }, true);
}
for (const kind of ['pointerup', 'mouseup']) {
  window.addEventListener(kind, function () { window.__pd.release = performance.now(); }, true);
}
const realFetch = window.fetch;
window.fetch = async function (url, opts) {
  const mine = String(url).includes('_dash-update-component');
  const sent = performance.now();
  if (mine) { window.__pd.pending += 1; window.__pd.calls += 1; }
  try {
    const reply = await realFetch(url, opts);
    if (mine) {
      const text = await reply.clone().text();
      const server = /dur=([0-9.]+)/.exec(reply.headers.get('Server-Timing') || '');
      window.__pd.bytes += text.length;
      window.__pd.log.push([JSON.parse(opts.body).output.slice(0, 60), text.length, Math.round(sent), Math.round(performance.now()), server ? Number(server[1]) : -1]);
    }
    return reply;
  } finally {
    if (mine) { window.__pd.pending -= 1; window.__pd.lastDone = performance.now(); }
  }
};
setInterval(function () {
  for (const id of GRAPH_IDS) {
    const gd = document.querySelector('#' + id + ' .js-plotly-plot');
    if (gd && gd.on && !window.__pd.hooked.has(gd)) {
      window.__pd.hooked.add(gd);
      if (gd.data && gd.data.length) { window.__pd.draws[id] = performance.now(); }
      gd.on('plotly_afterplot', function () { window.__pd.draws[id] = performance.now(); window.__pd.times[id] = (window.__pd.times[id] || 0) + 1; });
    }
  }
  const facts = document.querySelector('#summary-facts .pd-fact');
  const heat = document.querySelector('#heatmap .js-plotly-plot');
  if (window.__pd.firstPaint === null && facts && heat && heat.data && heat.data.length) { window.__pd.firstPaint = performance.now(); }
}, 10);
""".replace("GRAPH_IDS", json.dumps(list(GRAPHS)))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_server(job: Path, cache: Path) -> tuple[subprocess.Popen[bytes], int, float]:
    port = free_port()
    env = {
        **os.environ,
        "PARADIAG_CACHE_DIR": str(cache / "jobs"),
        "PARADIAG_APP_CACHE_DIR": str(cache / "app"),
    }
    t = time.perf_counter()
    proc = subprocess.Popen(
        [str(Path(sys.executable).parent / "paradiag"), "serve", str(job), "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    while True:
        if proc.poll() is not None:
            raise SystemExit(
                f"paradiag serve {job} stopped: {proc.stderr.read().decode()[-2000:] if proc.stderr else ''}"
            )
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return proc, port, time.perf_counter() - t
        time.sleep(0.2)


def browser() -> Any:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = (
        os.environ.get("DASH_TEST_CHROMEPATH") or shutil.which("chromium") or "/usr/bin/chromium"
    )
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1600,2400"):
        options.add_argument(flag)
    driver = webdriver.Chrome(
        service=Service(shutil.which("chromedriver") or "/usr/bin/chromedriver"), options=options
    )
    driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": HOOK})
    driver.execute_cdp_cmd("Performance.enable", {})
    return driver


class Unanswered(Exception):
    """A gesture after which no callback was sent, or nothing drawn, within the time allowed."""


def settle(
    driver: Any, since: float, timeout: float = 300.0, quiet_ms: float = 400.0, views: tuple[str, ...] = ()
) -> dict[str, Any]:
    """Wait until ``views`` have been drawn, no callback is in flight and nothing was redrawn for ``quiet_ms``;
    the page's counters. (A new page can be quiet for longer while it lays itself out between two callbacks.)
    Raises ``Unanswered`` when it does not happen within ``timeout``."""
    end = time.time() + timeout
    from selenium.common.exceptions import TimeoutException

    state: dict[str, Any] = {}
    while time.time() < end:
        try:
            state = driver.execute_script(
                "const p = window.__pd; const k = window.__pdPlots || {}; return {pending: p.pending + (k.keptNow || 0), calls: p.calls, bytes: p.bytes, lastDone: p.lastDone, draws: p.draws, times: p.times, kept: Object.assign({}, k.kept || {}), firstPaint: p.firstPaint, now: performance.now()};"
            )
        except (
            TimeoutException
        ):  # the page's main thread busy for longer than the driver's script timeout (a loaded machine)
            continue
        last = max([state["lastDone"], *state["draws"].values()])
        drawn = all(v in state["draws"] for v in views)
        if (
            drawn
            and state["pending"] == 0
            and state["calls"]
            and state["now"] - last > quiet_ms
            and last > since
        ):
            return state
        time.sleep(0.05)
    raise Unanswered(f"the page did not settle within {timeout:.0f} s: {state}")


def reset(driver: Any) -> float:
    return float(
        driver.execute_script(
            "if (window.__pdPlots) { window.__pdPlots.kept = {}; } window.__pd.calls = 0; window.__pd.bytes = 0; window.__pd.draws = {}; window.__pd.times = {}; window.__pd.log = []; window.__pd.input = null; window.__pd.release = null; window.__pd.resetAt = performance.now(); return window.__pd.resetAt;"
        )
    )


def gesture_at(driver: Any, since: float, drag: bool = False) -> float:
    """When the page received the gesture's first pointer or key event (a drag: its last button release;
    ``since`` if it saw none): the time the driver takes to find where to click, or to move the mouse across a
    drag, is not the user's wait."""
    at = driver.execute_script("return arguments[0] ? window.__pd.release : window.__pd.input;", drag)
    return float(at) if at is not None else since


def click_at(driver: Any, graph_id: str, x: Any, y: Any) -> None:
    from selenium.webdriver.common.action_chains import ActionChains

    pos = driver.execute_script(
        """const gd = document.querySelector('#' + arguments[0] + ' .js-plotly-plot');
        gd.scrollIntoView({block: 'center'});
        const fl = gd._fullLayout, xa = fl.xaxis, ya = fl.yaxis, box = gd.getBoundingClientRect();
        const xv = xa.type === 'category' ? xa.d2l(String(arguments[1])) : arguments[1];
        const yv = ya.type === 'category' ? ya.d2l(String(arguments[2])) : arguments[2];
        return [box.left + xa._offset + xa.l2p(xv), box.top + ya._offset + ya.l2p(yv)];""",
        graph_id,
        x,
        y,
    )
    actions = ActionChains(driver)
    actions.w3c_actions.pointer_action.move_to_location(int(pos[0]), int(pos[1]))
    actions.w3c_actions.pointer_action.click()
    actions.perform()


def plot_point(driver: Any, graph_id: str, fx: float, fy: float) -> tuple[int, int]:
    """The page coordinates of the point at fractions (fx, fy) of a graph's plotting area (scrolled into view)."""
    pos = driver.execute_script(
        """const gd = document.querySelector('#' + arguments[0] + ' .js-plotly-plot');
        gd.scrollIntoView({block: 'center'});
        const fl = gd._fullLayout, xa = fl.xaxis, ya = fl.yaxis, box = gd.getBoundingClientRect();
        return [box.left + xa._offset + xa._length * arguments[1], box.top + ya._offset + ya._length * arguments[2]];""",
        graph_id,
        fx,
        fy,
    )
    return int(pos[0]), int(pos[1])


def drag(driver: Any, graph_id: str, fx0: float, fx1: float, fy: float = 0.5) -> None:
    """A zoom drag across a graph from fraction ``fx0`` to ``fx1`` of its width (plotly's zoom box)."""
    from selenium.webdriver.common.action_chains import ActionChains

    (x0, y), (x1, _) = plot_point(driver, graph_id, fx0, fy), plot_point(driver, graph_id, fx1, fy)
    actions = ActionChains(driver, duration=50)
    pointer = actions.w3c_actions.pointer_action
    pointer.move_to_location(x0, y)
    pointer.pointer_down()
    for k in range(1, 6):
        pointer.move_to_location(x0 + (x1 - x0) * k // 5, y)
    pointer.pointer_up()
    actions.perform()


def double_click(driver: Any, graph_id: str) -> None:
    from selenium.webdriver.common.action_chains import ActionChains

    x, y = plot_point(driver, graph_id, 0.5, 0.5)
    actions = ActionChains(driver, duration=10)
    actions.w3c_actions.pointer_action.move_to_location(x, y)
    actions.w3c_actions.pointer_action.double_click()
    actions.perform()


def comm_cell(driver: Any) -> tuple[Any, Any, bool]:
    """The communication matrix's hottest cell (x, y) and whether it is a link between two ranks (else a block
    that a click opens)."""
    x, y, ranks = driver.execute_script(
        """const t = document.querySelector('#comm-matrix .js-plotly-plot')._fullData[0];
        let best = [-Infinity, 0, 0];
        t.z.forEach((row, i) => row.forEach((v, j) => { if (v !== null && v > best[0]) { best = [v, i, j]; } }));
        const x = t.x[best[2]], y = t.y[best[1]];
        return [x, y, /^[0-9]+$/.test(String(x)) && /^[0-9]+$/.test(String(y))];"""
    )
    return x, y, bool(ranks)


Gesture = tuple[str, Any, bool]  # label, action, whether the wait starts at the button's release (a drag)


def interactions(driver: Any) -> list[Gesture]:
    """(label, action, drag) triples: each action performs one user gesture. The communication matrix is opened
    block by block (not measured) down to its ranks before its link is clicked."""

    def heatmap_cell() -> None:
        steps = driver.execute_script(
            "return document.querySelector('#heatmap .js-plotly-plot').data[0].x.length"
        )
        click_at(driver, "heatmap", str(steps - 1 if steps > 1 else 0), 1)

    def finding() -> None:
        buttons = driver.find_elements("css selector", "button.pd-finding")
        (buttons[1] if len(buttons) > 1 else buttons[0]).click()

    def step_point() -> None:
        """The first step other than the selected one (its point on the median line)."""
        x, y = driver.execute_script(
            """const t = document.querySelector('#steps .js-plotly-plot')._fullData[0];
            const now = Number(new URLSearchParams(window.location.search).get('step'));
            const i = Array.from(t.x).findIndex(v => Number(v) !== now);
            return [t.x[i], t.y[i]];"""
        )
        click_at(driver, "steps", x, y)

    def zoom_key() -> None:
        driver.execute_script(
            "document.querySelector('#timeline').scrollIntoView({block: 'center'}); document.activeElement && document.activeElement.blur();"
        )
        driver.find_element("tag name", "body").send_keys("w")

    def comm_link() -> None:
        for _ in range(4):
            x, y, ranks = comm_cell(driver)
            if ranks:
                break
            since = reset(
                driver
            )  # before the click: its callback can be sent and answered before a reset after it
            click_at(driver, "comm-matrix", x, y)  # opens the block
            settle(driver, since)
        reset(driver)
        click_at(driver, "comm-matrix", x, y)

    def marey_band() -> None:
        """A bar's hover point in the middle of the graph's window (a click selects its instance)."""
        x, y = driver.execute_script(
            """const gd = document.querySelector('#marey .js-plotly-plot');
            const [a, b] = gd._fullLayout.xaxis.range.map(Number);
            // the first trace of hover points with one in the window's middle (a zoomed window may hold none of some)
            for (const t of gd._fullData.filter(d => d.hoveron === 'points' && d.customdata && d.customdata.length)) {
                const inside = Array.from(t.x.keys()).filter(i => t.x[i] > a + (b - a) * 0.2 && t.x[i] < a + (b - a) * 0.8);
                if (inside.length) { const i = inside[Math.floor(inside.length / 2)]; return [t.x[i], t.y[i]]; }
            }
            throw new Error('no Marey bar in the middle of the window');"""
        )
        click_at(driver, "marey", x, y)

    def marey_back() -> None:
        driver.execute_script("document.getElementById('marey-back').scrollIntoView({block: 'center'});")
        driver.find_element("id", "marey-back").click()

    return [
        ("heatmap cell", heatmap_cell, False),
        ("finding", finding, False),
        ("step chart", step_point, False),
        ("timeline W key", zoom_key, False),
        ("timeline double-click", lambda: double_click(driver, "timeline"), True),
        ("timeline drag", lambda: drag(driver, "timeline", 0.3, 0.5), True),
        ("timeline double-click again", lambda: double_click(driver, "timeline"), True),
        ("marey drag", lambda: drag(driver, "marey", 0.3, 0.5), True),
        ("marey back", marey_back, False),
        ("marey same drag again", lambda: drag(driver, "marey", 0.3, 0.5), True),
        ("marey band", marey_band, False),
        ("comm-matrix link", comm_link, False),
    ]


def log(driver: Any, verbose: bool, since: float) -> list[tuple[str, float, int, int, float]]:
    """With --verbose, note rows: each callback of the last gesture (ms after ``since``): when it was sent, the
    server's time on it (its Server-Timing header), when its reply had arrived, and its bytes."""
    if not verbose:
        return []
    lines = [f"    {'sent':>6s} {'server':>6s} {'done':>6s} {'KB':>7s}  callback (ms after the gesture)"]
    for output, nbytes, sent, done, server in sorted(
        driver.execute_script("return window.__pd.log"), key=lambda e: e[2]
    ):
        lines.append(
            f"    {sent - since:6.0f} {server:6.0f} {done - since:6.0f} {nbytes / 1024:7.1f}  {output}"
        )
    return [(line, float("nan"), 0, 0, 0.0) for line in lines]


def first_screen(driver: Any) -> str:
    """What the first screen shows, read from the page: the heatmap rows outlined red and the timeline's first row."""
    outlined, first = driver.execute_script(
        """const heat = document.querySelector('#heatmap .js-plotly-plot');
        const labels = heat.layout.yaxis.ticktext || [];
        const red = (heat.layout.shapes || []).filter(s => s.type === 'rect' && s.line.color === arguments[0])
            .map(s => labels[Math.round((s.y0 + s.y1) / 2)]);
        const tl = document.querySelector('#timeline .js-plotly-plot');
        return [red, ((tl && tl.layout.yaxis.ticktext) || [''])[0]];""",
        palette.CULPRIT,
    )
    return f"heatmap outlines {', '.join(outlined) or 'nothing'}; timeline starts with {first.replace('<b>', '').replace('</b>', '')}"


def redraws(state: dict[str, Any], since: float) -> str:
    """When each view was last redrawn, ms after ``since``, first to last (``x2``: it was drawn twice)."""

    def times(view: str) -> str:
        n = state["times"].get(view, 1)
        return f" x{n}" if n > 1 else ""

    return ", ".join(
        f"{view} {at - since:.0f}{times(view)}"
        for view, at in sorted(state["draws"].items(), key=lambda kv: kv[1])
        if at > since
    )


def redraw_counts(state: dict[str, Any]) -> str:
    """How many times each graph was drawn (its plotly_afterplot events), and in all."""
    counts = {view: n for view, n in sorted(state["times"].items()) if n}
    return (
        ", ".join(f"{view} {n}" for view, n in counts.items()) + f" (total {sum(counts.values())})"
        if counts
        else "nothing redrawn"
    )


Row = tuple[str, float, int, int, float]  # label, ms (NaN: a note line), calls, bytes, budget (0: none)


def cpu_ms(pids: list[int]) -> float:
    """CPU time (user + system, ms) the processes have used so far (Linux ``/proc``; NaN elsewhere). Unlike the
    page's clock it hardly moves with the machine's load: it says whether a change made less work."""
    total = 0.0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total * 1000 / os.sysconf("SC_CLK_TCK") if Path("/proc").is_dir() else float("nan")


def descendants(pid: int) -> list[int]:
    """``pid``'s processes, children and theirs (the browser's: chromedriver, chromium, its renderers, GPU)."""
    parent: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parent[int(stat.parent.name)] = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo += [c for c, pp in parent.items() if pp == p]
    return out


def first_paint_cpu(driver: Any, timeout: float = 300.0) -> float:
    """The CPU time (ms) of the page's main thread, where scripts, plotly and layout run, until the first
    meaningful paint (read within ~20 ms of it): the part of the first page's work the user waits for. Chromium
    counts it (``Performance.getMetrics``: ThreadTime); unlike the clock, the machine's load hardly moves it."""
    end = time.time() + timeout
    while driver.execute_script("return window.__pd.firstPaint") is None and time.time() < end:
        time.sleep(0.02)
    metrics = driver.execute_cdp_cmd("Performance.getMetrics", {})["metrics"]
    return 1000 * next((m["value"] for m in metrics if m["name"] == "ThreadTime"), float("nan"))


def visit(
    url: str, name: str, shots: Path, verbose: bool, server: int, click_ms: float = CLICK_MS
) -> list[Row]:
    """One visit in a fresh browser: the first page, then each gesture (with the CPU time it cost the browser and
    the server)."""
    driver = browser()
    try:
        before = cpu_ms(descendants(driver.service.process.pid))
        driver.get(url)
        painted = first_paint_cpu(driver)
        state = settle(driver, 0.0, views=GRAPHS)
        chrome = descendants(driver.service.process.pid)
        rows: list[Row] = [
            (
                "first meaningful paint (summary + heatmap)",
                state["firstPaint"] or float("nan"),
                0,
                0,
                FIRST_PAINT_MS,
            ),
            ("    CPU time of the page's main thread until then (ms)", painted, 0, 0, 0.0),
            (
                "first page complete (every view)",
                max(state["draws"].values()),
                state["calls"],
                state["bytes"],
                0.0,
            ),
            ("    CPU time of the browser (ms)", cpu_ms(chrome) - before, 0, 0, 0.0),
            ("    drawn at: " + redraws(state, 0.0), float("nan"), 0, 0, 0.0),
            ("    first screen: " + first_screen(driver), float("nan"), 0, 0, 0.0),
        ]
        driver.save_screenshot(str(shots / f"{name}_first_page.png"))
        rows += log(driver, verbose, 0.0)
        for label, act, dragged in interactions(driver):
            t0 = reset(driver)
            cpu = (cpu_ms(chrome), cpu_ms([server]))
            try:
                act()
            except (
                Exception
            ) as e:  # a gesture the page did not let the driver make: noted, the others still run
                rows.append(
                    (
                        f"click: {label}: COULD NOT BE MADE ({type(e).__name__}: {str(e).splitlines()[0][:120]})",
                        float("nan"),
                        0,
                        0,
                        0.0,
                    )
                )
                continue
            t0 = (
                float(driver.execute_script("return window.__pd.resetAt;"))
                if label.startswith("comm")
                else t0
            )
            try:
                state = settle(driver, t0, timeout=GESTURE_TIMEOUT_S)
            except Unanswered:
                rows.append(
                    (
                        f"click: {label}: NO ANSWER (no callback or no redraw within {GESTURE_TIMEOUT_S:.0f} s)",
                        float("nan"),
                        0,
                        0,
                        0.0,
                    )
                )
                continue
            cpu = (cpu_ms(chrome) - cpu[0], cpu_ms([server]) - cpu[1])
            t0 = gesture_at(driver, t0, dragged)
            last = max([state["lastDone"], *state["draws"].values()]) - t0
            in_sight = [at for view, at in state["draws"].items() if view not in state["kept"]]
            rows.append(
                (
                    f"click: {label} -> last view in sight redrawn",
                    max([state["lastDone"], *in_sight]) - t0,
                    state["calls"],
                    state["bytes"],
                    click_ms,
                )
            )
            rows.append((f"    {label}: every view redrawn (out of sight: when idle)", last, 0, 0, 0.0))
            if state["kept"]:
                rows.append(
                    (
                        "    out of sight, drawn when idle: " + ", ".join(sorted(state["kept"])),
                        float("nan"),
                        0,
                        0,
                        0.0,
                    )
                )
            rows.append(("    redrawn after: " + redraws(state, t0), float("nan"), 0, 0, 0.0))
            rows.append(("    redraws per graph: " + redraw_counts(state), float("nan"), 0, 0, 0.0))
            rows += [
                ("    CPU time of the browser (ms)", cpu[0], 0, 0, 0.0),
                ("    CPU time of the server (ms)", cpu[1], 0, 0, 0.0),
            ]
            driver.save_screenshot(str(shots / f"{name}_{label.replace(' ', '_')}.png"))
            rows += log(driver, verbose, t0)
        return rows
    finally:
        driver.quit()


def measure(
    job: Path, cache: Path, shots: Path, repeat: int, verbose: bool, click_ms: float = CLICK_MS
) -> list[Row]:
    """``repeat`` visits on one server: each measure's median (the notes are the last visit's)."""
    proc, port, warm_s = start_server(job, cache)
    try:
        visits = [
            visit(f"http://127.0.0.1:{port}/", job.name, shots, verbose, proc.pid, click_ms)
            for _ in range(repeat)
        ]
    finally:
        proc.terminate()
        proc.wait(timeout=20)
    rows: list[Row] = [("serve: parse + warm (one-off)", warm_s * 1000, 0, 0, 0.0)]
    # Measures are matched by label and occurrence, not by position: each visit has its own number of note lines
    # (with -v, one per callback).
    measured = [[row for row in v if row[1] == row[1]] for v in visits]
    i = 0
    for label, ms, calls, nbytes, budget in visits[-1]:
        if ms == ms:
            each = [m[i][1] for m in measured]
            i += 1
            ms = statistics.median(each)
            if repeat > 1:
                label = f"{label} [{', '.join(f'{x:.0f}' for x in each)}]"
        rows.append((label, ms, calls, nbytes, budget))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--job", type=Path, action="append", required=True, help="a job folder (repeat for several)"
    )
    parser.add_argument(
        "--cache", type=Path, help="where parsed jobs and aggregates go (default: a temporary folder)"
    )
    parser.add_argument("--shots", type=Path, default=REPO / "test-output" / "browser", help="screenshots")
    parser.add_argument(
        "--repeat", type=int, default=3, help="visits per job (fresh browser each); medians are printed"
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="list each callback of each gesture")
    parser.add_argument(
        "--hog",
        type=int,
        default=0,
        help="CPU hogs run beside the measurement (a busy loop each; 2 keeps both cores of a 2-core machine "
        "busy): the budgets become the loaded machine's (1.5 s per gesture)",
    )
    args = parser.parse_args()
    hogs = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"], stdout=subprocess.DEVNULL)
        for _ in range(args.hog)
    ]
    if hogs:
        print(f"{len(hogs)} CPU hogs beside it (budget per gesture {BUSY_CLICK_MS:.0f} ms)")
    try:
        run(args, BUSY_CLICK_MS if hogs else CLICK_MS)
    finally:
        for hog in hogs:
            hog.kill()


def run(args: argparse.Namespace, click_ms: float) -> None:
    """Measure each job of ``args``, printing its rows (``click_ms``: the budget per gesture)."""
    args.shots.mkdir(parents=True, exist_ok=True)
    cache = args.cache or Path(tempfile.mkdtemp(prefix="paradiag-browser-"))
    for job in args.job:
        print(f"\n{job} (load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())})")
        print(
            f"  {'measure (median of ' + str(args.repeat) + ' visits [each])':52s} {'ms':>9s} {'calls':>6s} {'KB':>8s}  budget"
        )
        rows = measure(job, cache, args.shots, args.repeat, args.verbose, click_ms)
        for label, ms, calls, nbytes, budget in rows:
            if ms != ms:  # a note line (NaN): which view came when
                print(f"  {label}")
                continue
            verdict = "" if not budget else ("ok" if ms <= budget else "OVER")
            print(f"  {label:52s} {ms:9.0f} {calls:6d} {nbytes / 1024:8.1f}  {verdict}")
        print(f"  load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
