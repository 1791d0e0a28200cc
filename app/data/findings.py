"""The Diagnosis' ranked findings, flattened for the summary bar (culprit fields on top): the app's one formatter
of a finding."""

from __future__ import annotations

from typing import Any

from paradiag.app.data.common import diagnosis
from paradiag.job import Job


def findings_of(job: Job) -> list[dict[str, Any]]:
    out = []
    for f in diagnosis(job).findings:
        c = f.culprit
        link = {"ranks": c.link} if c.link is not None else None
        out.append({**f.as_json(), "ranks": c.ranks, "stage": c.stage, "operator": c.operator, "link": link})
    return out
