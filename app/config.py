"""The dashboard's one configuration object, read from ``PARADIAG_*`` environment variables (README lists them)."""

from __future__ import annotations

import os
import secrets
from dataclasses import dataclass
from pathlib import Path

from paradiag.cache import default_cache_root

SAMPLES_DIR = Path(__file__).resolve().parent.parent / "sample_traces"
TRUE = ("1", "true", "yes", "on")


@dataclass(frozen=True)
class Config:
    """Where jobs come from, where the app keeps its files, how it signs users in and what an upload may cost."""

    job: str | None = None
    # More job folders or caches the server serves beside ``job`` (``paradiag serve A B C``, or
    # ``PARADIAG_MORE_JOBS``, comma-separated): ``served:1``, ``served:2``, ... to open or to compare against.
    more_jobs: tuple[str, ...] = ()
    samples_dir: Path = SAMPLES_DIR
    upload_dir: Path = Path("uploads")
    app_cache_dir: Path = Path("app-cache")
    cache_timeout_s: int = 7 * 24 * 3600
    max_primitives: int = 20_000
    max_upload_mb: int = 4096
    users_file: Path | None = None
    secret_key: str = ""
    secure_cookies: bool = False
    allowed_origins: tuple[str, ...] = ()
    session_hours: int = 12  # a sign-in lasts this long at most, however active the user (then sign in again)
    proxy_hops: int = 0  # reverse proxies in front whose X-Forwarded-For/-Proto/-Host are trusted
    # Archives: the most an upload may unpack to, and the most any entry (or the whole) may grow over its
    # compressed size. Real traces compress 10-30x; an archive bomb, 1000x.
    max_unpacked_mb: int = 8192
    max_ratio: int = 200
    # The parse of an upload runs in its own process under these limits (address space, wall clock), with
    # the parsers' own per-file and per-string caps set for it.
    parse_memory_mb: int = 4096
    parse_seconds: int = 600
    parse_file_mb: int = 2048
    parse_string_kb: int = 64
    parse_slots: int = 2  # parses at once on this host (all workers together); more uploads wait their turn

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None, **overrides: object) -> Config:
        env = os.environ if environ is None else environ
        root = default_cache_root()
        app_cache = Path(env.get("PARADIAG_APP_CACHE_DIR") or root / "app")
        values: dict[str, object] = {
            "job": env.get("PARADIAG_JOB") or None,
            "more_jobs": tuple(p.strip() for p in env.get("PARADIAG_MORE_JOBS", "").split(",") if p.strip()),
            "samples_dir": Path(env.get("PARADIAG_SAMPLES_DIR") or SAMPLES_DIR),
            "upload_dir": Path(env.get("PARADIAG_UPLOAD_DIR") or root / "uploads"),
            "app_cache_dir": app_cache,
            "users_file": Path(env["PARADIAG_USERS"]) if env.get("PARADIAG_USERS") else None,
            "secret_key": env.get("PARADIAG_SECRET_KEY") or "",
            "secure_cookies": env.get("PARADIAG_SECURE_COOKIES", "").lower() in TRUE,
            "allowed_origins": tuple(
                o.strip().rstrip("/") for o in env.get("PARADIAG_ALLOWED_ORIGINS", "").split(",") if o.strip()
            ),
        }
        for field, name in _NUMBERS.items():
            if env.get(name):
                values[field] = _positive_int(name, env[name])
        values.update(overrides)
        config = cls(**values)  # type: ignore[arg-type]
        if not config.secret_key:
            object.__setattr__(config, "secret_key", _shared_secret(app_cache))
        return config


_NUMBERS = {
    "cache_timeout_s": "PARADIAG_CACHE_TIMEOUT",
    "session_hours": "PARADIAG_SESSION_HOURS",
    "max_primitives": "PARADIAG_MAX_PRIMITIVES",
    "max_upload_mb": "PARADIAG_MAX_UPLOAD_MB",
    "max_unpacked_mb": "PARADIAG_UPLOAD_MAX_UNPACKED_MB",
    "max_ratio": "PARADIAG_UPLOAD_MAX_RATIO",
    "parse_memory_mb": "PARADIAG_UPLOAD_PARSE_MEMORY_MB",
    "parse_seconds": "PARADIAG_UPLOAD_PARSE_SECONDS",
    "parse_file_mb": "PARADIAG_UPLOAD_MAX_FILE_MB",
    "parse_string_kb": "PARADIAG_UPLOAD_MAX_STRING_KB",
    "proxy_hops": "PARADIAG_PROXY_HOPS",
    "parse_slots": "PARADIAG_UPLOAD_PARSE_SLOTS",
}


def _positive_int(name: str, text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"{name}={text!r}: expected a whole number") from None
    if value <= 0:
        raise ValueError(f"{name}={text!r}: expected a number above 0")
    return value


def private_dir(path: Path) -> Path:
    """Create ``path`` (and missing parents) readable by this user only: it holds keys or users' data."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    path.chmod(0o700)
    return path


def private_file(path: Path) -> Path:
    """Create ``path`` if missing, readable and writable by this user only."""
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600))
    path.chmod(0o600)
    return path


def _shared_secret(folder: Path) -> str:
    """A signing key every worker on this machine shares (kept beside the app cache, mode 0600) when none is
    configured. Anyone who can read it can sign a session cookie as any user."""
    private_dir(folder)
    path = folder / "secret_key"
    if not path.exists():
        tmp = folder / f".secret_key.{os.getpid()}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_hex(32))
        try:
            os.link(tmp, path)  # first writer wins; the others read its key
        except FileExistsError:
            pass
        finally:
            tmp.unlink()
    path.chmod(0o600)  # a key left readable by an older version is closed too
    return path.read_text().strip()
