"""Comparing two runs: what got slower or faster, where, and which findings appeared or disappeared.

Pure functions over two ``paradiag.report/1`` documents and the two jobs' per-operator figures. Ranks are matched
by mesh coordinates (folding an axis whose degree differs; by rank id when a job has no coordinates), stages by
index, operators by name (and, across formats, where names cannot match, by category).
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, NotRequired, TypedDict

import numpy as np

from paradiag import schema

if TYPE_CHECKING:
    from paradiag.analysis.frame import Frame
    from paradiag.analysis.report import RankEntry, Report

COMPARE_SCHEMA = "paradiag.compare/1"
TOP = 10
NOISE_PCT = 2.0  # changes smaller than this are jitter, not a change

# The document's shapes (docs/compare.md), as TypedDicts: plain dicts at run time, checked by mypy where they are
# built (here) and read (the compare panel, the diff page, the CLI).


class Delta(TypedDict):
    """Both values and the relative change (percent of the baseline; None without a baseline)."""

    baseline: float | None
    candidate: float | None
    delta_pct: float | None


class RankDelta(TypedDict):
    """A paired position (one rank, or the replicas of a folded axis), each side the median over its ranks."""

    rank: int | None  # the candidate's rank where one rank stands on each side
    label: str
    position: dict[str, int]  # its mesh coordinates on the axes kept
    baseline_ranks: list[int]
    candidate_ranks: list[int]
    step_time_ns: Delta
    compute_ns: Delta
    comm_exposed_ns: Delta
    idle_ns: Delta
    window_ns: Delta


class OperatorDelta(TypedDict):
    operator: str  # its name, or its category where the runs' formats differ
    category: str | None
    position: Any
    time_ns_per_step: Delta
    change_ns_per_step: float
    only_in: str | None  # "baseline" or "candidate" where only one run has it


class OperatorDeltas(TypedDict):
    matched_by: str  # "name" or "category"
    slower: list[OperatorDelta]  # most change first
    faster: list[OperatorDelta]


class TopChange(TypedDict):
    kind: str | None  # a finding's kind, "rank_slower", "operator_slower", or None when nothing moved
    culprit: dict[str, Any] | None
    evidence: str


class CompareDoc(TypedDict):
    """The ``paradiag.compare/1`` document; one that was ``refused`` holds none of the changes."""

    schema: str
    baseline: dict[str, Any]  # the run's facts and layout in words
    candidate: dict[str, Any]
    refused: str | None  # why the runs cannot be compared
    rank_pairing: dict[str, Any]
    step_time_ns: NotRequired[Delta]
    compute_ns_median_rank: NotRequired[Delta]
    ranks: NotRequired[list[RankDelta]]
    stages: NotRequired[list[dict[str, Any]]]
    operators: NotRequired[OperatorDeltas]
    findings: NotRequired[dict[str, list[dict[str, Any]]]]
    top_change: NotRequired[TopChange]


# Operator categories, to compare GPU kernels with NPU kernels of the same model (first match wins).
CATEGORIES = (
    ("attention", re.compile(r"attention|flash|fmha|softmax|sdpa", re.I)),
    (
        "matmul",
        re.compile(
            r"gemm|matmul|\bmm\b|aten::mm|aten::bmm|aten::addmm|cublas|cutlass|sm\d+_xmma|MatMul|BatchMatMul|conv",
            re.I,
        ),
    ),
    ("norm", re.compile(r"norm", re.I)),
    ("embedding", re.compile(r"embedding|gather", re.I)),
    ("optimizer", re.compile(r"adam|sgd|optimizer|multi_tensor", re.I)),
    (
        "elementwise",
        re.compile(r"elementwise|add|mul|gelu|silu|relu|dropout|cast|copy|fill|vectorized", re.I),
    ),
)


def category_of(name: str) -> str:
    """A coarse operator category that means the same on GPU and NPU."""
    for category, pattern in CATEGORIES:
        if pattern.search(name):
            return category
    return "other compute"


def operator_times(frame: Frame, steps: int) -> dict[str, dict[str, Any]]:
    """Per compute kernel name: device time per step summed over ranks, calls per step, its category and its
    position (median order of first appearance within a step)."""
    compute = frame.of_kind(schema.COMPUTE)
    if len(compute) == 0:
        return {}
    dur = compute.end - compute.start
    per_name = np.bincount(compute.name, weights=dur, minlength=len(frame.names))
    calls = np.bincount(compute.name, minlength=len(frame.names))
    order = np.lexsort((compute.start, compute.step, compute.rank))
    first_seen: dict[int, int] = {}
    for position, code in enumerate(compute.name[order][:20000].tolist()):
        first_seen.setdefault(code, position)
    steps = max(steps, 1)
    return {
        frame.names[code]: {
            "time_ns_per_step": float(per_name[code]) / steps,
            "calls_per_step": float(calls[code]) / steps,
            "category": category_of(frame.names[code]),
            "position": first_seen.get(code),
        }
        for code in np.flatnonzero(calls).tolist()
    }


def by_category(ops: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for op in ops.values():
        entry = out.setdefault(
            op["category"],
            {"time_ns_per_step": 0.0, "calls_per_step": 0.0, "category": op["category"], "position": None},
        )
        entry["time_ns_per_step"] += op["time_ns_per_step"]
        entry["calls_per_step"] += op["calls_per_step"]
    return out


def delta(base: float | None, cand: float | None) -> Delta:
    """Both values and the relative change (percent of the baseline)."""
    pct = None if not base or cand is None else round(100.0 * (cand - base) / base, 2)
    return {"baseline": base, "candidate": cand, "delta_pct": pct}


def _median_step(report: Report) -> float | None:
    value = report["metrics"].get("step_time_ns", {}).get("median")
    return float(value) if value is not None else None


MESH_AXES = ("pp", "tp", "ep", "dp")  # a position is named stage first, as the views list ranks


def _coords(report: Report) -> dict[int, dict[str, int]] | None:
    """Rank -> mesh coordinates, None when the report gives none for some rank it lists."""
    coords = {
        int(r): c for r, c in ((report["job"].get("parallel_layout") or {}).get("coords") or {}).items()
    }
    ranks = [e["rank"] for e in report["ranks"]]
    return coords if ranks and all(r in coords for r in ranks) else None


def rank_pairing(base: Report, cand: Report) -> dict[str, Any]:
    """Which ranks of the two runs are compared with which. By mesh coordinates where both runs have them: on the
    axes whose degree both runs share, a position pairs the ranks that hold it; an axis whose degree differs is
    folded (its replicas' median stands for the position). Else by rank id. ``groups`` lists (position, baseline
    ranks, candidate ranks); ``unpaired`` the ranks of either run left out."""
    b_coords, c_coords = _coords(base), _coords(cand)
    b_ranks, c_ranks = [e["rank"] for e in base["ranks"]], [e["rank"] for e in cand["ranks"]]
    groups: list[tuple[dict[str, int], list[int], list[int]]]
    if b_coords is None or c_coords is None:
        common = set(c_ranks)
        groups = [({}, [r], [r]) for r in b_ranks if r in common]
        by, kept, folded = "rank id", [], {}
    else:
        size = {
            n: {a: len({c[a] for c in coords.values()}) for a in MESH_AXES}
            for n, coords in (("b", b_coords), ("c", c_coords))
        }
        kept = [a for a in MESH_AXES if size["b"][a] == size["c"][a]]
        folded = {a: [size["b"][a], size["c"][a]] for a in MESH_AXES if a not in kept}
        b_at, c_at = _positions(b_ranks, b_coords, kept), _positions(c_ranks, c_coords, kept)
        groups = [
            (dict(zip(kept, key, strict=True)), b_at[key], c_at[key]) for key in sorted(b_at) if key in c_at
        ]
        if not folded:  # one rank per position: listed by this job's rank id, as the other views list ranks
            groups.sort(key=lambda g: g[2][0])
        by = "mesh coordinates"
    paired_b = {r for _, b, _ in groups for r in b}
    paired_c = {r for _, _, c in groups for r in c}
    return {
        "by": by,
        "axes": [a for a in kept if any(p.get(a) for p, _, _ in groups)],
        "folded": folded,
        "groups": groups,
        "unpaired": {
            "baseline": [r for r in b_ranks if r not in paired_b],
            "candidate": [r for r in c_ranks if r not in paired_c],
        },
    }


def _positions(
    ranks: list[int], coords: dict[int, dict[str, int]], axes: list[str]
) -> dict[tuple[int, ...], list[int]]:
    out: dict[tuple[int, ...], list[int]] = {}
    for r in ranks:
        out.setdefault(tuple(coords[r][a] for a in axes), []).append(r)
    return out


def pairing_text(pairing: dict[str, Any]) -> str:
    """One sentence: how ranks were paired and what was left unpaired."""
    if pairing["by"] == "rank id":
        text = "ranks paired by rank id (one job has no mesh coordinates)"
    elif not pairing["folded"]:
        moved = sum(1 for _, b, c in pairing["groups"] if b != c)
        text = "ranks paired by mesh coordinates" + (
            f" ({moved} hold a different rank id in the two jobs)" if moved else ""
        )
    else:
        on = ", ".join(pairing["axes"]) or "none: the whole job"
        folded = ", ".join(
            f"{a.upper()} ({b} in the baseline, {c} here)" for a, (b, c) in pairing["folded"].items()
        )
        text = f"ranks paired by mesh position ({on}); folded: {folded}, each side's median over the ranks of a position"
    gone = [
        f"{len(v)} {side} rank{'s' if len(v) > 1 else ''} ({_short(v)})"
        for side, v in pairing["unpaired"].items()
        if v
    ]
    return text + (f"; unpaired: {', '.join(gone)}" if gone else "; every rank paired")


def _short(ranks: list[int]) -> str:
    return ", ".join(map(str, ranks[:8])) + (", …" if len(ranks) > 8 else "")


def rank_deltas(base: Report, cand: Report, pairing: dict[str, Any]) -> list[RankDelta]:
    """Per paired position (one rank, or the replicas of a folded axis): step time and breakdown changes, each side
    the median over its ranks."""
    b_by, c_by = {e["rank"]: e for e in base["ranks"]}, {e["rank"]: e for e in cand["ranks"]}
    out: list[RankDelta] = []
    for position, b_ranks, c_ranks in pairing["groups"]:
        single = len(b_ranks) == len(c_ranks) == 1
        b, c = [b_by[r] for r in b_ranks], [c_by[r] for r in c_ranks]
        out.append(
            {
                "rank": c_ranks[0] if single else None,
                "label": _label(position, b_ranks, c_ranks, pairing["axes"]),
                "position": position,
                "baseline_ranks": b_ranks,
                "candidate_ranks": c_ranks,
                "step_time_ns": _change(b, c, "step_time_ns", "median"),
                "compute_ns": _change(b, c, "breakdown", "compute_ns"),
                "comm_exposed_ns": _change(b, c, "breakdown", "comm_exposed_ns"),
                "idle_ns": _change(b, c, "breakdown", "idle_ns"),
                "window_ns": _change(b, c, "breakdown", "window_ns"),
            }
        )
    return out


def _change(base: list[RankEntry], cand: list[RankEntry], section: str, key: str) -> Delta:
    """The median of ``section``'s ``key`` over each side's rank entries, and its change."""
    return delta(
        _median([_get(e, section, key) for e in base]), _median([_get(e, section, key) for e in cand])
    )


def _label(position: dict[str, int], b_ranks: list[int], c_ranks: list[int], axes: list[str]) -> str:
    if len(b_ranks) == len(c_ranks) == 1:
        return str(c_ranks[0]) if b_ranks == c_ranks else f"{b_ranks[0]}→{c_ranks[0]}"
    return " ".join(f"{a}{position[a]}" for a in axes) or "all ranks"


def _median(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return float(statistics.median(known)) if known else None


def _get(entry: Mapping[str, Any], section: str, key: str) -> float | None:
    part = entry.get(section)
    value = part.get(key) if isinstance(part, dict) else None
    return float(value) if value is not None else None


def stage_deltas(base: Report, cand: Report) -> list[dict[str, Any]]:
    """Per pipeline stage, when both runs have as many stages (else stage i is not the same part of the model):
    compute per micro-batch."""
    b_stages = (base["metrics"].get("pipeline") or {}).get("stages") or []
    c_stages = {s["stage"]: s for s in (cand["metrics"].get("pipeline") or {}).get("stages") or []}
    if len(b_stages) != len(c_stages):
        return []
    return [
        {
            "stage": s["stage"],
            "ranks": s.get("ranks"),
            "compute_per_micro_batch_ns": delta(
                s.get("compute_per_micro_batch_ns"), c_stages[s["stage"]].get("compute_per_micro_batch_ns")
            ),
        }
        for s in b_stages
        if s["stage"] in c_stages
    ]


def operator_deltas(
    base_ops: dict[str, dict[str, Any]], cand_ops: dict[str, dict[str, Any]], same_format: bool
) -> OperatorDeltas:
    """Operators that got slower or faster, by name within a format, by category across formats."""
    if not same_format or not set(base_ops) & set(cand_ops):
        base_ops, cand_ops, matched_by = by_category(base_ops), by_category(cand_ops), "category"
    else:
        matched_by = "name"
    rows: list[OperatorDelta] = []
    for name in set(base_ops) | set(cand_ops):
        b, c = base_ops.get(name), cand_ops.get(name)
        b_time = b["time_ns_per_step"] if b else 0.0
        c_time = c["time_ns_per_step"] if c else 0.0
        rows.append(
            {
                "operator": name,
                "category": (b or c or {}).get("category"),
                "position": (b or c or {}).get("position"),
                "time_ns_per_step": delta(b_time, c_time),
                "change_ns_per_step": c_time - b_time,
                "only_in": None if b and c else ("candidate" if c else "baseline"),
            }
        )
    rows.sort(key=lambda r: -abs(r["change_ns_per_step"]))
    return {
        "matched_by": matched_by,
        "slower": [r for r in rows if r["change_ns_per_step"] > 0][:TOP],
        "faster": [r for r in rows if r["change_ns_per_step"] < 0][:TOP],
    }


def _finding_key(f: dict[str, Any]) -> tuple[str, str]:
    culprit = f.get("culprit") or {}
    return f["kind"], repr(sorted((k, repr(v)) for k, v in culprit.items()))


def finding_changes(base: Report, cand: Report) -> dict[str, list[dict[str, Any]]]:
    b_keys = {_finding_key(f): f for f in base["findings"]}
    c_keys = {_finding_key(f): f for f in cand["findings"]}
    return {
        "appeared": [f for k, f in c_keys.items() if k not in b_keys],
        "disappeared": [f for k, f in b_keys.items() if k not in c_keys],
        "persisting": [f for k, f in c_keys.items() if k in b_keys],
    }


def top_change(
    step: Delta,
    ranks: list[RankDelta],
    findings: dict[str, list[dict[str, Any]]],
    operators: OperatorDeltas,
) -> TopChange:
    """The one change to look at first: a finding that appeared, else the rank that slowed most, else the
    operator that slowed most; ``None`` kind when nothing moved beyond noise."""
    if findings["appeared"]:
        f = max(findings["appeared"], key=lambda x: x.get("impact_pct", 0))
        return {
            "kind": f["kind"],
            "culprit": f.get("culprit"),
            "evidence": f"new finding: {f.get('evidence', f['kind'])}",
        }
    if findings["disappeared"] and (step["delta_pct"] or 0) < -NOISE_PCT:
        f = max(findings["disappeared"], key=lambda x: x.get("impact_pct", 0))
        return {
            "kind": f["kind"],
            "culprit": f.get("culprit"),
            "evidence": f"fixed: {f.get('evidence', f['kind'])}",
        }
    slowed = [r for r in ranks if (r["compute_ns"]["delta_pct"] or 0) > NOISE_PCT]
    if slowed:
        r = max(slowed, key=lambda x: x["compute_ns"]["delta_pct"] or 0)
        who = f"rank {r['label']}" if r["rank"] is not None else f"position {r['label']}"
        return {
            "kind": "rank_slower",
            "culprit": {"ranks": r["candidate_ranks"]},
            "evidence": f"{who} computes {r['compute_ns']['delta_pct']:+.1f}% more",
        }
    if operators["slower"]:
        op = operators["slower"][0]
        pct = op["time_ns_per_step"]["delta_pct"]
        if pct is None or pct > NOISE_PCT:
            return {
                "kind": "operator_slower",
                "culprit": {"operator": op["operator"]},
                "evidence": f"{op['operator']} takes {op['change_ns_per_step'] / 1e6:+.2f} ms per step",
            }
    return {"kind": None, "culprit": None, "evidence": "no change beyond noise"}


def _facts(report: Report) -> dict[str, Any]:
    job = report["job"]
    return {
        **{
            k: job.get(k)
            for k in ("source", "content_hash", "formats", "device_type", "num_ranks", "world_size")
        },
        "layout": layout_text(report),
    }


def layout_text(report: Report) -> str:
    """A job's size and parallel layout in words: ``256 ranks (DP4 × TP8 × PP8)``."""
    job = report["job"]
    layout = job.get("parallel_layout") or {}
    axes = " × ".join(
        f"{a.upper()}{layout[a]}"
        for a in ("dp", "tp", "pp", "ep")
        if isinstance(layout.get(a), int) and layout[a] > 1
    )
    size = job.get("num_ranks") or len(report.get("ranks") or [])
    return f"{size} rank{'s' if size != 1 else ''} ({axes or 'no parallel layout known'})"


