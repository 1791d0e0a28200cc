"""Shared fixtures: where the real traces are, a private cache folder per test, the two-host job and its local
cache (a module of its own each, as the Dask and remote-cache tests compare their caches with it)."""

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


@pytest.fixture(scope="module")
def sim_job(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.helpers import two_host_job

    return two_host_job(tmp_path_factory.mktemp("sim") / "job")


@pytest.fixture(scope="module")
def local_cache(sim_job: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from paradiag import dataset

    cache = tmp_path_factory.mktemp("local") / "cache"
    dataset.ingest(sim_job, cache, workers=1)
    return cache
