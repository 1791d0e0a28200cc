/* A panel's SVG and PNG buttons (paradiag.app.layouts.common.export_bar): the figure of the graph the button names
   (data-pd-image) saved by plotly as drawn, legend included, at its size on screen; PNG at twice its pixels, for
   a sharp image in a document. The file is named after the graph and the page's job and step. */
(function () {
  function fileName(graph) {
    const q = new URLSearchParams(window.location.search);
    const job = (q.get("job") || "job").replace(/^[^:]*:/, "").replace(/[^A-Za-z0-9_.-]+/g, "_");
    return job + "-" + graph + (q.get("step") ? "-step" + q.get("step") : "");
  }

  document.addEventListener("click", function (e) {
    const button = e.target && e.target.closest && e.target.closest("[data-pd-image]");
    if (!button || !window.Plotly) { return; }
    const graph = button.getAttribute("data-pd-image");
    const gd = document.querySelector("#" + graph + " .js-plotly-plot");
    if (!gd || !gd._fullLayout) { return; }
    const format = button.getAttribute("data-format") || "svg";
    const kept = window.__pdDrawKept ? window.__pdDrawKept(gd) : Promise.resolve(gd);  // a figure not drawn yet: first
    Promise.resolve(kept).then(function () {
      window.Plotly.downloadImage(gd, {format: format, filename: fileName(graph), width: gd._fullLayout.width, height: gd._fullLayout.height, scale: format === "png" ? 2 : 1});
    });
  });
})();
