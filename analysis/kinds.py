"""The finding kinds: one entry per kind, which every layer reads.

An entry says what a finding of the kind blames (``blames``: the ranks themselves, an operator on them, a pipeline
stage, a link, the clocks), how its cause is removed in the what-if replay (``edits``: ``paradiag.analysis.whatif``),
how the first screen opens on it (``opens_on`` the Focus' subject, ``metric`` the overview's metric that shows it,
``outlined`` whether its ranks are outlined as culprits in every view, ``reasons`` why each rank it names stands out
in a few words and ``headline`` the finding in a line: ``paradiag.analysis.focus``), whether it is
extra work (``extra_work``: on CPU ranks its estimate from typical durations stands, not the replay's) or only
informative (``informative``: a data problem paradiag corrects, severity ``info``), and the simulator fault that
produces it (``fault``, with ``fault_needs_moe`` where only an MoE model has it: ``paradiag.simulator.faults``, whose
ground truth a finding is scored against by ``blames``).

The detectors stay where they are (``paradiag.analysis.findings``); what they name is a :data:`Kind`. The report
schema's enum (docs/report.schema.json) is generated from :data:`KINDS`: ``python -m paradiag.analysis.kinds``
rewrites it, and a test checks that it is current. Adding a kind is its entry here, its detector, its simulator
fault and its tests.
"""

from __future__ import annotations

import json
import re
import statistics
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal, cast, get_args

from paradiag.analysis.edit import BALANCED, COMPARABLE, PEER_MEDIAN, REMOVE, Edit
from paradiag.analysis.frame import OUTLIER_DEVIATIONS

if TYPE_CHECKING:  # the Diagnosis names its findings' kinds from here
    from paradiag.analysis.diagnosis_types import Diagnosis, Finding, OperatorImbalance

Kind = Literal[
    "slow_device",
    "slow_link",
    "stage_imbalance",
    "host_stall",
    "operator_hotspot",
    "clock_skew",
    "expert_imbalance",
]
Blames = Literal["rank", "operator", "stage", "link", "clock"]
Subject = Literal["rank", "stage", "link", "clock"]


def _steps(f: Finding) -> tuple[int, ...] | None:
    return tuple(f.steps) or None


def _ranks(f: Finding) -> tuple[int, ...]:
    return tuple(f.culprit.ranks)


def compute_to_peers(f: Finding) -> list[Edit]:
    """The culprit ranks' compute kernels run as long as their stage peers' (kernel by kernel)."""
    return [Edit("rank", _ranks(f), "compute", PEER_MEDIAN, _steps(f))]


def compute_balanced(f: Finding) -> list[Edit]:
    """The tokens spread evenly: every rank of the culprits' stage runs each kernel for the stage's mean (the experts
    that got fewer get more)."""
    return [Edit("rank", _ranks(f), "compute", BALANCED, _steps(f))]


def stall_removed(f: Finding) -> list[Edit]:
    """The culprit ranks' host starts their devices no later than their peers'. A stall inside wrappers (the
    culprit's ``operator``: a CPU rank's hooks, ``findings.step_figures``' ``hooks_ns``) is no launch delay the
    replay could remove: none, the finding keeps its own estimate."""
    if f.culprit.operator:
        return []
    return [Edit("rank", _ranks(f), "host", REMOVE, _steps(f))]


def link_comparable(f: Finding) -> list[Edit]:
    """The link's transfers as long as comparable transfers on other links."""
    return [Edit("link", tuple(f.culprit.link or ()), "transfer", COMPARABLE, _steps(f))]


def stages_balanced(f: Finding) -> list[Edit]:
    """The pipeline's layers split evenly over the stages (whole layers)."""
    return [Edit("stages", value=BALANCED)]


def nothing(f: Finding) -> list[Edit]:
    """No time lost: nothing to replay."""
    return []


# How the first screen words a finding (``paradiag.analysis.focus``): why each rank it names stands out, in a few
# words (a row label's tail), and the finding in a line. Each gets the Diagnosis, the finding, the ranks it names and
# the step it cites; a headline also gets the reasons.
Reasons = Callable[["Diagnosis", "Finding", list[int], int | None], dict[int, str]]
Headline = Callable[["Diagnosis", "Finding", list[int], int | None, dict[int, str]], str]


def peer_ratio(d: Diagnosis, rank: int, step: int | None, part: str) -> tuple[float, float] | None:
    """(the rank's ``part`` in ``step``, the median of its stage peers') in ms."""
    figs = d.figures()
    stage = d.layout.stage_of
    if step is None or (rank, step) not in figs:
        return None
    peers = [
        figs[(r, step)][part]
        for r, s in stage.items()
        if s == stage.get(rank) and r != rank and (r, step) in figs and figs[(r, step)][part] is not None
    ]
    mine = figs[(rank, step)][part]
    if not peers or mine is None:
        return None
    return mine / 1e6, statistics.median(peers) / 1e6


