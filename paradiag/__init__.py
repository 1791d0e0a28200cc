"""paradiag: visual diagnostics of parallel performance in distributed DNN training jobs.

``paradiag.open(path)`` reads a folder of per-device traces (or a paradiag cache) and returns a
:class:`~paradiag.dataset.Job` holding the canonical Arrow tables (see ``docs/schema.md``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:
    from paradiag.dataset import Job


def open(path: Any, **options: Any) -> Job:  # noqa: A001 - the public entry point is named like the builtin
    """Open a trace folder, a single trace file or a paradiag cache; parse (and cache) only what changed."""
    from paradiag.dataset import open_job

    return open_job(path, **options)


__all__ = ["__version__", "open"]
