/* Keyboard on the job page. W/S or up/down zoom the timeline in and out around its centre, A/D or left/right pan
   it by a fifth of its width (the relayout reaches the server like a drag zoom, which reloads the intervals of
   the new window); "/" puts the cursor in the operator search, whose pick highlights the operator in every view.
   Keys typed into a field are left alone. */
(function () {
  const ZOOM = {w: 0.5, arrowup: 0.5, s: 2, arrowdown: 2};
  const PAN = {a: -0.2, arrowleft: -0.2, d: 0.2, arrowright: 0.2};

  function typing(target) {
    const tag = (target && target.tagName) || "";
    return tag === "INPUT" || tag === "TEXTAREA" || tag === "SELECT" || (target && target.isContentEditable);
  }

  function timeline() {
    const gd = document.querySelector("#timeline .js-plotly-plot");
    return gd && gd._fullLayout && gd._fullLayout.xaxis ? gd : null;
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
    const [a, b] = gd._fullLayout.xaxis.range.map(Number);
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
    window.Plotly.relayout(gd, {"xaxis.range[0]": lo, "xaxis.range[1]": hi});
  });
})();
