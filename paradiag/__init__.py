"""paradiag: visual diagnostics of parallel performance in distributed DNN training jobs.

``paradiag.open(path)`` reads a folder of per-device traces (or a paradiag cache) and returns a
:class:`~paradiag.job.Job` holding the canonical Arrow tables (see ``docs/schema.md``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:
    from paradiag.job import Job


def open(path: Any, cache_dir: Any = None, **options: Any) -> Job:
    """Open a trace folder, a single trace file or a paradiag cache folder; parse and cache when the cache
    is missing or stale. Options: ``strict``, ``workers``, ``refresh``, ``progress``, ``window`` (the profiling
    window when the folder holds several, default the latest; ``Job.windows`` lists them) (see ``open_job``)."""
    from paradiag.dataset import open_job

    return open_job(path, cache_dir, **options)


__all__ = ["__version__", "open"]
