// Marey's graph: a click selects an instance only when no double-click (Plotly's zoom reset) follows it.
// Both times are taken from the DOM events (capture phase, listened to from the page's load), not from when the
// click's callback runs: on a busy page that callback can start after the double-click has already happened.
(function () {
    const times = {pressAt: 0, resetAt: 0};
    window.__pdMareyClicks = times;
    const inMarey = e => e.target && e.target.closest && e.target.closest('#marey');
    document.addEventListener('mousedown', e => { if (inMarey(e)) { times.pressAt = Date.now(); } }, true);
    document.addEventListener('dblclick', e => { if (inMarey(e)) { times.resetAt = Date.now(); } }, true);
})();
