"""plotly.js's cartesian partial bundle: fetched at set-up with its integrity checked, served where dcc.Graph loads
plotly.js, embedded in static pages; the full plotly.js where it was not fetched."""

from __future__ import annotations

import base64
import hashlib
import io
import json
import tarfile
from pathlib import Path
from typing import Any

import pytest
from plotly.offline import get_plotlyjs

from paradiag.app import plotly_bundle

BUNDLE = b"/* plotly.js cartesian, for the test */ window.Plotly = {};"


def _app_client(tmp_path: Path) -> Any:
    from paradiag.app.config import Config
    from paradiag.app.factory import create_app

    config = Config(upload_dir=tmp_path / "up", app_cache_dir=tmp_path / "app", secret_key="k")
    return create_app(config).server.test_client()


def test_the_dashboard_serves_the_cartesian_bundle_where_dcc_loads_plotly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bundle = tmp_path / "plotly-cartesian.min.js"
    bundle.write_bytes(BUNDLE)
    monkeypatch.setattr(plotly_bundle, "path", lambda: bundle)
    reply = _app_client(tmp_path).get(plotly_bundle.DASH_PLOTLY_PATH)
    body = reply.data
    reply.close()  # a file's reply holds the file open until closed
    assert reply.status_code == 200 and body == BUNDLE
    assert reply.mimetype == "text/javascript"
    assert plotly_bundle.script() == BUNDLE.decode()


def test_without_the_bundle_the_full_plotly_serves(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(plotly_bundle, "path", lambda: tmp_path / "not-fetched.js")
    reply = _app_client(tmp_path).get(plotly_bundle.DASH_PLOTLY_PATH)
    body = reply.data
    reply.close()
    assert reply.status_code == 200 and len(body) > 3_000_000  # Dash's own file: the full plotly.js
    assert plotly_bundle.script() == get_plotlyjs()


def _registry(monkeypatch: pytest.MonkeyPatch, tarball: bytes, integrity: str) -> None:
    def urlopen(url: str, timeout: float) -> io.BytesIO:
        if url.endswith(".tgz"):
            return io.BytesIO(tarball)
        assert (
            url == f"{plotly_bundle.REGISTRY}/{plotly_bundle.PACKAGE}/{plotly_bundle.get_plotlyjs_version()}"
        )
        return io.BytesIO(
            json.dumps(
                {"dist": {"tarball": "https://registry.example/bundle.tgz", "integrity": integrity}}
            ).encode()
        )

    monkeypatch.setattr(plotly_bundle.urllib.request, "urlopen", urlopen)


def _tarball() -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as tar:
        info = tarfile.TarInfo(plotly_bundle.MEMBER)
        info.size = len(BUNDLE)
        tar.addfile(info, io.BytesIO(BUNDLE))
    return out.getvalue()


def test_fetch_keeps_the_bundle_only_when_it_matches_the_registrys_integrity(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "share" / "bundle.js"
    monkeypatch.setattr(plotly_bundle, "path", lambda: target)
    tarball = _tarball()
    _registry(
        monkeypatch,
        tarball,
        "sha512-" + base64.b64encode(hashlib.sha512(b"something else").digest()).decode(),
    )
    with pytest.raises(ValueError, match="integrity"):
        plotly_bundle.fetch()
    assert not target.exists()
    _registry(monkeypatch, tarball, "sha512-" + base64.b64encode(hashlib.sha512(tarball).digest()).decode())
    assert plotly_bundle.fetch() == target and target.read_bytes() == BUNDLE


def test_set_up_fetched_the_bundle_of_the_installed_plotly() -> None:
    if plotly_bundle.available() is None:
        pytest.skip(
            f"{plotly_bundle.path()} was not fetched (no npm registry at set-up?): the full plotly.js serves"
        )
    text = plotly_bundle.path().read_text(encoding="utf-8")
    assert f"plotly.js (cartesian - minified) v{plotly_bundle.get_plotlyjs_version()}" in text[:200]
    assert len(text) < len(get_plotlyjs()) / 2
