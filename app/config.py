"""The dashboard's one configuration object, read from ``PARADIAG_*`` environment variables (README lists them)."""

from __future__ import annotations

import os
import secrets
from dataclasses import dataclass
from pathlib import Path

from paradiag.dataset import default_cache_root

SAMPLES_DIR = Path(__file__).resolve().parent.parent / "sample_traces"


@dataclass(frozen=True)
class Config:
    """Where jobs come from, where the app keeps its files, and how it signs users in."""

    job: str | None = None
    samples_dir: Path = SAMPLES_DIR
    upload_dir: Path = Path("uploads")
    app_cache_dir: Path = Path("app-cache")
    cache_timeout_s: int = 7 * 24 * 3600
    max_primitives: int = 20_000
    max_upload_mb: int = 4096
    users_file: Path | None = None
    secret_key: str = ""

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None, **overrides: object) -> Config:
        env = os.environ if environ is None else environ
        root = default_cache_root()
        app_cache = Path(env.get("PARADIAG_APP_CACHE_DIR") or root / "app")
        values: dict[str, object] = {
            "job": env.get("PARADIAG_JOB") or None,
            "samples_dir": Path(env.get("PARADIAG_SAMPLES_DIR") or SAMPLES_DIR),
            "upload_dir": Path(env.get("PARADIAG_UPLOAD_DIR") or root / "uploads"),
            "app_cache_dir": app_cache,
            "cache_timeout_s": int(env.get("PARADIAG_CACHE_TIMEOUT", 7 * 24 * 3600)),
            "max_primitives": int(env.get("PARADIAG_MAX_PRIMITIVES", 20_000)),
            "max_upload_mb": int(env.get("PARADIAG_MAX_UPLOAD_MB", 4096)),
            "users_file": Path(env["PARADIAG_USERS"]) if env.get("PARADIAG_USERS") else None,
            "secret_key": env.get("PARADIAG_SECRET_KEY") or "",
        }
        values.update(overrides)
        config = cls(**values)  # type: ignore[arg-type]
        if not config.secret_key:
            object.__setattr__(config, "secret_key", _shared_secret(app_cache))
        return config


def _shared_secret(folder: Path) -> str:
    """A signing key every worker on this machine shares (kept beside the app cache) when none is configured."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "secret_key"
    if not path.exists():
        tmp = folder / f".secret_key.{os.getpid()}"
        tmp.write_text(secrets.token_hex(32))
        try:
            os.link(tmp, path)  # first writer wins; the others read its key
        except FileExistsError:
            pass
        finally:
            tmp.unlink()
    return path.read_text().strip()
