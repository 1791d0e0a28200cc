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
(function () {
    const clicks = {marey: {pressAt: 0, resetAt: 0}, timeline: {pressAt: 0, resetAt: 0}};
    window.__pdClicks = clicks;
    window.__pdMareyClicks = clicks.marey;
    const host = e => e.target && e.target.closest && e.target.closest('#marey, #timeline');
    document.addEventListener('mousedown', e => { const h = host(e); if (h) { clicks[h.id].pressAt = Date.now(); } }, true);
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
