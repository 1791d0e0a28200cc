/* How the job page's graphs are plotted, through wrappers of plotly.js's own calls (installed when dcc.Graph has
   loaded plotly.js and set window.Plotly, before the first graph plots).

   Not drawn while pending: dcc.Graph plots the figure it mounts with at once. The job page's graphs mount with a
   placeholder (their figures come from callbacks), and each placeholder was a whole plot (axes, modebar, a
   700 x 450 layout) thrown away when the view's first figure arrived: every graph was drawn twice on the first
   page, the first time ahead of the heatmap. A figure marked pending (layout.meta,
   paradiag.app.layouts.job_page.PENDING) on a div never plotted is not drawn. dcc.Graph binds its plotly events
   (click, hover, relayout...) once, after its first plot: those are kept and bound right after the first real
   plot's call, before any of them can fire.

   Not laid out again at the same size: dcc.Graph lays a plot out again (Plotly.Plots.resize, a relayout of the
   whole plot) whenever its box changes size, which a new figure of another height does by itself: the plot is
   drawn at its new size, then drawn again for it. A resize that finds the plot already as wide and as high as
   its box is skipped, and so is one of a div not plotted yet (its first plot fits its box).

   Not drawn again as it is: see ``unchanged``.

   Not drawn out of sight: a new figure for a graph already plotted whose box is out of the window (more than
   SIGHT_MARGIN_PX beyond it: the device detail, the communication matrix and the flow graph under Marey's graph,
   on most screens) is kept, not drawn, and drawn when the box comes into sight or when the page is idle (no
   callback in flight, nothing being drawn, the browser idle: requestIdleCallback), whichever comes first. A step
   change asks for 4-6 figures at once, and the browser draws them one after the other on its one main thread:
   the views in sight waited behind the ones below the fold (a 256-rank step change: ~130 ms of the device detail's
   and the flow graph's drawing ahead of the heatmap and the timeline). Only the newest figure of a graph is kept;
   a graph never plotted is plotted at once (dcc.Graph binds its events after its first plot). An export, a theme
   switch or a test draws what is kept first (window.__pdDrawKept).

   Hover text sent once per name: a trace whose meta holds pdText (paradiag.app.figures.common.shared_text: each
   part's distinct strings, and per point each part's index) gets its per-point text written here, before plotly
   reads it (a Marey graph's band and row names, repeated on every hover point, were a third of its bytes).

   The page's own signal of what is drawn (tests wait on it, not on fixed sleeps): window.__pdPlots holds
   inFlight (plots and resizes begun and not finished), drawn[graph id] (plots and resizes finished) and
   painted[graph id] (plotly's own "afterplot" events: every time it drew the graph, also for a zoom or pan of its
   own, which no call here begins). */
