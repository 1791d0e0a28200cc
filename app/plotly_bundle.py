"""plotly.js's official cartesian partial bundle, for the dashboard and the snapshot.

paradiag draws only cartesian traces (scatter, bar, box, heatmap). The full plotly.js that the plotly package ships
is 4.8 MB; a browser spends about twice as long parsing and running it as the cartesian bundle of the same version
(1.5 MB), and on the dashboard's first page that time is spent before the heatmap can be drawn (1.3-1.6 s against
0.7 s in headless Chromium on the 2-core development machine). plotly publishes the bundle on npm as
``plotly.js-cartesian-dist-min``; set-up (``make venv``, the Dockerfile) fetches the release that matches the
installed plotly.js from the npm registry, checks it against the registry's SHA-512 integrity and keeps it in the
environment (``<prefix>/share/paradiag``). Where it was not fetched (no registry at set-up, a plain ``pip install``),
everything uses the full bundle, as before.

    python -m paradiag.app.plotly_bundle    # fetch it (set-up runs this)
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import sys
import tarfile
import urllib.request
from pathlib import Path

from plotly.offline import get_plotlyjs, get_plotlyjs_version

PACKAGE = "plotly.js-cartesian-dist-min"
MEMBER = "package/plotly-cartesian.min.js"
REGISTRY = "https://registry.npmjs.org"
# What dcc.Graph loads on demand when Dash serves its files itself (dash-renderer sets window._dashPlotlyJSURL).
DASH_PLOTLY_PATH = "/_dash-component-suites/plotly/package_data/plotly.min.js"


def path() -> Path:
    """Where the bundle for the installed plotly.js lives (whether or not it was fetched)."""
    return Path(sys.prefix) / "share" / "paradiag" / f"plotly-cartesian-{get_plotlyjs_version()}.min.js"


def available() -> Path | None:
    """The fetched bundle, or None (then the full plotly.js serves)."""
    found = path()
    return found if found.is_file() else None


def script() -> str:
    """The plotly.js to embed in a static page: the cartesian bundle where it was fetched, else the full one."""
    found = available()
    return found.read_text(encoding="utf-8") if found else get_plotlyjs()


def fetch(timeout: float = 60.0) -> Path:
    """Downloads the bundle of the installed plotly.js version, checks its integrity, stores it; returns its path."""
    version = get_plotlyjs_version()
    with urllib.request.urlopen(f"{REGISTRY}/{PACKAGE}/{version}", timeout=timeout) as reply:
        dist = json.load(reply)["dist"]
    with urllib.request.urlopen(dist["tarball"], timeout=timeout) as reply:
        tarball = reply.read()
    algorithm, _, expected = dist["integrity"].partition("-")
    if algorithm != "sha512" or base64.b64encode(hashlib.sha512(tarball).digest()).decode() != expected:
        raise ValueError(
            f"{PACKAGE} {version}: the tarball does not match the registry's integrity {dist['integrity']}"
        )
    with tarfile.open(fileobj=io.BytesIO(tarball), mode="r:gz") as tar:
        member = tar.extractfile(MEMBER)
        if member is None:
            raise ValueError(f"{PACKAGE} {version}: no {MEMBER} in the tarball")
        data = member.read()
    target = path()
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_suffix(".part")
    partial.write_bytes(data)
    partial.replace(target)
    return target


def main() -> None:
    """Set-up: fetch the bundle; without a registry the full plotly.js serves, so a failure only warns."""
    try:
        print(f"paradiag: plotly.js cartesian bundle at {fetch()}")
    except (OSError, ValueError, KeyError) as exc:
        print(
            f"paradiag: the plotly.js cartesian bundle was not fetched ({exc}); the full plotly.js serves",
            file=sys.stderr,
        )


if __name__ == "__main__":
    main()
