/* dcc.Graph lays a plot out again (Plotly.Plots.resize, a relayout of the whole plot) whenever its box changes
   size, which a new figure of another height does by itself: the plot is drawn at its new size, then drawn again
   for it. A resize that finds the plot already as wide and as high as its box is skipped. */
(function () {
  function wrap() {
    const plots = window.Plotly && window.Plotly.Plots;
    if (!plots) { setTimeout(wrap, 100); return; }
    if (plots._pdSkipsSame) { return; }
    const resize = plots.resize;
    plots._pdSkipsSame = true;
    plots.resize = function (gd) {
      const el = typeof gd === "string" ? document.getElementById(gd) : gd;
      const full = el && el._fullLayout;
      if (full && Math.round(full.width) === el.clientWidth && Math.round(full.height) === el.clientHeight) {
        return Promise.resolve(el);
      }
      return resize.apply(this, arguments);
    };
  }
  wrap();
})();
