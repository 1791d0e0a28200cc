/* The job page's helpers that need no server: the keyboard help ("?": every key assets/keys.js handles, and the
   mouse gestures of the graphs; Esc or "?" closes it) and the dark theme (the header's toggle, remembered in this
   browser's localStorage; graphs take it through assets/plots.js, which reads document.documentElement's
   data-theme before each plot). Keys typed into a field are left alone. */
(function () {
  const KEYS = [
    ["W  or  ↑", "timeline: zoom in around the centre"],
    ["S  or  ↓", "timeline: zoom out"],
    ["A  or  ←", "timeline: pan left by a fifth"],
    ["D  or  →", "timeline: pan right by a fifth"],
    ["/", "search an operator (highlighted in detail, Marey and flow)"],
    ["?", "this help (Esc closes it)"],
    ["drag", "timeline, Marey: zoom to the range"],
    ["wheel", "timeline: zoom"],
    ["double-click", "timeline, Marey: zoom out to the whole step"],
    ["click", "a cell, bar, node or link selects it in every view"],
  ];
  const THEME_KEY = "paradiag-theme";

  function typing(target) {
    const tag = (target && target.tagName) || "";
    return tag === "INPUT" || tag === "TEXTAREA" || tag === "SELECT" || (target && target.isContentEditable);
  }

  function overlay() {
    let box = document.getElementById("pd-keys-help");
    if (box) { return box; }
    box = document.createElement("div");
    box.id = "pd-keys-help";
    box.className = "pd-keys-help";
    box.setAttribute("role", "dialog");
    box.setAttribute("aria-label", "keyboard and mouse");
    box.hidden = true;
    const card = document.createElement("div");
    card.className = "pd-keys-card";
    const title = document.createElement("h3");
    title.textContent = "Keys and gestures";
    card.appendChild(title);
    const table = document.createElement("table");
    KEYS.forEach(function (row) {
      const tr = document.createElement("tr");
      const key = document.createElement("td");
      const kbd = document.createElement("kbd");
      kbd.textContent = row[0];
      key.appendChild(kbd);
      const what = document.createElement("td");
      what.textContent = row[1];
      tr.appendChild(key);
      tr.appendChild(what);
      table.appendChild(tr);
    });
    card.appendChild(table);
    box.appendChild(card);
    box.addEventListener("click", function (e) { if (e.target === box) { box.hidden = true; } });
    document.body.appendChild(box);
    return box;
  }

  document.addEventListener("keydown", function (e) {
    if (e.ctrlKey || e.metaKey || e.altKey || typing(e.target)) { return; }
    const box = document.getElementById("pd-keys-help");
    if (e.key === "?") {
      e.preventDefault();
      const help = overlay();
      help.hidden = !help.hidden;
    } else if (e.key === "Escape" && box && !box.hidden) {
      box.hidden = true;
    }
  });

  function setTheme(theme) {
    document.documentElement.dataset.theme = theme;
    try { window.localStorage.setItem(THEME_KEY, theme); } catch (err) { /* storage refused: not remembered */ }
    const toggle = document.getElementById("theme-toggle");
    if (toggle) { toggle.textContent = theme === "dark" ? "☀ light" : "◐ dark"; }
    // Graphs already drawn follow at once; new figures take the theme in assets/plots.js.
    if (window.__pdRetheme) { window.__pdRetheme(); }
  }

  let saved = "light";
  try { saved = window.localStorage.getItem(THEME_KEY) || "light"; } catch (err) { /* no storage */ }
  document.documentElement.dataset.theme = saved;
  document.addEventListener("click", function (e) {
    const toggle = e.target && e.target.closest && e.target.closest("#theme-toggle");
    if (toggle) { setTheme(document.documentElement.dataset.theme === "dark" ? "light" : "dark"); }
  });
  // The toggle is rendered by Dash after this script runs: label it once it is there.
  const label = new MutationObserver(function () {
    const toggle = document.getElementById("theme-toggle");
    if (toggle) { toggle.textContent = document.documentElement.dataset.theme === "dark" ? "☀ light" : "◐ dark"; label.disconnect(); }
  });
  label.observe(document.documentElement, {childList: true, subtree: true});
})();
