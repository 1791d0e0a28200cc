"""Shared fixtures: where the real traces are, and a private cache folder per test."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
TRACES = SHARED / "traces"
REFERENCE = SHARED / "reference"


def shared_path(*parts: str) -> Path:
    """A path under ../shared/traces; the test is skipped (with the reason) when it is absent."""
    path = TRACES.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"real traces not available: {path} is absent (they live in ../shared/traces beside the repo)")
    return path


@pytest.fixture(autouse=True)
def private_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test gets its own cache root, so no test reads another's cache (or the user's)."""
    root = tmp_path_factory.mktemp("cache")
    monkeypatch.setenv("PARADIAG_CACHE_DIR", str(root))
    return root
