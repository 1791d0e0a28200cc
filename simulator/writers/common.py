"""What every writer shares: the wall clock the job ran at, host names and process ids, file finishing."""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path
from typing import Any

from paradiag.simulator.engine import mix
from paradiag.simulator.job import Job

EPOCH_NS = 1_735_722_000_000_000_000  # 2025-01-01 09:00:00 UTC: when the simulated job ran
STREAM_IDS = {"compute": 7, "tp": 13, "dp": 17, "pp": 21, "ep": 25, "world": 29}


def host_name(job: Job, rank: int) -> str:
    return f"sim-node{job.mesh.node(rank):03d}"


def pid(job: Job, rank: int) -> int:
    return 200_000 + int((mix(job.cfg.seed, rank, 17) + 1.0) * 1_400_000)


def escape(text: str) -> str:
    return json.dumps(text)


def gzip_file(src: Path, dst: Path) -> None:
    """Compress ``src`` into ``dst`` deterministically (no name, no mtime in the header) and remove ``src``.
    ISA-L's gzip (a paradiag dependency) is several times faster than zlib at a similar ratio."""
    try:
        from isal import igzip

        opener: Any = igzip.GzipFile
    except ImportError:  # pragma: no cover - isal is a dependency
        opener = gzip.GzipFile
    with (
        open(src, "rb") as fin,
        open(dst, "wb") as raw,
        opener(filename="", mode="wb", fileobj=raw, mtime=0) as out,
    ):
        while chunk := fin.read(1 << 22):
            out.write(chunk)
    os.remove(src)


def fmt(us: float) -> str:
    """Microseconds with nanosecond precision, as recent profilers print them."""
    return f"{us:.3f}"