def stage_ratio(d: Diagnosis, stage: int | None) -> float | None:
    """A stage's compute per micro-batch against the median of the other stages'."""
    rows = d.stage_metrics.stages if d.stage_metrics else []
    mine = next((s.compute_per_micro_batch_ns for s in rows if s.stage == stage), None)
    others = [s.compute_per_micro_batch_ns for s in rows if s.stage != stage]
    return mine / statistics.median(others) if mine and others and statistics.median(others) else None


def rank_names(ranks: list[int], most: int = 4) -> str:
    """``rank 3``, ``ranks 1, 2``, ``ranks 0, 1, 2, 3 … (8 ranks)``."""
    shown = ", ".join(map(str, ranks[:most])) + (f" … ({len(ranks)} ranks)" if len(ranks) > most else "")
    return f"rank{'s' if len(ranks) > 1 else ''} {shown}"


def compute_reasons(d: Diagnosis, f: Finding, ranks: list[int], step: int | None) -> dict[int, str]:
    """Each rank's compute in the step against its stage peers' median: ``compute 1.42x``."""
    out: dict[int, str] = {}
    for r in ranks:
        found = peer_ratio(d, r, step, "compute_ns")
        if found is None or not found[1]:
            out[r] = f.kind.replace("_", " ")
        else:
            out[r] = f"compute {found[0] / found[1]:.2f}x"
    return out


HOT_REASON_WIDTH = 24  # an operator's name in a reason is cut to this many characters
STANDOUT_RATIO = 1.2  # an operator a rank runs this many times its peers' median ...


def standout_operators(d: Diagnosis, rank: int) -> list[OperatorImbalance]:
    """The operators whose time on ``rank`` stands out from its peers' (the Diagnosis' operator imbalance: this
    rank is the one responsible, OUTLIER_DEVIATIONS robust deviations and STANDOUT_RATIO x its peers' median),
    most extra time first: a hotspot's reason, and what the device detail lists first."""
    hot = [
        o
        for o in d.operators
        if o.rank == rank
        and o.excess_ns > 0
        and o.z >= OUTLIER_DEVIATIONS
        and (o.ratio or 0) >= STANDOUT_RATIO
    ]
    return sorted(hot, key=lambda o: -o.excess_ns)


def hotspot_reasons(d: Diagnosis, f: Finding, ranks: list[int], step: int | None) -> dict[int, str]:
    """Each rank's operator most above its peers' (:func:`standout_operators`) and by how much:
    ``flash_bwd_dq_dk_dv… 5.96x``; a rank without one: its compute against its stage peers'."""
    out = compute_reasons(d, f, ranks, step)
    for r in ranks:
        hot = standout_operators(d, r)
        if hot and hot[0].ratio:
            name = hot[0].short_name
            cut = name if len(name) <= HOT_REASON_WIDTH else name[: HOT_REASON_WIDTH - 1] + "…"
            out[r] = f"{cut} {hot[0].ratio:.2f}x"
    return out


def launch_reasons(d: Diagnosis, f: Finding, ranks: list[int], step: int | None) -> dict[int, str]:
    """Each rank's launch delay in the step beyond its stage peers' median: ``host +3.1 ms late``."""
    out: dict[int, str] = {}
    for r in ranks:
        if f.culprit.operator:  # held in its hooks (hooks_ns), not late to start
            found = peer_ratio(d, r, step, "hooks_ns")
            out[r] = f.kind.replace("_", " ") if found is None else f"hooks +{found[0] - found[1]:.1f} ms"
            continue
        found = peer_ratio(d, r, step, "launch_delay_ns")
        out[r] = f.kind.replace("_", " ") if found is None else f"host +{found[0] - found[1]:.1f} ms late"
    return out


def stage_reasons(d: Diagnosis, f: Finding, ranks: list[int], step: int | None) -> dict[int, str]:
    """The stage's compute per micro-batch against the other stages' (each rank's own compute without a
    pipeline's figures)."""
    if d.stage_metrics is None:
        return compute_reasons(d, f, ranks, step)
    ratio = stage_ratio(d, f.culprit.stage)
    return dict.fromkeys(ranks, f"stage compute {ratio:.2f}x") if ratio else {}


def link_reasons(d: Diagnosis, f: Finding, ranks: list[int], step: int | None) -> dict[int, str]:
    return dict.fromkeys(ranks, "slow link")


def clock_reasons(d: Diagnosis, f: Finding, ranks: list[int], step: int | None) -> dict[int, str]:
    return dict.fromkeys(ranks, "clock off (corrected)")


