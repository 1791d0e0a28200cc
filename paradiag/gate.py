"""``--fail-on`` thresholds for CI: ``"stage_imbalance>1.15,bubble_ratio>0.3,finding:slow_link"``.

Each comma-separated condition is either a metric comparison ``NAME OP NUMBER`` (OP one of > >= < <= == !=) or
``finding:KIND`` (any finding of that kind; ``finding:any`` for any finding at all; ``finding:KIND>=SEVERITY``
with severity low < medium < high). NAME is one of the aliases below or a dotted path into the report
(``metrics.idle_pct.max``, ``job.num_ranks``). A condition whose metric the job does not have (no pipeline, say)
cannot be crossed and is listed as skipped.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

EXIT_OK = 0
EXIT_ERROR = 1  # the job could not be read
EXIT_USAGE = 2  # bad command line or a condition that does not parse
EXIT_GATE = 3  # a --fail-on condition was crossed

# Friendly names -> (path into the report, scale applied to the value).
ALIASES: dict[str, tuple[str, float]] = {
    "stage_imbalance": ("metrics.pipeline.imbalance", 1.0),
    "bubble_ratio": ("metrics.pipeline.bubble_ratio_measured", 1.0),
    "step_time_ms": ("metrics.step_time_ns.median", 1e-6),
    "max_step_time_ms": ("metrics.step_time_ns.max_rank_median", 1e-6),
    "compute_pct": ("metrics.compute_pct.mean", 1.0),
    "comm_exposed_pct": ("metrics.comm_exposed_pct.mean", 1.0),
    "idle_pct": ("metrics.idle_pct.mean", 1.0),
    "overlap_ratio": ("metrics.overlap_ratio", 1.0),
    "arrival_skew_ms": ("metrics.communication.arrival_skew_ns.median", 1e-6),
    "findings": ("findings", 1.0),  # the number of findings
    "impact_pct": ("findings", 1.0),  # the largest impact of any finding
}
OPS: dict[str, Callable[[float, float], bool]] = {
    ">=": operator.ge,
    "<=": operator.le,
    "==": operator.eq,
    "!=": operator.ne,
    ">": operator.gt,
    "<": operator.lt,
}
SEVERITIES = {"low": 0, "medium": 1, "high": 2}
_METRIC = re.compile(r"^\s*([A-Za-z_][\w.]*)\s*(>=|<=|==|!=|>|<)\s*(-?[\d.]+(?:e-?\d+)?)\s*$")
_FINDING = re.compile(r"^\s*finding:([a-z_]+)\s*(?:>=\s*(low|medium|high))?\s*$")


class GateError(ValueError):
    """A condition that does not parse."""


COULD_NOT_ANALYSE = "could not analyse"


@dataclass
class Outcome:
    condition: str
    crossed: bool
    value: Any
    reason: str


def _lookup(report: Mapping[str, Any], path: str) -> Any:
    value: Any = report
    for part in path.split("."):
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return value


def _metric_value(report: Mapping[str, Any], name: str) -> Any:
    if name == "findings":
        return len(report.get("findings", []))
    if name == "impact_pct":
        return max((f.get("impact_pct", 0) for f in report.get("findings", [])), default=0.0)
    path, scale = ALIASES.get(name, (name, 1.0))
    value = _lookup(report, path)
    return value * scale if isinstance(value, int | float) and not isinstance(value, bool) else value


def parse(expression: str) -> list[str]:
    """The conditions of a --fail-on expression; GateError names the one that does not parse."""
    conditions = [c.strip() for c in expression.split(",") if c.strip()]
    for c in conditions:
        if not (_METRIC.match(c) or _FINDING.match(c)):
            raise GateError(
                f"cannot read the condition {c!r}: write NAME>NUMBER (names: {', '.join(ALIASES)}) or finding:KIND"
            )
    return conditions


def evaluate(report: Mapping[str, Any], expression: str) -> list[Outcome]:
    """Every condition with whether it was crossed and why, in plain words."""
    out = []
    for c in parse(expression):
        finding = _FINDING.match(c)
        if finding:
            out.append(_finding_outcome(report, c, finding.group(1), finding.group(2)))
            continue
        metric = _METRIC.match(c)
        assert metric is not None
        name, op, limit = metric.group(1), metric.group(2), float(metric.group(3))
        value = _metric_value(report, name)
        if not isinstance(value, int | float):
            out.append(Outcome(c, False, None, f"{name}: not measured on this job (skipped)"))
            continue
        crossed = OPS[op](float(value), limit)
        verdict = "crossed" if crossed else "ok"
        out.append(Outcome(c, crossed, value, f"{name} = {value:.4g} ({verdict}: fails when {op} {limit:g})"))
    return out


def _finding_outcome(
    report: Mapping[str, Any], condition: str, kind: str, min_severity: str | None
) -> Outcome:
    floor = SEVERITIES[min_severity] if min_severity else 0
    hits = [
        f
        for f in report.get("findings", [])
        if (kind == "any" or f.get("kind") == kind) and SEVERITIES.get(f.get("severity", "low"), 0) >= floor
    ]
    if not hits:
        what = "no finding" if kind == "any" else f"no {kind} finding"
        return Outcome(
            condition, False, 0, what + (f" of severity {min_severity} or more" if min_severity else "")
        )
    top = hits[0]
    return Outcome(
        condition, True, len(hits), f"{top['kind']} ({top.get('severity')}): {top.get('evidence', '')}"
    )


def verdict(report: Mapping[str, Any], fail_on: str | None, outcomes: list[Outcome]) -> dict[str, Any]:
    """The snapshot's verdict: ``status`` "could not analyse" when the analysis lacked steps, compute or
    communication (``job.analysed`` false: the report's problems say what), else "failed" when a --fail-on
    condition was crossed, "passed" under --fail-on, or "no finding" / "findings" without one; ``passed`` is false
    when the job could not be analysed, whatever the conditions say (none of them was measured)."""
    analysed = report.get("job", {}).get("analysed", True)
    crossed = any(o.crossed for o in outcomes)
    if not analysed:
        status = COULD_NOT_ANALYSE
    elif fail_on:
        status = "failed" if crossed else "passed"
    else:
        status = "findings" if report.get("findings") else "no finding"
    return {
        "fail_on": fail_on,
        "status": status,
        "passed": analysed and not crossed,
        "reasons": [
            p["message"]
            for p in report.get("job", {}).get("problems", [])
            if p.get("source") == "." and not analysed
        ],
        "conditions": [o.__dict__ for o in outcomes],
    }
