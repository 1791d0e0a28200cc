/* Keyboard on the job page. W/S or up/down zoom the timeline in and out around its centre, A/D or left/right pan
   it by a fifth of its width. The new window goes to the server as the timeline's relayoutData (as a drag zoom
   does), which answers with the intervals of that window: the timeline is not zoomed here first, since that drew
   it twice more (the zoom, then plotly's re-plot after it) only to be replaced by the new figure; a key pressed
   before the figure arrived counts from the window asked for. "/" puts the cursor in the operator search, whose
   pick highlights the operator in every view. Keys typed into a field are left alone. */
(function () {
  const ZOOM = {w: 0.5, arrowup: 0.5, s: 2, arrowdown: 2};
  const PAN = {a: -0.2, arrowleft: -0.2, d: 0.2, arrowright: 0.2};
  const TIMELINE = "timeline";  // the graph's id (paradiag.app.ids.TIMELINE)

  function typing(target) {
    const tag = (target && target.tagName) || "";
    return tag === "INPUT" || tag === "TEXTAREA" || tag === "SELECT" || (target && target.isContentEditable);
  }

  function timeline() {
    const gd = document.querySelector("#" + TIMELINE + " .js-plotly-plot");
    if (!gd || !gd._fullLayout || !gd._fullLayout.xaxis) { return null; }
    if (!gd._pdAsked) {  // forget the window asked for once a figure is drawn or the user zooms by hand
      gd._pdAsked = true;
      const drawn = function () { gd._pdTarget = null; };
      gd.on("plotly_afterplot", drawn);
      gd.on("plotly_relayout", drawn);
    }
    return gd;
  }

  function zoomTo(gd, lo, hi) {
    gd._pdTarget = [lo, hi];
    window.dash_clientside.set_props(TIMELINE, {relayoutData: {"xaxis.range[0]": lo, "xaxis.range[1]": hi}});
  }

  document.addEventListener("keydown", function (e) {
    if (e.ctrlKey || e.metaKey || e.altKey || typing(e.target)) { return; }
    const key = e.key.toLowerCase();
    if (key === "/") {
      const search = document.getElementById("op-search");
      if (!search) { return; }
      e.preventDefault();
      // The dropdown's search field exists only while it is open: open it, then put the cursor there.
      (search.querySelector("button, [role=combobox]") || search).click();
      let tries = 20;  // the field appears once the dropdown has rendered: look for it for up to a second
      const focus = function () {
        const box = document.querySelector(".dash-dropdown-search") || search.querySelector("input");
        if (box) { box.focus(); } else if (--tries > 0) { setTimeout(focus, 50); }
      };
      setTimeout(focus, 50);
      return;
    }
    const gd = (key in ZOOM || key in PAN) ? timeline() : null;
    if (!gd) { return; }
    e.preventDefault();
    const [a, b] = gd._pdTarget || gd._fullLayout.xaxis.range.map(Number);
    const width = b - a;
    let lo = a, hi = b;
    if (key in ZOOM) {
      const mid = (a + b) / 2;
      lo = mid - width * ZOOM[key] / 2;
      hi = mid + width * ZOOM[key] / 2;
    } else {
      lo = a + width * PAN[key];
      hi = b + width * PAN[key];
    }
    zoomTo(gd, lo, hi);
  });
})();