def _degree(report: Report, axis: str) -> int | None:
    value = (report["job"].get("parallel_layout") or {}).get(axis)
    return value if isinstance(value, int) and value > 0 else None


def incomparable(base: Report, cand: Report, pairing: dict[str, Any]) -> str | None:
    """Why the two runs cannot be compared position by position, naming both sizes and layouts; None when they can.

    Two runs compare when each paired position does the same share of the same model in both: the pipelines have
    the same depth (else stage i is not the same part of the model), and a tensor- or expert-parallel degree that
    differs leaves at least one mesh axis of more than one position to pair on (else the whole of one job would
    stand against the whole of the other, and its median rank does a different share of the work). A data-parallel
    degree may differ (its replicas are folded: each does the same work). Rank counts alone differing is no reason:
    without mesh coordinates ranks pair by id and the unpaired ones are named."""
    reasons = []
    b_pp, c_pp = _degree(base, "pp"), _degree(cand, "pp")
    if b_pp is not None and c_pp is not None and b_pp != c_pp:
        reasons.append(
            f"their pipelines differ in depth ({b_pp} stages against {c_pp}), so a stage of one is not the same part of the model as a stage of the other"
        )
    elif not pairing["groups"]:
        reasons.append("no rank of one holds a place in the mesh that a rank of the other holds")
    elif (
        pairing["by"] == "mesh coordinates" and set(pairing["folded"]) & {"tp", "ep"} and not pairing["axes"]
    ):
        split = ", ".join(
            f"{a.upper()} {b} against {c}" for a, (b, c) in pairing["folded"].items() if a in ("tp", "ep")
        )
        reasons.append(
            f"they split the model differently ({split}) and share no mesh axis to pair ranks on, so no rank of one does the work of a rank of the other"
        )
    if not reasons:
        return None
    return f"cannot compare the baseline, {layout_text(base)}, with this job, {layout_text(cand)}: {'; '.join(reasons)}. Pick a baseline of the same pipeline depth and model split."


