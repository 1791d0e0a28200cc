"""The what-if edit language: one change to the replayed steps (:class:`Edit`), its ``--set`` text
(:func:`parse_edit`) and what an edit compares a rank with (:class:`Peers`, from the job's layout, figures and stage
metrics). Applying an edit to the replay's timings is ``paradiag.analysis.whatif.apply``."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

PARTS = ("compute", "communication", "host")
PEER_MEDIAN = "peer-median"
COMPARABLE = "comparable"
REMOVE = "remove"
BALANCED = "balanced"


class EditError(ValueError):
    """A what-if edit that cannot be understood or does not fit the job."""


@dataclass(frozen=True)
class Edit:
    """One change to the replayed steps.

    ``target`` is ``rank`` (``ranks`` the ranks, ``part`` compute, communication or host), ``link`` (``ranks``
    the link's two ranks, or a group's ranks: every collective among them and every send/receive between them)
    or ``stages`` (every pipeline stage's compute scaled to the mean per micro-batch). ``value``: ``peer-median``
    (the durations of the rank's stage peers, kernel by kernel; for host: the peers' launch delay), a factor,
    ``comparable`` (a link's transfers: the median of comparable transfers elsewhere), ``remove`` (host: no
    launch delay beyond the peers'), ``balanced`` (compute: every rank of the stage runs each kernel for the
    stage's mean, as when a MoE router spreads its tokens evenly; stages: see ``_balance``). ``steps``: None for
    every step."""

    target: str
    ranks: tuple[int, ...] = ()
    part: str | None = None
    value: str | float = PEER_MEDIAN
    steps: tuple[int, ...] | None = None

    def text(self) -> str:
        """The ``--set`` form of the edit."""
        value = f"{self.value:g}" if isinstance(self.value, float) else self.value
        where = "" if self.steps is None else f":steps={'+'.join(map(str, self.steps))}"
        if self.target == "stages":
            return f"stages={value}{where}"
        who = "+".join(map(str, self.ranks)) if self.target == "rank" else "-".join(map(str, self.ranks))
        what = self.part if self.target == "rank" else "transfer"
        return f"{self.target}={who}:{what}={value}{where}"


def _int_list(text: str, what: str) -> tuple[int, ...]:
    out: list[int] = []
    for part in text.split("+"):
        lo, sep, hi = part.partition("-")
        if not (lo.isdigit() and (not sep or hi.isdigit())):
            raise EditError(f"{what}={text!r}: expected integers like 5, 1+3+5 or 4-7")
        out.extend(range(int(lo), int(hi) + 1) if sep else [int(lo)])
    return tuple(sorted(set(out)))


def _value(text: str, allowed: tuple[str, ...], where: str) -> str | float:
    if text in allowed:
        return text
    try:
        factor = float(text)
    except ValueError:
        raise EditError(
            f"{where}: {text!r} is neither {' nor '.join(allowed)} nor a factor like 0.8"
        ) from None
    if not factor > 0:
        raise EditError(f"{where}: the factor must be positive, not {text}")
    return factor


SET_HELP = (
    "rank=37:compute=peer-median | rank=37:compute=0.8 | rank=37:compute=balanced | rank=3+5:communication=peer-median | rank=4:host=remove | "
    "link=8-16:transfer=comparable | link=8-16:transfer=0.25 | stages=balanced; add :steps=1+2 to limit the steps"
)


def parse_edit(text: str) -> Edit:
    """``--set`` text -> Edit; an :class:`EditError` names what is wrong."""
    fields = [f.strip() for f in text.strip().split(":") if f.strip()]
    pairs = []
    for f in fields:
        key, eq, value = f.partition("=")
        if not eq or not value.strip():
            raise EditError(f"--set {text!r}: {f!r} is not key=value (e.g. {SET_HELP.split(' | ')[0]})")
        pairs.append((key.strip(), value.strip()))
    if not pairs:
        raise EditError(f"--set {text!r} is empty; expected e.g. {SET_HELP}")
    steps = None
    if pairs[-1][0] in ("step", "steps"):
        steps = _int_list(pairs.pop()[1], "steps")
    (target, who), rest = pairs[0], pairs[1:]
    if target == "stages":
        if who != BALANCED or rest:
            raise EditError(f"--set {text!r}: the stages edit is stages=balanced")
        return Edit("stages", value=BALANCED, steps=steps)
    if target not in ("rank", "ranks", "link"):
        raise EditError(f"--set {text!r}: {target!r} is not rank, link or stages")
    if len(rest) != 1:
        raise EditError(
            f"--set {text!r}: give one change after the {target}, e.g. {'compute=peer-median' if target != 'link' else 'transfer=comparable'}"
        )
    part, value = rest[0]
    if target == "link":
        ranks = tuple(int(r) for r in re.split(r"[-+]", who) if r.isdigit())
        if len(set(ranks)) < 2 or not re.fullmatch(r"\d+([-+]\d+)+", who):
            raise EditError(f"--set {text!r}: a link is two or more ranks, e.g. link=8-16")
        if part != "transfer":
            raise EditError(
                f"--set {text!r}: a link's change is transfer=comparable or transfer=FACTOR, not {part!r}"
            )
        return Edit(
            "link",
            tuple(sorted(set(ranks))),
            "transfer",
            _value(value, (COMPARABLE,), f"--set {text!r}"),
            steps,
        )
    if part not in PARTS:
        raise EditError(f"--set {text!r}: {part!r} is not one of {', '.join(PARTS)}")
    allowed = {"host": (PEER_MEDIAN, REMOVE), "compute": (PEER_MEDIAN, BALANCED)}.get(part, (PEER_MEDIAN,))
    edit_value = _value(value, allowed, f"--set {text!r}")
    if part == "host" and not isinstance(edit_value, str):
        raise EditError(
            f"--set {text!r}: a host stall is removed (host=remove or host=peer-median), not scaled"
        )
    return Edit("rank", _int_list(who, "rank"), part, edit_value, steps)


@dataclass(frozen=True)
class Peers:
    """What the edits compare a rank with: its stage peers, each (rank, step)'s launch delay (from the step's host
    start to its first device work) and each stage's compute per micro-batch (what ``stages=balanced`` splits)."""

    stage_of: Mapping[int, int]
    stages: Mapping[int, list[int]]  # stage -> its ranks
    launch_delay: Mapping[tuple[int, int], int]
    stage_compute: Mapping[int, int]  # stage -> compute per micro-batch (its least loaded rank's)
    micro_batches: int = 1
    virtual: int = 1
    stage_metrics: Mapping[str, Any] = field(default_factory=dict)  # what the stage_imbalance evidence quotes
    host_ranks: frozenset[int] = frozenset()  # CPU ranks: their host is their device (host lanes)


def peers_of(
    stage_of: Mapping[int, int],
    figures: Mapping[tuple[int, int], Mapping[str, Any]],
    metrics: Mapping[str, Any] | None,
    host_ranks: frozenset[int] = frozenset(),
) -> Peers:
    """The :class:`Peers` of a job from its layout, its per-(rank, step) figures, its stage metrics and its CPU
    ranks."""
    rows = (metrics or {}).get("stages") or []
    compute = {int(s["stage"]): int(s["compute_per_micro_batch_ns"]) for s in rows}
    delay = {k: int(v["launch_delay_ns"]) for k, v in figures.items() if v.get("launch_delay_ns") is not None}
    stages: dict[int, list[int]] = {}
    for rank, stage in sorted(stage_of.items()):
        stages.setdefault(stage, []).append(rank)
    m = metrics or {}
    return Peers(
        dict(stage_of),
        stages,
        delay,
        compute,
        int(m.get("micro_batches") or 1),
        int(m.get("virtual_stages") or 1),
        m,
        frozenset(host_ranks),
    )
