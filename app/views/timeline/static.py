"""The timeline's dash-free part: which ranks it draws one by one and in what rows (the live view's rule too:
``live.py`` draws them), and the snapshot's render of the step a new page opens on."""

from __future__ import annotations

from typing import Any

from paradiag.app.data import overview as overview_data
from paradiag.app.data.common import step_span
from paradiag.app.data.overview import focus_of, opening_step
from paradiag.app.data.shapes import FoldEntry
from paradiag.app.data.timeline import timeline_data
from paradiag.app.data.timeline_fold import LIMITS, timeline_rows
from paradiag.app.figures.timeline import timeline_figure
from paradiag.job import Job

# The snapshot's: a wider page, aggregated to screen resolution (a 64-rank snapshot stays under 10 MB).
STATIC_PIXELS, STATIC_MAX_PRIMITIVES = 1400, 12_000


def shown_ranks(job: Job, selected: list[int] | None, step: int | None = None) -> list[int]:
    """The ranks drawn one by one: the selected ranks (else the ranks the top finding names) first. Up to
    SMALL_JOB ranks, then the ranks that wait for them the longest in ``step`` (default: the step a new page
    opens on): their stage peers and their pipeline neighbours, up to MAX_RANKS in all. In a larger job, then
    the ranks that stand apart (the heatmap's rule), the others fold (``rows_of``). The rule is the analysis'
    (``paradiag.analysis.focus.shown_ranks``), which the snapshot reads too."""
    return overview_data.shown_ranks(job, selected, step, LIMITS)


def rows_of(job: Job, ranks: list[int], expand: list[str] | None) -> list[int | FoldEntry]:
    """What the timeline draws top to bottom: ``ranks``, then (beyond SMALL_JOB ranks) every other rank in the
    fold of its stage or, where ``expand`` opened them, of its mesh group or on its own."""
    return timeline_rows(job, ranks, expand)


def static(job: Job, report: dict[str, Any]) -> list[tuple[str, Any]]:
    """The timeline of the step a new page opens on, the ranks it opens on first (the analysis' rule)."""
    step = opening_step(job)
    if step is None:
        return []
    ranks = shown_ranks(job, None, step)
    entries = rows_of(job, ranks, None)
    folded = any(isinstance(e, dict) for e in entries)
    window = step_span(job, step, None if folded else ranks)
    data = timeline_data(
        job, entries, window, pixels=STATIC_PIXELS, max_primitives=STATIC_MAX_PRIMITIVES, step=step
    )
    shown = ", ".join(map(str, ranks[:12])) + (" ..." if len(ranks) > 12 else "")
    return [
        (
            f"Timeline of step {step} (ranks {shown}{', the others folded' if folded else ''})",
            timeline_figure(data, marked=list(focus_of(job).ranks)),
        )
    ]
