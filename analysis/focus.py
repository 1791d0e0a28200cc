"""What the first screen is about: from the Diagnosis, the top finding's subject (a rank, a stage, a link, the
clocks), the step it cites, the ranks every view shows on rows of their own, the overview's metric and a one-line
caption saying what it shows. The dashboard (``paradiag.app.data``) and the snapshot (``paradiag.app.static_page``) read
these rules from here, so both open on the same thing.

The per-(rank, step) figures a view colours by are computed here too: a rank's own time against its stage
(``stage_z``: what separates the rank everybody waits for from those who wait, in a synchronous step) and a
figure against the whole job's median (``job_pct``: a whole stage or a link's ranks, all alike within their stage,
stand out only against the others).
"""

from __future__ import annotations

import textwrap
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from paradiag.analysis import kinds
from paradiag.analysis.diagnosis_types import Diagnosis, Finding
from paradiag.analysis.frame import OUTLIER_DEVIATIONS, robust_z

# Findings about a rank itself (not a stage, a link or the clocks): their ranks are outlined as culprits (the
# registry's ``outlined``).
RANK_KINDS = kinds.OUTLINED
# The overview's metrics: name -> label. ``focus`` is the metric of what the top finding is about (Focus.metric).
METRICS = {
    "focus": "what the top finding is about (auto)",
    "own_z": "own time vs stage peers (robust z)",
    "compute_job_pct": "compute vs the job's median (%)",
    "transfer_job_pct": "communication once the peers are there vs the job's median (%)",
    "step_ms": "step time (ms)",
    "compute_ms": "compute (ms)",
    "launch_ms": "launch delay (ms)",
    "comm_exposed_ms": "exposed communication (ms)",
    "idle_ms": "idle (ms)",
    "wait_ms": "wait in collectives (ms)",
    "zscore": "compute vs stage peers (robust z)",
}
Z_METRICS = ("own_z", "zscore")
PCT_METRICS = ("compute_job_pct", "transfer_job_pct")
# What each kind of finding is seen by (the registry's ``metric``): a rank against its stage, a stage's compute or a
# link's transfers against the job.
METRIC_OF = {k: e.metric for k, e in kinds.KINDS.items()}
BASE_METRIC = "own_z"  # what a job without a finding is coloured by
DEFAULT_METRIC = "focus"  # the dropdown's first value: the metric of what the top finding is about
SEPARATES_PCT = 10.0  # a % against the job's median that tells a culprit from launch jitter (a few %)
CAPTION_WIDTH = 78  # characters per line of a caption (a figure's title does not wrap by itself)


@dataclass(frozen=True)
class Focus:
    """``kind``/``subject`` (rank, stage, link, clock, none) of the top finding; ``ranks`` it names (a stage: all
    of it), ``stage``, ``link``, ``step`` it cites; ``single``: the ranks that keep a row of their own in every
    view (the findings' culprit ranks, a link's ranks; not a whole stage, which is one row already); ``blamed``:
    rank -> kind of the finding that blames it (every view outlines these); ``reasons``: rank -> why, in a few
    words, for the views' row labels; ``metric``: the overview's metric that shows it; ``headline`` the finding in
    a line, ``caption`` the headline and what the overview is coloured by."""

    kind: kinds.Kind | None
    subject: str
    ranks: list[int]
    stage: int | None
    link: list[int] | None
    step: int | None
    metric: str
    headline: str
    caption: str
    single: list[int] = field(default_factory=list)
    blamed: dict[int, kinds.Kind] = field(default_factory=dict)
    reasons: dict[int, str] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Focus:
        return cls(
            **{
                **data,
                "blamed": {int(k): v for k, v in data["blamed"].items()},
                "reasons": {int(k): v for k, v in data["reasons"].items()},
            }
        )


def top_finding(d: Diagnosis) -> Finding | None:
    """The finding the first screen is about: the analysis' first (largest impact) that names ranks, a
    performance finding before an informative one (clock skew)."""
    named = [f for f in d.findings if f.culprit.ranks or f.culprit.link]
    return next((f for f in named if f.severity != "info"), named[0] if named else None)