def kind_text(kind: str | None) -> str:
    """A finding or change kind in words: ``slow_link`` -> ``slow link``."""
    return (kind or "").replace("_", " ")


def culprit_text(culprit: Any) -> str:
    """A finding's culprit in words: ``link between ranks 70, 78, 86, 94``, ``stage 5 (ranks 40–47)``,
    ``rank 3, operator aten::mm``."""
    if not isinstance(culprit, dict):
        return "" if culprit is None else str(culprit)
    parts: list[str] = []
    link = culprit.get("link")
    if isinstance(link, dict):
        for what in ("ranks", "nodes"):
            if link.get(what):
                parts.append(f"link between {what} {_ranges(link[what])}")
    if culprit.get("stage") is not None:
        ranks = culprit.get("ranks")
        parts.append(f"stage {culprit['stage']}" + (f" (ranks {_ranges(ranks)})" if ranks else ""))
    elif culprit.get("ranks") and not isinstance(link, dict):
        ranks = list(culprit["ranks"])
        parts.append(f"rank{'s' if len(ranks) > 1 else ''} {_ranges(ranks)}")
    if culprit.get("hosts"):
        parts.append(f"hosts {', '.join(map(str, culprit['hosts']))}")
    if culprit.get("operator"):
        parts.append(f"operator {culprit['operator']}")
    known = {"link", "stage", "ranks", "hosts", "operator"}
    parts += [f"{k} {v}" for k, v in culprit.items() if k not in known and v not in (None, [], "", {})]
    return ", ".join(parts)


