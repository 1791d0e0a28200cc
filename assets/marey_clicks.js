// Marey's graph and the timeline: a click selects (an instance; opens a fold) only when no double-click (a zoom
// out) follows it, and a double-click zooms out. Both times are taken from the DOM events (capture phase, listened
// to from the page's load), not from when the click's callback runs: on a busy page that callback can start after
// the double-click has already happened. window.__pdClicks[graph id] = {pressAt, resetAt}; window.__pdMareyClicks
// is Marey's.
//
// Plotly tells a double-click by the time between its own handlers of the two presses (300 ms): on a busy page,
// whose main thread runs them late, a quick double-click was two clicks and nothing zoomed out. The browser's own
// dblclick event (timed from the input itself) on the plot area asks for the zoom out too, as the graph's
// relayoutData (the zoom stores drop a second zoom-out following within a second: FORWARD_ZOOM).
//
// window.__pdPassClick(graph, click, store, delayMs): the click is written into the store (its callbacks then run)
// delayMs after its press, unless the graph was pressed again or double-clicked by then. Written with set_props,
// not returned by the clientside callback that heard the click: a callback that waits holds back every callback
// downstream of its output, and the graph's own figure is one (a double-click's zoom out waited for the deferral
// of its first click: 400 ms). Counted from the press, not from when the callback runs (later on a busy page).
(function () {
    const clicks = {marey: {pressAt: 0, resetAt: 0}, timeline: {pressAt: 0, resetAt: 0}};
    window.__pdClicks = clicks;
    window.__pdMareyClicks = clicks.marey;
    const host = e => e.target && e.target.closest && e.target.closest('#marey, #timeline');
    document.addEventListener('mousedown', e => { const h = host(e); if (h) { clicks[h.id].pressAt = Date.now(); } }, true);
    window.__pdPassClick = function (graph, click, store, delayMs) {
        const times = clicks[graph];
        const before = times.pressAt;  // a click told without a press of its own (a script's) counts from now
        const pressed = before && Date.now() - before < 2000 ? before : Date.now();
        setTimeout(function () {
            if (times.pressAt !== before || times.resetAt >= pressed) { return; }
            window.dash_clientside.set_props(store, {data: click});
        }, Math.max(0, pressed + delayMs - Date.now()));
        return window.dash_clientside.no_update;
    };
    document.addEventListener('dblclick', e => {
        const h = host(e);
        if (!h) { return; }
        clicks[h.id].resetAt = Date.now();
        const onPlot = e.target.classList && e.target.classList.contains('nsewdrag');  // the plot area, not a legend or the modebar
        if (onPlot && window.dash_clientside && window.dash_clientside.set_props) {
            window.dash_clientside.set_props(h.id, {relayoutData: {'xaxis.autorange': true}});
        }
    }, true);
})();
