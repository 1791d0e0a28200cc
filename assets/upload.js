/* Upload for the start page: a folder (Chromium's webkitdirectory), several files, or one archive. Files stream to
   /api/upload as multipart (never base64 through a callback), each under its path inside the folder; the XHR's
   progress fills the first half of the bar, and the server's parse progress (polled by Dash) the second half. */
(function () {
  function send(files) {
    if (!files.length) { return; }
    const form = new FormData();
    for (const f of files) { form.append("files", f, f.webkitRelativePath || f.name); }
    const bar = document.getElementById("upload-progress");
    const msg = document.getElementById("upload-message");
    const xhr = new XMLHttpRequest();
    xhr.open("POST", "/api/upload");
    xhr.upload.onprogress = function (e) {
      if (e.lengthComputable && bar) { bar.value = Math.round(50 * e.loaded / e.total); }
      if (msg) { msg.textContent = "uploading " + files.length + " file(s)"; }
    };
    xhr.onload = function () {
      let reply = {};
      try { reply = JSON.parse(xhr.responseText); } catch (err) { reply = {error: xhr.statusText}; }
      if (xhr.status !== 200 || !reply.id) {
        if (msg) { msg.textContent = "upload failed: " + (reply.error || xhr.status); }
        return;
      }
      window.dash_clientside.set_props("upload-state", {data: {id: reply.id, job: reply.job}});
    };
    xhr.onerror = function () { if (msg) { msg.textContent = "upload failed: network error"; } };
    xhr.send(form);
  }

  function input(id, label, folder) {
    const wrap = document.createElement("label");
    wrap.className = "pd-upload-input";
    wrap.textContent = label + " ";
    const el = document.createElement("input");
    el.type = "file";
    el.id = id;
    el.multiple = true;
    if (folder) { el.webkitdirectory = true; }
    el.addEventListener("change", function () { send(Array.from(el.files)); });
    wrap.appendChild(el);
    return wrap;
  }

  function mount() {
    const zone = document.getElementById("upload-zone");
    if (!zone || zone.dataset.ready) { return; }
    zone.dataset.ready = "1";
    zone.appendChild(input("upload-folder", "a trace folder:", true));
    zone.appendChild(input("upload-files", "trace files or one .zip / .tar.gz:", false));
  }

  new MutationObserver(mount).observe(document.documentElement, {childList: true, subtree: true});
})();