def cited_step(f: Finding | Mapping[str, Any] | None) -> int | None:
    """The step a finding's evidence cites (the analysis' ``step``), else its first step."""
    if f is None:
        return None
    step, steps = (f.get("step"), f.get("steps")) if isinstance(f, Mapping) else (f.step, f.steps)
    if step is not None:
        return int(step)
    return int(steps[0]) if steps else None


def stage_z(values: np.ndarray, stages: Sequence[int]) -> np.ndarray:
    """Per step (column), each rank's (row's) robust z-score (``robust_z``) among the ranks of its stage."""
    out = np.full_like(values, np.nan, dtype=np.float64)
    stage_arr = np.asarray(stages)
    for stage in set(stages):
        rows = np.flatnonzero(stage_arr == stage)
        for j in range(values.shape[1]):
            column = values[rows, j]
            ok = np.isfinite(column)
            if ok.sum() >= 2:
                out[rows[ok], j] = robust_z(column[ok])
    return out


def job_pct(values: np.ndarray) -> np.ndarray:
    """Per step (column), each row against the median of all rows, in % (0: as the job's median rank)."""
    with np.errstate(all="ignore"):
        median = np.nanmedian(values, axis=0)
        return np.where(median > 0, 100 * (values / median - 1), np.nan)


def stands_apart(own_z: Sequence[float | None], single: bool) -> bool:
    """Whether a rank keeps a row of its own when alike ranks fold (heatmap, timeline, snapshot): the focus keeps
    it (``single``), or its own time (``own_z``, per step) leaves its stage's noise band in some step."""
    return (
        single or max((abs(v) for v in own_z if v is not None and v == v), default=0.0) >= OUTLIER_DEVIATIONS
    )


def figures(d: Diagnosis, ranks: Sequence[int], steps: Sequence[int]) -> dict[str, np.ndarray]:
    """The focus metrics, ranks x steps: ``own_z`` (compute and launch delay, the time a rank spends before its
    peers can go on, against its stage), ``compute_job_pct`` and ``transfer_job_pct`` (exposed communication
    less the wait for the peers: the transfer itself, against the job)."""
    stage = d.layout.stage_of
    own, compute, transfer = (np.full((len(ranks), len(steps)), np.nan) for _ in range(3))
    col = {s: j for j, s in enumerate(steps)}
    row = {r: i for i, r in enumerate(ranks)}
    for (rank, step), f in d.figures().items():
        if rank in row and step in col and f["compute_ns"] is not None:
            i, j = row[rank], col[step]
            own[i, j] = f["compute_ns"] + f["launch_delay_ns"]
            compute[i, j] = f["compute_ns"]
            b = d.breakdown(rank, step)
            if b is not None:
                transfer[i, j] = max(b.comm_exposed_ns - (f["wait_ns"] or 0), 0)
    return {
        "own_z": stage_z(own, [stage.get(r, 0) for r in ranks]),
        "compute_job_pct": job_pct(compute),
        "transfer_job_pct": job_pct(transfer),
    }


def focus_of(d: Diagnosis) -> Focus:
    """What the first screen of the job is about (see :class:`Focus`)."""
    top = top_finding(d)
    blamed = {
        r: next(k for k in named if k in RANK_KINDS)
        for r, named in d.culprits().items()
        if any(k in RANK_KINDS for k in named)
    }
    if top is None:
        caption = f"No finding stands out: coloured by {METRICS[BASE_METRIC]}"
        return Focus(
            None,
            "none",
            [],
            None,
            None,
            None,
            BASE_METRIC,
            "No finding stands out",
            caption,
            sorted(blamed),
            blamed,
            {},
        )
    ranks = list(dict.fromkeys([*top.culprit.ranks, *(top.culprit.link or [])]))
    step = cited_step(top)
    stage_of = d.layout.stage_of
    whole_stage = (
        bool(ranks)
        and len({stage_of.get(r) for r in ranks}) == 1
        and len(ranks) == sum(1 for s in stage_of.values() if s == stage_of.get(ranks[0]))
    )
    subject = kinds.of(top.kind).opens_on
    metric = METRIC_OF[top.kind]
    entry = kinds.of(top.kind)
    reasons = entry.reasons(d, top, ranks, step)
    headline = entry.headline(d, top, ranks, step, reasons)
    blamed = {**blamed, **{r: top.kind for r in ranks if r not in blamed}}
    single = sorted(
        {r for r, k in blamed.items() if k in RANK_KINDS}
        | (set() if whole_stage or subject == "stage" else set(ranks))
    )
    stage = (
        top.culprit.stage
        if top.culprit.stage is not None
        else (stage_of.get(ranks[0]) if whole_stage else None)
    )
    caption = f"{headline}: coloured by {METRICS[metric]}"
    if ranks and subject != "clock" and not separates(d, metric, ranks):
        elsewhere = " (the communication matrix does)" if subject == "link" else ""
        caption += f"; the ranks' own figures do not show it{elsewhere}"
    return Focus(
        top.kind,
        subject,
        ranks,
        stage,
        top.culprit.link,
        step,
        metric,
        headline,
        caption,
        single,
        blamed,
        reasons,
    )