def _in_step(step: int | None) -> str:
    return f" in step {step}" if step is not None else ""


def _spend(ranks: list[int], reasons: dict[int, str]) -> tuple[str, str, str]:
    """(who, "spend"/"spends", how much more than the stage peers' compute), from the first rank's reason."""
    first = reasons.get(ranks[0], "") if ranks else ""
    their = "its" if len(ranks) == 1 else "their"
    times = (
        f" {first.removeprefix('compute ')} {their} stage peers' compute"
        if first.startswith("compute ")
        else f" more than {their} stage peers' compute"
    )
    return rank_names(ranks).capitalize(), "spends" if len(ranks) == 1 else "spend", times


def device_headline(
    d: Diagnosis, f: Finding, ranks: list[int], step: int | None, reasons: dict[int, str]
) -> str:
    """``Rank 3 spends 1.42x its stage peers' compute in step 5``."""
    who, spend, times = _spend(ranks, reasons)
    return f"{who} {spend}{times}{_in_step(step)}"


def hotspot_headline(
    d: Diagnosis, f: Finding, ranks: list[int], step: int | None, reasons: dict[int, str]
) -> str:
    """``Rank 3 spends 1.42x its stage peers' compute, in aten::mm in step 5`` (its compute, whatever the reasons
    name: the hot operator's own ratio)."""
    reasons = compute_reasons(d, f, ranks, step)
    if not f.culprit.operator:
        return device_headline(d, f, ranks, step, reasons)
    who, spend, times = _spend(ranks, reasons)
    return f"{who} {spend}{times}, in {f.culprit.operator}{_in_step(step)}"


def expert_headline(
    d: Diagnosis, f: Finding, ranks: list[int], step: int | None, reasons: dict[int, str]
) -> str:
    who, spend, times = _spend(ranks, reasons)
    return f"{who} (one expert-parallel index) {spend}{times}{_in_step(step)}"


def stall_headline(
    d: Diagnosis, f: Finding, ranks: list[int], step: int | None, reasons: dict[int, str]
) -> str:
    if f.culprit.operator:
        held = peer_ratio(d, ranks[0], step, "hooks_ns") if ranks else None
        more = f" {held[0] - held[1]:.1f} ms more than its peers" if held else " longer than its peers"
        return f"The host of {rank_names(ranks)} spends{more} in {f.culprit.operator} (hooks){_in_step(step)}"
    late = peer_ratio(d, ranks[0], step, "launch_delay_ns") if ranks else None
    delay = f" {late[0] - late[1]:.1f} ms late" if late else " late"
    return f"The host of {rank_names(ranks)} starts its device{delay}{_in_step(step)}"


def stage_headline(
    d: Diagnosis, f: Finding, ranks: list[int], step: int | None, reasons: dict[int, str]
) -> str:
    ratio = stage_ratio(d, f.culprit.stage)
    return (
        f"Stage {f.culprit.stage} computes {ratio:.2f}x the other stages per micro-batch"
        if ratio
        else f"Stage {f.culprit.stage} is the pipeline's bottleneck"
    )


def link_headline(
    d: Diagnosis, f: Finding, ranks: list[int], step: int | None, reasons: dict[int, str]
) -> str:
    cost = f"costs {f.impact_pct:.0f}% of the step" if f.impact_pct >= 1 else "the job hides most of it"
    return f"The link of {rank_names(f.culprit.link or ranks)} is slow ({cost})"


def clock_headline(
    d: Diagnosis, f: Finding, ranks: list[int], step: int | None, reasons: dict[int, str]
) -> str:
    hosts = ", ".join(f.culprit.hosts or []) or rank_names(ranks)
    return f"The clocks of {hosts} ran off (corrected before analysis; no time lost)"


@dataclass(frozen=True)
class KindEntry:
    """One finding kind (see the module docstring)."""

    name: Kind
    blames: Blames
    edits: Callable[[Finding], list[Edit]]
    opens_on: Subject
    metric: str  # the overview's metric (paradiag.analysis.focus.METRICS) that shows it
    outlined: bool  # a finding about ranks themselves: every view outlines them as culprits
    reasons: Reasons  # why each rank it names stands out, in a few words
    headline: Headline  # the finding in a line
    extra_work: bool = False
    informative: bool = False
    fault: str | None = None  # the simulator fault (paradiag.simulator.faults) that produces it
    fault_needs_moe: bool = False