(function () {
  const PENDING = "pending";
  const SIGHT_MARGIN_PX = 200;
  let plotly;
  const plots = {inFlight: 0, drawn: {}, painted: {}, kept: {}, keptNow: 0};
  window.__pdPlots = plots;

  // Out of sight: each plotted graph's div is watched; inSight is false only once the observer has said so.
  const kept = new Set();  // divs holding a figure not drawn yet (el._pdKept: [this, arguments])
  const sight = typeof IntersectionObserver === "function" ? new IntersectionObserver(function (entries) {
    entries.forEach(function (entry) {
      entry.target._pdInSight = entry.isIntersecting;
      if (entry.isIntersecting) { drawKept(entry.target); }
    });
  }, {rootMargin: SIGHT_MARGIN_PX + "px 0px"}) : null;
  function watch(el) {
    if (sight && el && !el._pdWatched) { el._pdWatched = true; sight.observe(el); }
  }
  function graphId(el) {
    const host = el && el.parentElement && el.parentElement.closest("[id]");
    return (host && host.id) || (el && el.id) || "?";
  }
  function drawKept(el) {
    const args = el._pdKept;
    if (!args) { return Promise.resolve(el); }
    delete el._pdKept;
    kept.delete(el);
    plots.keptNow = kept.size;
    el._pdNow = true;
    try { return plotly.react.apply(args[0], args[1]); } finally { delete el._pdNow; }
  }
  // The server answers the graphs in sight first (paradiag.app.turns): each callback request names the graphs out
  // of sight now (SIGHT_HEADER), those the observer has seen outside the window, by their panel's id.
  const SIGHT_HEADER = "X-Paradiag-Out-Of-Sight";
  function outOfSight() {
    return Array.prototype.filter.call(document.querySelectorAll(".js-plotly-plot"), function (gd) {
      return gd._pdInSight === false;
    }).map(graphId).join(",");
  }
  const realFetch = window.fetch;
  window.fetch = function (url, opts) {
    if (String(url).indexOf("_dash-update-component") >= 0 && opts) {
      const away = outOfSight();
      if (away) {
        const headers = Object.assign({}, opts.headers || {});
        headers[SIGHT_HEADER] = away;
        opts = Object.assign({}, opts, {headers: headers});
      }
    }
    return realFetch.call(this, url, opts);
  };
  window.__pdDrawKept = function (el) {
    if (el) { return drawKept(el); }
    return Promise.all(Array.from(kept).map(drawKept));
  };
  // Idle: no Dash callback in flight (its loading marks), nothing being drawn, and the browser says it is idle.
  let idleAsked = false;
  function busy() {
    const state = window.store && window.store.getState && window.store.getState();
    const calls = (state && state.callbacks) || {};
    const waiting = ["requested", "prioritized", "blocked", "executing", "watched", "executed"].some(function (k) {
      return Array.isArray(calls[k]) && calls[k].length > 0;
    });
    return waiting || plots.inFlight > 0 || document.querySelector('[data-dash-is-loading="true"]') !== null;
  }
  function askIdle() {
    if (idleAsked || !kept.size) { return; }
    idleAsked = true;
    const later = window.requestIdleCallback || function (f) { return setTimeout(f, 50); };
    later(function () {
      idleAsked = false;
      if (!kept.size) { return; }
      if (busy()) { setTimeout(askIdle, 50); return; }
      const el = kept.values().next().value;  // one per idle moment, the first kept first
      if (!el.isConnected) {  // its graph left the page (another job opened): nothing to draw
        delete el._pdKept;
        kept.delete(el);
        plots.keptNow = kept.size;
        askIdle();
        return;
      }
      let drawn;
      try { drawn = drawKept(el); } catch (err) { drawn = null; console.error(err); }
      if (drawn && typeof drawn.then === "function") { drawn.then(askIdle, askIdle); } else { askIdle(); }
    }, {timeout: 1000});
  }
  function keep(el, self, args) {
    el._pdKept = [self, Array.prototype.slice.call(args)];
    kept.add(el);
    plots.keptNow = kept.size;
    plots.kept[graphId(el)] = (plots.kept[graphId(el)] || 0) + 1;
    askIdle();
    return Promise.resolve(el);
  }

  // The dark theme (assets/ux.js sets data-theme on <html>): a figure's layout is drawn with dark paper, plot and
  // grid colours; the data keep their colours (a kind or category has one colour everywhere). The server's layout is
  // kept on the div (_pdLayout), so a switch back redraws it as it came.
  const DARK = {paper: "#161b22", plot: "#0d1117", font: "#d0d7de", grid: "#30363d"};
  function themed(layout) {
    if (!layout || document.documentElement.dataset.theme !== "dark") { return layout; }
    const out = Object.assign({}, layout, {paper_bgcolor: DARK.paper, plot_bgcolor: DARK.plot});
    out.font = Object.assign({}, layout.font, {color: DARK.font});
    Object.keys(layout).concat(["xaxis", "yaxis"]).forEach(function (key) {
      if (/^[xy]axis\d*$/.test(key)) {
        out[key] = Object.assign({}, layout[key], {gridcolor: DARK.grid, zerolinecolor: DARK.grid, linecolor: DARK.grid});
      }
    });
    if (layout.legend) { out.legend = Object.assign({}, layout.legend, {bgcolor: "rgba(0,0,0,0)"}); }
    return out;
  }
  window.__pdRetheme = function () {
    document.querySelectorAll(".js-plotly-plot").forEach(function (gd) {
      if (gd._fullLayout && plotly && !gd._pdKept) { plotly.react(gd, gd.data, gd._pdLayout || gd.layout); }  // a kept figure is themed when drawn
    });
  };

  function counted(el, promise) {
    if (!promise || typeof promise.then !== "function") { return promise; }
    const id = graphId(el);
    plots.inFlight += 1;
    const done = function () {
      plots.inFlight -= 1;
      plots.drawn[id] = (plots.drawn[id] || 0) + 1;
      if (el && !el._pdPainted && typeof el.on === "function" && el._fullLayout && !el._pdHeld) {
        el._pdPainted = true;  // from the first plot on (whose own afterplot has passed: counted here)
        plots.painted[id] = (plots.painted[id] || 0) + 1;
        el.on("plotly_afterplot", function () { plots.painted[id] = (plots.painted[id] || 0) + 1; });
      }
    };
    promise.then(done, done);
    return promise;
  }

  // Not drawn again as it is: after a zoom or pan by the mouse, dcc.Graph writes the plot's new axes back into
  // its figure, and a new figure is plotted (Plotly.react), which drew the plot a second time as it already was
  // (a drag zoom drew the graph three times: the zoom, this, then the server's figure). A figure whose data are
  // the ones plotted last and whose layout differs from the one plotted last only by values the plot already
  // holds is skipped (compared key by key as JSON, taken before plotly fills the layout in).
  function unchanged(el, figure) {
    const last = el._pdLast;  // the layout plotted last, key by key as JSON (plotly then fills the object in)
    const now = {};
    Object.keys(figure.layout).forEach(function (key) { now[key] = JSON.stringify(figure.layout[key]); });
    el._pdLast = now;
    if (!el._fullLayout || !last || figure.data !== el._pdData) { return false; }
    const keys = Object.keys(now);
    return keys.length === Object.keys(last).length && keys.every(function (key) {
      return now[key] === last[key] || (/^[xy]axis\d*$/.test(key) && key in last && sameAxis(figure.layout[key], JSON.parse(last[key]), el._fullLayout[key]));
    });
  }

  // Only shapes changed (a selection's outline patched alone): drawn by one relayout of the shapes, not by
  // Plotly.react, which computes the whole figure again for a changed shape that is in the legend or whose
  // attributes are edited one by one (85-130 ms for Marey's outline at 256 ranks; the relayout 3-8 ms). The new
  // shapes when the data are the ones plotted last and every other layout key is as plotted last (``last``,
  // ``now``: the layouts key by key as JSON); else null.
  function shapeEdits(el, figure, last, now) {
    if (!el._fullLayout || !last || figure.data !== el._pdData || !Array.isArray(figure.layout.shapes)) { return null; }
    const keys = Object.keys(now);
    const others = keys.length === Object.keys(last).length &&
      keys.every(function (k) { return k === "shapes" || now[k] === last[k]; });
    return others && now.shapes !== last.shapes ? figure.layout.shapes : null;
  }

  // The relayout is ours, not the user's: its plotly_relayout event is not passed on (dcc.Graph would report it as
  // the graph's relayoutData, a zoom store's input); plotly_afterplot is told once it is drawn, as for a plot.
  function relayoutQuietly(el, shapes) {
    const emit = el.emit;
    el.emit = function (name) {
      if (name === "plotly_relayout" || name === "plotly_relayouting") { return undefined; }
      return emit.apply(this, arguments);
    };
    const restore = function () { el.emit = emit; };
    // The whole list at once: an object at "shapes[3]" is a new shape inserted there, not this one replaced.
    let out;
    try { out = plotly.relayout(el, {shapes: JSON.parse(JSON.stringify(shapes))}); } catch (err) { restore(); throw err; }
    return Promise.resolve(out).then(function (v) { restore(); emit.call(el, "plotly_afterplot"); return v; },
      function (err) { restore(); throw err; });
  }

  // An axis written back: as plotted last but for its range (and autorange, type), which is the one on screen.
  function sameAxis(axis, plotted, live) {
    if (!axis || !plotted || !live || !Array.isArray(axis.range) || !Array.isArray(live.range)) { return false; }
    const rest = function (a) {
      const out = Object.assign({}, a);
      delete out.range; delete out.autorange; delete out.type;
      return JSON.stringify(out);
    };
    const near = function (a, b) { return Math.abs(Number(a) - Number(b)) <= 1e-9 * Math.max(1, Math.abs(Number(b))); };
    return rest(axis) === rest(plotted) && near(axis.range[0], live.range[0]) && near(axis.range[1], live.range[1]);
  }

  // Decoded once: the server sends numeric arrays as base64 specs ({dtype, bdata, shape}), which plotly decodes
  // into a new typed array on every Plotly.react, so it took every trace for changed and computed and drew the
  // whole graph again even when only a shape or one trace had changed (Marey's selected-instance outline, a Patch:
  // ~100 ms at 256 ranks). Each spec is replaced in the figure by its typed array (as plotly decodes it: 1-D, or a
  // list of row views for 2-D), once: a patched figure keeps its other traces' objects, and plotly finds them
  // unchanged.
  const TYPED = {u1c: Uint8ClampedArray, i1: Int8Array, u1: Uint8Array, i2: Int16Array, u2: Uint16Array,
    i4: Int32Array, u4: Uint32Array, f4: Float32Array, f8: Float64Array, uint8c: Uint8ClampedArray,
    int8: Int8Array, uint8: Uint8Array, int16: Int16Array, uint16: Uint16Array, int32: Int32Array,
    uint32: Uint32Array, float32: Float32Array, float64: Float64Array};
  function isSpec(v) {
    return v && typeof v === "object" && !Array.isArray(v) && typeof v.dtype === "string" && TYPED[v.dtype] &&
      (typeof v.bdata === "string" || v.bdata instanceof ArrayBuffer);
  }
  function decodeSpec(v) {
    let buffer = v.bdata;
    if (typeof buffer === "string") {
      const bytes = atob(buffer);
      const out = new Uint8Array(bytes.length);
      for (let i = 0; i < bytes.length; i++) { out[i] = bytes.charCodeAt(i); }
      buffer = out.buffer;
    }
    const Type = TYPED[v.dtype];
    const shape = v.shape === undefined ? [buffer.byteLength / Type.BYTES_PER_ELEMENT] : String(v.shape).split(",").map(Number);
    if (shape.length === 1) { return new Type(buffer); }
    if (shape.length !== 2) { return v; }  // plotly's own decoding handles the rest
    const rows = new Array(shape[0]);
    for (let r = 0; r < shape[0]; r++) { rows[r] = new Type(buffer, r * shape[1] * Type.BYTES_PER_ELEMENT, shape[1]); }
    return rows;
  }
  function decodeIn(obj, depth) {
    Object.keys(obj).forEach(function (key) {
      const v = obj[key];
      if (!v || typeof v !== "object" || ArrayBuffer.isView(v) || Array.isArray(v) || key === "meta") { return; }
      if (isSpec(v)) { obj[key] = decodeSpec(v); } else if (depth < 3) { decodeIn(v, depth + 1); }
    });
  }
  function decodeArrays(figure) {
    ((figure && figure.data) || []).forEach(function (trace) {
      if (trace && typeof trace === "object" && !trace._pdDecoded) {
        decodeIn(trace, 0);
        try { Object.defineProperty(trace, "_pdDecoded", {value: true, enumerable: false}); } catch (e) { /* frozen: decoded again next time */ }
      }
    });
  }

  const SHARED_TEXT = "pdText";
  function expandTexts(figure) {
    ((figure && figure.data) || []).forEach(function (trace) {
      const shared = trace && trace.meta && trace.meta[SHARED_TEXT];
      if (!shared || trace.text !== undefined) { return; }
      const n = shared.index.length ? shared.index[0].length : 0;
      const text = new Array(n);
      for (let i = 0; i < n; i++) {
        const parts = new Array(shared.parts.length);
        for (let k = 0; k < parts.length; k++) { parts[k] = shared.parts[k][shared.index[k][i]]; }
        text[i] = parts.join(shared.sep);
      }
      trace.text = text;
    });
  }

  function hold(el) {
    if (el._pdHeld) { return; }
    const held = [];
    el._pdHeld = held;
    el.on = function (name, handler) { held.push([name, handler]); };
    el.removeAllListeners = function () { held.length = 0; };
  }

  function install(P) {
    if (!P || P._pdWrapped) { return; }
    P._pdWrapped = true;
    if (typeof P.register === "function" && typeof P.relayout === "function") { wrapGuiRelayout(P); }
    const react = P.react;
    P.react = function (gd, figure) {
      const el = typeof gd === "string" ? document.getElementById(gd) : gd;
      const layout = (figure && figure.layout) || arguments[2];
      if (el && el._fullLayout && el._pdInSight === false && !el._pdNow && !el._pdHeld) { return keep(el, this, arguments); }
      if (el && el._pdKept && !el._pdNow) { delete el._pdKept; kept.delete(el); plots.keptNow = kept.size; }  // a newer figure, drawn now
      watch(el);
      decodeArrays(figure && figure.data ? figure : {data: figure});
      expandTexts(figure && figure.data ? figure : {data: figure});
      if (el && figure && figure.layout) {
        const last = el._pdLast;
        const same = unchanged(el, figure);
        const shapes = same ? null : shapeEdits(el, figure, last, el._pdLast);
        el._pdData = figure.data;
        if (same) { el._pdLayout = layout; return Promise.resolve(el); }
        if (shapes) { el._pdLayout = layout; return counted(el, relayoutQuietly(el, shapes)); }
      }
      if (el && layout && layout.meta !== PENDING) {
        el._pdLayout = layout;
        if (figure && figure.layout) { arguments[1] = Object.assign({}, figure, {layout: themed(layout)}); } else { arguments[2] = themed(layout); }
      }
      if (el && !el._fullLayout && layout && layout.meta === PENDING) {
        hold(el);
        return Promise.resolve(el);
      }
      const held = el && el._pdHeld;
      if (!held) { return counted(el, react.apply(this, arguments)); }
      delete el._pdHeld;
      delete el.on;
      delete el.removeAllListeners;
      const plotted = react.apply(this, arguments);  // makes the div's event emitter (el.on) first of all
      held.forEach(function (h) { el.on(h[0], h[1]); });
      return counted(el, plotted);
    };
    // dcc.Graph also resizes a graph after its first plot; plotly's resize relayouts the div 100 ms later, by
    // when the real figure may be there: drawn twice.
    const resize = P.Plots.resize;
    P.Plots.resize = function (gd) {
      const el = typeof gd === "string" ? document.getElementById(gd) : gd;
      const full = el && el._fullLayout;
      const fits = full && Math.round(full.width) === el.clientWidth && Math.round(full.height) === el.clientHeight;
      return el && (el._pdHeld || el._pdKept || fits) ? Promise.resolve(el) : counted(el, resize.apply(this, arguments));
    };
  }

  // Not zoomed here first: a zoom box or a double-click on a graph whose window the server draws again (the
  // timeline, Marey's graph: they show more detail, or merge less, in a narrower window) is told to dcc.Graph as
  // the graph's relayout event, and plotly does not apply it itself: that drew the graph at the new range only to
  // be replaced by the server's figure for it (two draws per drag or double-click; keys.js asks the same way).
  // A wheel zoom or a pan is plotly's own (it has already moved the plot while the mouse moved), and so is anything
  // else plotly edits through its GUI (legend clicks, other axes).
  const SERVER_ZOOMED = ["timeline", "marey"];
  const ZOOM_KEYS = /^xaxis\.(range\[[01]\]|autorange)$/;
  document.addEventListener("wheel", function (e) {
    const gd = e.target && e.target.closest && e.target.closest(".js-plotly-plot");
    if (gd) { gd._pdWheelAt = Date.now(); }
  }, {capture: true, passive: true});

  function serverZoom(gd, updates) {
    const host = gd && gd.parentElement && gd.parentElement.closest("[id]");
    const full = gd && gd._fullLayout;
    if (!host || SERVER_ZOOMED.indexOf(host.id) < 0 || !full || !updates || typeof updates !== "object") { return false; }
    const keys = Object.keys(updates);
    return keys.length > 0 && keys.every(function (k) { return ZOOM_KEYS.test(k); }) &&
      (updates["xaxis.autorange"] === true || (full.dragmode === "zoom" && Date.now() - (gd._pdWheelAt || 0) > 1500));
  }

  function wrapGuiRelayout(P) {
    // plotly's own _guiRelayout is relayout marked as a GUI edit (its uirevision bookkeeping): the same here.
    const relayout = P.relayout;
    P.register({moduleType: "apiMethod", name: "_guiRelayout", fn: function (gd, updates) {
      const el = typeof gd === "string" ? document.getElementById(gd) : gd;
      if (serverZoom(el, updates)) {
        el.emit("plotly_relayout", Object.assign({}, updates));
        return Promise.resolve(el);
      }
      el._fullLayout._guiEditing = true;
      const out = relayout.apply(null, arguments);
      el._fullLayout._guiEditing = false;
      return out;
    }});
  }

  // dcc loads plotly.js on demand and it sets window.Plotly: wrap it then, before the first graph plots.
  Object.defineProperty(window, "Plotly", {
    configurable: true,
    enumerable: true,
    get: function () { return plotly; },
    set: function (value) { plotly = value; install(value); },
  });
})();
