// Marey's graph and the timeline: a click selects (an instance; opens a fold) at once, and a double-click zooms
// out and takes back what its first click did. window.__pdClicks[graph id] = {pressAt, lastPressAt, resetAt,
// passed}; window.__pdMareyClicks is Marey's.
//
// A click used to wait for plotly's double-click delay (300 ms and a margin) before it was passed on, so that the
// first click of a double-click selected nothing: every single click, by far the more frequent gesture, paid
// 350 ms for it. Now window.__pdPassClick(graph, click, store, before) writes the click into its store at once
// (with set_props, not returned by the clientside callback that heard it: that callback's outputs include
// nothing downstream of the graph's own figure) and keeps `before`, what the click changes as it was (Marey: the
// selected operator, stage and instance; the timeline: its folds opened). The zoom out of the double-click
// (`__pdTakeUndo`, read by the zoom forwarder) carries `before` back to whoever applies the zoom: the reducer puts
// the selection's fields back, the timeline its folds. A click pressed as the second half of a double-click is
// not passed on.
//
// Who tells a double-click: this file, from the presses themselves (capture phase, listened to from the page's
// load; timed by the events' own time stamps). Plotly tells one by the time between its own handlers of the two
// presses (300 ms), and the browser fires dblclick only when both presses hit the same element; the first click's
// answer (an outline drawn, a fold opened) redraws the plot between the two presses and defeats both. Two presses
// on the plot area of one graph within DOUBLE_MS and a few pixels ask for the zoom out as the graph's
// relayoutData; the zoom forwarder drops a second zoom-out following within a second (plotly's or the browser's
// telling of the same double-click: FORWARD_ZOOM).
(function () {
    const DOUBLE_MS = 500;  // two presses this close are a double-click (desktops default to 400-500 ms; Chrome 500)
    const NEAR_PX = 8;
    const graphs = {};
    for (const id of ['marey', 'timeline']) {
        graphs[id] = {pressAt: 0, lastPressAt: 0, resetAt: 0, x: 0, y: 0, passed: null};
    }
    window.__pdClicks = graphs;
    window.__pdDoubleMs = DOUBLE_MS;
    window.__pdMareyClicks = graphs.marey;
    const host = e => e.target && e.target.closest && e.target.closest('#marey, #timeline');
    const onPlot = e => e.target.classList && e.target.classList.contains('nsewdrag');  // not a legend or the modebar
    const zoomOut = function (h) {
        const times = graphs[h.id];
        times.resetAt = times.pressAt;
        if (window.dash_clientside && window.dash_clientside.set_props) {
            window.dash_clientside.set_props(h.id, {relayoutData: {'xaxis.autorange': true}});
        }
    };
    document.addEventListener('mousedown', e => {
        const h = host(e);
        if (!h || e.button !== 0) { return; }
        const times = graphs[h.id];
        const now = performance.timeOrigin + e.timeStamp;  // when pressed, not when this runs (later when busy)
        const near = Math.abs(e.clientX - times.x) <= NEAR_PX && Math.abs(e.clientY - times.y) <= NEAR_PX;
        const second = now - times.pressAt < DOUBLE_MS && near && times.resetAt !== times.pressAt;
        Object.assign(times, {lastPressAt: times.pressAt, pressAt: now, x: e.clientX, y: e.clientY});
        if (second && onPlot(e)) { zoomOut(h); }
    }, true);
    document.addEventListener('dblclick', e => {
        const h = host(e);
        if (h && onPlot(e) && graphs[h.id].resetAt !== graphs[h.id].pressAt) { zoomOut(h); }
    }, true);
    window.__pdPassClick = function (graph, click, store, before) {
        const times = graphs[graph];
        const now = Date.now();
        // A click told without a press of its own (a script's) counts from now.
        const pressed = times.pressAt && now - times.pressAt < 2000 ? times.pressAt : now;
        if (pressed === times.resetAt) { return window.dash_clientside.no_update; }  // a double-click's second
        const series = times.passed && pressed - times.passed.pressed < DOUBLE_MS;
        times.passed = {pressed: pressed, before: series ? times.passed.before : before};
        window.dash_clientside.set_props(store, {data: Object.assign({}, click, {'paradiag.at': now})});
        return window.dash_clientside.no_update;
    };
    // What a zoom out on `graph` takes back: the `before` of a click pressed as the first half of its
    // double-click, else null. Taken once.
    window.__pdTakeUndo = function (graph) {
        const times = graphs[graph];
        const passed = times && times.passed;
        if (!passed) { return null; }
        times.passed = null;
        // A double-click told by its presses (here or by the browser's dblclick, whose interval may differ from
        // DOUBLE_MS) or by plotly (its presses' handlers within 300 ms).
        const doubled = times.resetAt === times.pressAt || times.pressAt - times.lastPressAt < DOUBLE_MS;
        return doubled && passed.pressed >= times.lastPressAt ? passed.before : null;
    };
})();
