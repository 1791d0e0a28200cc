// Marey's graph and the timeline: a click selects (an instance; opens a fold) only when no double-click (plotly's
// zoom out) follows it. Both times are taken from the DOM events (capture phase, listened to from the page's load),
// not from when the click's callback runs: on a busy page that callback can start after the double-click has
// already happened. window.__pdClicks[graph id] = {pressAt, resetAt}; window.__pdMareyClicks is Marey's.
(function () {
    const clicks = {marey: {pressAt: 0, resetAt: 0}, timeline: {pressAt: 0, resetAt: 0}};
    window.__pdClicks = clicks;
    window.__pdMareyClicks = clicks.marey;
    const graph = e => {
        const host = e.target && e.target.closest && e.target.closest('#marey, #timeline');
        return host ? clicks[host.id] : null;
    };
    document.addEventListener('mousedown', e => { const t = graph(e); if (t) { t.pressAt = Date.now(); } }, true);
    document.addEventListener('dblclick', e => { const t = graph(e); if (t) { t.resetAt = Date.now(); } }, true);
})();