def separates(d: Diagnosis, metric: str, ranks: Sequence[int]) -> bool:
    """Whether ``metric`` tells ``ranks`` from the others: in some step they are the farthest from 0 and beyond
    the noise (OUTLIER_DEVIATIONS robust deviations, SEPARATES_PCT % of the job's median). A link the job hides
    (every rank in its collectives spends the same) does not show in any rank's own figures."""
    everyone = sorted(d.layout.coords)
    steps = sorted({s for _, s in d.figures()})
    if metric not in ("own_z", *PCT_METRICS) or not everyone or not steps:
        return True
    values = np.abs(figures(d, everyone, steps)[metric])
    mine = np.isin(np.asarray(everyone), np.asarray(list(ranks)))
    with np.errstate(all="ignore"):
        top = float(np.nanmax(values[mine])) if mine.any() else float("nan")
        rest = float(np.nanmax(values[~mine])) if (~mine).any() else 0.0
    floor = OUTLIER_DEVIATIONS if metric == "own_z" else SEPARATES_PCT
    return top == top and top >= floor and top > (rest if rest == rest else 0.0)


def wrap(text: str, width: int = CAPTION_WIDTH) -> str:
    """A caption broken into lines (``<br>``) for a figure's title."""
    return "<br>".join(textwrap.wrap(text, width)) or text


def shown_ranks(
    d: Diagnosis,
    focus: Focus,
    ranks_in_order: Sequence[int],
    own_z: Mapping[int, Sequence[float | None]],
    selected: Sequence[int] | None,
    step: int | None,
    limits: tuple[int, int, int, int],
) -> list[int]:
    """The ranks a per-rank view (the timeline; the snapshot's) draws one by one: the selected ranks (else those the
    focus names, else the first rank) first, at most ``most_first``. Up to ``small_job`` ranks, then the ranks that
    wait for them the longest in ``step``: their stage peers and their pipeline neighbours (same DP and TP
    coordinates in the adjacent stages), ``most_small`` in all. In a larger job, where the others fold, then the
    ranks that keep a row of their own (:func:`stands_apart`), ``most`` in all. ``limits``: (small_job,
    most_first, most_small, most)."""
    small_job, most_first, most_small, most = limits
    first = list(dict.fromkeys(list(selected or []) or focus.ranks or list(ranks_in_order[:1])))[:most_first]
    if len(ranks_in_order) > small_job:
        single = set(focus.single)
        apart = [r for r in ranks_in_order if r not in first and stands_apart(own_z.get(r, ()), r in single)]
        return (first + apart)[:most]
    coords = d.layout.coords
    stages = {coords[r]["pp"] for r in first if r in coords}
    lines = {(coords[r]["dp"], coords[r]["tp"]) for r in first if r in coords}

    def near(r: int) -> bool:
        c = coords.get(r)
        if c is None:
            return False
        return c["pp"] in stages or (
            (c["pp"] - 1 in stages or c["pp"] + 1 in stages) and (c["dp"], c["tp"]) in lines
        )

    figs = d.figures()
    waited = {
        r: (figs.get((r, step)) or {}).get("wait_ns") or 0 if step is not None else 0 for r in ranks_in_order
    }
    near_ranks = sorted((r for r in ranks_in_order if r not in first and near(r)), key=lambda r: -waited[r])
    return first + near_ranks[: max(most_small - len(first), 0)]