KINDS: dict[Kind, KindEntry] = {
    e.name: e
    for e in (
        KindEntry(
            "slow_device",
            "rank",
            compute_to_peers,
            "rank",
            "own_z",
            outlined=True,
            reasons=compute_reasons,
            headline=device_headline,
            extra_work=True,
            fault="slow_device",
        ),
        KindEntry(
            "slow_link",
            "link",
            link_comparable,
            "link",
            "transfer_job_pct",
            outlined=False,
            reasons=link_reasons,
            headline=link_headline,
            fault="slow_link",
        ),
        KindEntry(
            "stage_imbalance",
            "stage",
            stages_balanced,
            "stage",
            "compute_job_pct",
            outlined=False,
            reasons=stage_reasons,
            headline=stage_headline,
            extra_work=True,
            fault="stage_imbalance",
        ),
        KindEntry(
            "host_stall",
            "rank",
            stall_removed,
            "rank",
            "own_z",
            outlined=True,
            reasons=launch_reasons,
            headline=stall_headline,
            fault="host_stall",
        ),
        KindEntry(
            "operator_hotspot",
            "operator",
            compute_to_peers,
            "rank",
            "own_z",
            outlined=True,
            reasons=hotspot_reasons,
            headline=hotspot_headline,
            extra_work=True,
            fault="operator_hotspot",
        ),
        KindEntry(
            "clock_skew",
            "clock",
            nothing,
            "clock",
            "own_z",
            outlined=False,
            reasons=clock_reasons,
            headline=clock_headline,
            informative=True,
            fault="clock_skew",
        ),
        KindEntry(
            "expert_imbalance",
            "rank",
            compute_balanced,
            "rank",
            "own_z",
            outlined=True,
            reasons=compute_reasons,
            headline=expert_headline,
            extra_work=True,
            fault="expert_imbalance",
            fault_needs_moe=True,
        ),
    )
}
assert tuple(KINDS) == get_args(Kind), "every Kind has one entry, in the order of the Literal"

NAMES: tuple[Kind, ...] = tuple(KINDS)
OUTLINED: tuple[Kind, ...] = tuple(
    k for k, e in KINDS.items() if e.outlined
)  # findings about ranks themselves
EXTRA_WORK: tuple[Kind, ...] = tuple(k for k, e in KINDS.items() if e.extra_work)


def check(name: str) -> Kind:
    """``name`` as a :data:`Kind`; a ValueError naming the known kinds for any other."""
    if name not in KINDS:
        raise ValueError(f"unknown finding kind {name!r}; known kinds: {', '.join(KINDS)}")
    return cast(Kind, name)


def of(name: str) -> KindEntry:
    """The entry of the kind ``name`` (a ValueError for an unknown one)."""
    return KINDS[check(name)]


def finding_edits(f: Finding) -> list[Edit]:
    """The cause of a finding (its JSON form), removed: the edits its kind's entry makes of its culprit and steps."""
    return of(f.kind).edits(f)


def faults() -> tuple[str, ...]:
    """The simulator faults that produce the kinds, in the kinds' order."""
    return tuple(e.fault for e in KINDS.values() if e.fault is not None)


def produced_by(fault: str) -> Kind:
    """The kind of the finding the simulator fault ``fault`` produces (a ValueError for a fault no kind names)."""
    found = next((k for k, e in KINDS.items() if e.fault == fault), None)
    if found is None:
        raise ValueError(f"no finding kind is produced by the fault {fault!r}; faults: {', '.join(faults())}")
    return found


def scenario_kinds(moe: bool) -> tuple[Kind, ...]:
    """The kinds whose simulator fault a job of a dense model (``moe`` False) or an MoE one can have."""
    return tuple(k for k, e in KINDS.items() if e.fault is not None and (moe or not e.fault_needs_moe))


# The report schema's enum of finding kinds, on one line of docs/report.schema.json.
_SCHEMA_ENUM = re.compile(r'("kind": \{"enum": )\[[^\]]*\](\},?\n\s*"culprit")')


def schema_text(text: str) -> str:
    """docs/report.schema.json's text with the findings' kind enum made :data:`NAMES` (the rest kept as written)."""
    new, count = _SCHEMA_ENUM.subn(lambda m: m.group(1) + json.dumps(list(NAMES)) + m.group(2), text)
    if count != 1:
        raise ValueError(
            'docs/report.schema.json: the findings\' kind enum was not found (one line: "kind": {"enum": [...]}, before "culprit")'
        )
    return new


def main(argv: list[str]) -> int:
    """``python -m paradiag.analysis.kinds [SCHEMA]``: rewrite the report schema's kind enum from the registry."""
    path = Path(argv[0]) if argv else Path(__file__).resolve().parents[1] / "docs" / "report.schema.json"
    text = path.read_text()
    new = schema_text(text)
    if new != text:
        path.write_text(new)
    print(f"{path}: finding kinds {', '.join(NAMES)}{'' if new != text else ' (unchanged)'}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