def _ranges(values: Any) -> str:
    """Numbers with runs of three or more as ranges: ``40–47``, ``70, 78, 86, 94``."""
    if not isinstance(values, list | tuple) or not all(isinstance(v, int) for v in values):
        return str(values)
    runs: list[list[int]] = []
    for v in sorted(set(values)):
        if runs and v == runs[-1][-1] + 1:
            runs[-1].append(v)
        else:
            runs.append([v])
    return ", ".join(f"{r[0]}–{r[-1]}" if len(r) > 2 else ", ".join(map(str, r)) for r in runs)


def change_text(top: TopChange) -> str:
    """The top change in words: what kind, about whom, and its evidence."""
    if not top.get("kind"):
        return str(top.get("evidence") or "no change beyond noise")
    who = culprit_text(top.get("culprit"))
    return f"{kind_text(top['kind'])}" + (f" of {who}" if who else "") + f": {top['evidence']}"


def compare(
    base: Report,
    cand: Report,
    base_ops: dict[str, dict[str, Any]],
    cand_ops: dict[str, dict[str, Any]],
) -> CompareDoc:
    """The ``paradiag.compare/1`` document for a baseline and a candidate run. Runs that cannot be compared
    (``incomparable``) get a document with ``refused`` (why, in words) and no deltas."""
    pairing = rank_pairing(base, cand)
    refused = incomparable(base, cand, pairing)
    if refused:
        return {
            "schema": COMPARE_SCHEMA,
            "baseline": _facts(base),
            "candidate": _facts(cand),
            "refused": refused,
            "rank_pairing": {
                **{k: v for k, v in pairing.items() if k != "groups"},
                "text": pairing_text(pairing),
            },
        }
    same_format = base["job"].get("device_type") == cand["job"].get("device_type")
    step = delta(_median_step(base), _median_step(cand))
    ranks = rank_deltas(base, cand, pairing)
    findings = finding_changes(base, cand)
    operators = operator_deltas(base_ops, cand_ops, same_format)
    compute_b = [r["compute_ns"]["baseline"] for r in ranks if r["compute_ns"]["baseline"] is not None]
    compute_c = [r["compute_ns"]["candidate"] for r in ranks if r["compute_ns"]["candidate"] is not None]
    return {
        "schema": COMPARE_SCHEMA,
        "baseline": _facts(base),
        "candidate": _facts(cand),
        "refused": None,
        "step_time_ns": step,
        "compute_ns_median_rank": delta(
            statistics.median(compute_b) if compute_b else None,
            statistics.median(compute_c) if compute_c else None,
        ),
        "rank_pairing": {
            **{k: v for k, v in pairing.items() if k != "groups"},
            "text": pairing_text(pairing),
        },
        "ranks": ranks,
        "stages": stage_deltas(base, cand),
        "operators": operators,
        "findings": findings,
        "top_change": top_change(step, ranks, findings, operators),
    }
