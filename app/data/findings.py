"""The ranked findings of the analysis report, flattened for the summary bar (culprit fields on top)."""

from __future__ import annotations

from typing import Any

from paradiag.app.data.overview import report
from paradiag.dataset import Job


def findings_of(job: Job) -> list[dict[str, Any]]:
    out = []
    for f in report(job).get("findings") or []:
        culprit = f.get("culprit") or {}
        out.append({**f, "ranks": culprit.get("ranks") or [], "stage": culprit.get("stage"), "operator": culprit.get("operator"), "link": culprit.get("link")})
    return out
