"""The typed :class:`Diagnosis` of a job and its storage in the job's cache folder.

Computed once at ingest (``diagnose``) and stored beside the events, the Diagnosis is what ``paradiag analyze``,
the snapshot and the dashboard read: none of them looks at the events again to learn the layout, the findings or
who waited for whom. Per-(rank, step) and per-instance data are Arrow tables (one Parquet file each); the rest is
dataclasses written as one JSON file. Their JSON forms are those of ``docs/report.schema.json``.

Cache folder layout (``diagnosis/``)::

    diagnosis.json         version, layout, groups, findings, stage metrics, operators, communication summary
    <table>.parquet        rank_steps, breakdowns, participation, instances, p2p, passes, operator_totals,
                           critical_path

``version`` hashes the analysis sources: a cache written by another version of the analysis is diagnosed again
on open (the events are still there), so a stored Diagnosis never disagrees with the code that reads it.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import shutil
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from paradiag.analysis.breakdown import Breakdown
from paradiag.analysis.kinds import Kind, check
from paradiag.analysis.layout import Layout

FOLDER = "diagnosis"
DOCUMENT = "diagnosis.json"
TABLES = (
    "rank_steps",
    "breakdowns",
    "participation",
    "instances",
    "p2p",
    "passes",
    "operator_totals",
    "critical_path",
)
BREAKDOWN_FIELDS = tuple(Breakdown.__dataclass_fields__)


def _sources_hash() -> str:
    digest = hashlib.sha256()
    for path in sorted(Path(__file__).resolve().parent.glob("*.py")):
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


# Hashed once, on import: the sources of the code this process runs, even if the files change while it runs.
_VERSION = _sources_hash()


def analysis_version() -> str:
    """A hash of the analysis sources (this package's modules): any change to them makes stored Diagnoses stale."""
    return _VERSION


def _known(cls: type, data: dict[str, Any], fields: set[str]) -> None:
    """A field the type does not know would be lost on the way to the report: refuse it, so that whoever adds one
    to the analysis adds it here too."""
    unknown = set(data) - fields
    if unknown:
        raise ValueError(
            f"{cls.__name__} has no field {', '.join(sorted(unknown))}: add it to paradiag.analysis.diagnosis_types"
        )


@dataclass(frozen=True)
class Culprit:
    """Who a finding blames: ranks, a link (a rank pair, or a group's ranks), a stage, an operator, hosts."""

    ranks: list[int] = field(default_factory=list)
    link: list[int] | None = None
    stage: int | None = None
    operator: str | None = None
    hosts: list[str] | None = None

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.link is not None:
            out["link"] = {"ranks": self.link}
        if self.stage is not None:
            out["stage"] = self.stage
        if self.ranks:
            out["ranks"] = self.ranks
        if self.operator is not None:
            out["operator"] = self.operator
        if self.hosts is not None:
            out["hosts"] = self.hosts
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Culprit:
        _known(cls, data, {"ranks", "link", "stage", "operator", "hosts"})
        link = data.get("link")
        return cls(
            ranks=[int(r) for r in data.get("ranks") or []],
            link=[int(r) for r in link["ranks"]] if link else None,
            stage=data.get("stage"),
            operator=data.get("operator"),
            hosts=data.get("hosts"),
        )


@dataclass(frozen=True)
class Finding:
    """A cause of lost time: ``step`` is the step its evidence cites (None for structural findings); ``what_if``
    the replay of the steps with the cause removed (predicted step time, saving, the edits), None (absent from the
    JSON) where there is nothing to replay (clock skew)."""

    kind: Kind  # one of the registry's (paradiag.analysis.kinds)
    culprit: Culprit
    steps: list[int]
    impact_pct: float
    severity: str
    evidence: str
    step: int | None = None
    what_if: dict[str, Any] | None = None  # the replay with the cause removed (paradiag.analysis.whatif)

    def as_json(self) -> dict[str, Any]:
        out = {
            "kind": self.kind,
            "culprit": self.culprit.as_json(),
            "steps": self.steps,
            "impact_pct": self.impact_pct,
            "severity": self.severity,
            "evidence": self.evidence,
            "step": self.step,
        }
        return {**out, "what_if": self.what_if} if self.what_if is not None else out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Finding:
        _known(cls, data, set(cls.__dataclass_fields__))
        return cls(
            kind=check(data["kind"]),
            culprit=Culprit.from_json(data.get("culprit") or {}),
            steps=[int(s) for s in data.get("steps") or []],
            impact_pct=float(data["impact_pct"]),
            severity=data["severity"],
            evidence=data["evidence"],
            step=data.get("step"),
            what_if=data.get("what_if"),
        )


@dataclass(frozen=True)
class StageRow:
    stage: int
    ranks: list[int]
    compute_per_micro_batch_ns: int
    compute_per_micro_batch_median_ns: int
    bubble_ratio: float


@dataclass(frozen=True)
class StageMetrics:
    """The pipeline: per stage compute per micro-batch and bubble, imbalance, bottleneck, schedule."""

    stages: list[StageRow]
    num_stages: int
    micro_batches: int
    virtual_stages: int
    imbalance: float | None
    bottleneck_stage: int | None
    bubble_ratio_measured: float | None
    bubble_ratio_theoretical: float
    step_time_ns: int
    balanced_step_time_ns: int
    schedule: str

    def as_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> StageMetrics:
        return cls(**{**data, "stages": [StageRow(**s) for s in data["stages"]]})


@dataclass(frozen=True)
class OperatorImbalance:
    """An operator whose time differs across peers, with the rank responsible."""

    operator: str
    short_name: str
    rank: int
    peers: list[int]
    time_ns: int
    peer_median_ns: int
    ratio: float | None
    z: float
    excess_ns: int


@dataclass(frozen=True)
class GroupInfo:
    """A communication group: its id, the name the trace gives it, its role in the layout and its ranks."""

    group: str
    name: str | None
    role: str | None
    ranks: list[int]


@dataclass(frozen=True)
class CommLink:
    """One directed link of the communication matrix."""

    src: int
    dst: int
    link_type: str
    bytes: int
    time_ns: int
    instances: int
    bandwidth_gbps: float | None


@dataclass(frozen=True)
class CommunicationSummary:
    collective_instances: int
    p2p_transfers: int
    arrival_skew_ns: dict[str, float] | None
    busbw_gbps_median: dict[str, float | None]  # null where it cannot be computed
    caused_wait_ns_top: list[dict[str, int]]


@dataclass
class Diagnosis:
    """Everything the analysis says about a job.

    Tables: ``rank_steps`` per (rank, step): stage, step_ns, compute_ns, launch_delay_ns, idle_ns, hooks_ns, wait_ns,
    caused_ns, compute_z, launch_delay_z (robust z-scores within the stage and step); ``breakdowns`` per rank
    and step (step null: over all the rank's steps) the time breakdown; ``participation`` per (rank, collective
    instance); ``instances`` per collective instance; ``p2p`` per matched send/recv pair; ``passes`` per pipeline
    pass; ``operator_totals`` device time per (step, rank, operator); ``critical_path`` per step the segments of
    its critical path (``paradiag.analysis.critical_path``)."""

    version: str
    layout: Layout
    groups: list[GroupInfo]
    step_time_ns: float
    stage_metrics: StageMetrics | None
    operators: list[OperatorImbalance]
    findings: list[Finding]
    communication: CommunicationSummary
    communication_matrix: list[CommLink]
    operator_times: dict[str, dict[str, Any]]
    rank_steps: pa.Table
    breakdowns: pa.Table
    participation: pa.Table
    instances: pa.Table
    p2p: pa.Table
    passes: pa.Table
    operator_totals: pa.Table
    critical_path: pa.Table

    def culprits(self) -> dict[int, list[Kind]]:
        """rank -> the kinds of the findings that name it as a culprit (link ends included)."""
        out: dict[int, list[Kind]] = {}
        for f in self.findings:
            for r in dict.fromkeys([*f.culprit.ranks, *(f.culprit.link or [])]):
                out.setdefault(r, []).append(f.kind)
        return out

    @functools.cached_property
    def _figures(self) -> dict[tuple[int, int], dict[str, Any]]:
        return {(row["rank"], row["step"]): row for row in self.rank_steps.to_pylist()}

    @functools.cached_property
    def _breakdowns(self) -> dict[tuple[int, int | None], Breakdown | None]:
        return breakdowns_of(self.breakdowns)

    def figures(self) -> dict[tuple[int, int], dict[str, Any]]:
        """Per (rank, step) the row of ``rank_steps`` (built once per Diagnosis)."""
        return self._figures

    def waits(self) -> dict[int, tuple[int, int]]:
        """rank -> (time it waited for others, waiting it caused) over all steps."""
        out: dict[int, tuple[int, int]] = {}
        cols = self.rank_steps.select(["rank", "wait_ns", "caused_ns"]).to_pydict()
        for rank, wait, caused in zip(cols["rank"], cols["wait_ns"], cols["caused_ns"], strict=True):
            w, c = out.get(rank, (0, 0))
            out[rank] = (w + wait, c + caused)
        return out

    def breakdown(self, rank: int, step: int | None = None) -> Breakdown | None:
        """The time breakdown of ``rank`` in ``step`` (None: over all its steps); None without device work."""
        return self._breakdowns.get((rank, step))

    def document(self) -> dict[str, Any]:
        """The JSON-able parts (the tables are stored apart)."""
        return {
            "version": self.version,
            "layout": {
                "coords": {str(r): c for r, c in self.layout.coords.items()},
                "roles": self.layout.roles,
                "found_by": self.layout.found_by,
                "size": self.layout.size,
            },
            "groups": [asdict(g) for g in self.groups],
            "step_time_ns": self.step_time_ns,
            "stage_metrics": self.stage_metrics.as_json() if self.stage_metrics else None,
            "operators": [asdict(o) for o in self.operators],
            "findings": [f.as_json() for f in self.findings],
            "communication": asdict(self.communication),
            "communication_matrix": [asdict(c) for c in self.communication_matrix],
            "operator_times": self.operator_times,
        }


def breakdowns_of(table: pa.Table) -> dict[tuple[int, int | None], Breakdown | None]:
    """(rank, step) -> Breakdown (None without device work) from a ``breakdowns`` table."""
    rows = table.to_pylist()
    return {
        (r["rank"], r["step"]): Breakdown(**{k: r[k] for k in BREAKDOWN_FIELDS})
        if r["window_ns"] is not None
        else None
        for r in rows
    }


def save(diagnosis: Diagnosis, cache_dir: Path) -> None:
    """Write ``diagnosis`` into ``cache_dir/diagnosis`` atomically (a sibling temporary folder renamed into place)."""
    target = cache_dir / FOLDER
    tmp = cache_dir / f".{FOLDER}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    tmp.mkdir()
    try:
        for name in TABLES:
            pq.write_table(getattr(diagnosis, name), tmp / f"{name}.parquet")
        (tmp / DOCUMENT).write_text(json.dumps(diagnosis.document()))
        if target.exists():
            shutil.rmtree(target)
        tmp.rename(target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def load(cache_dir: Path) -> Diagnosis | None:
    """The Diagnosis stored in ``cache_dir``; None when there is none or another analysis version wrote it."""
    folder = cache_dir / FOLDER
    try:
        doc = json.loads((folder / DOCUMENT).read_text())
    except (OSError, ValueError):
        return None
    if doc.get("version") != analysis_version():
        return None
    try:
        tables = {name: pq.read_table(folder / f"{name}.parquet", memory_map=True) for name in TABLES}
    except (OSError, pa.ArrowInvalid):
        return None
    return from_document(doc, tables)


def from_document(doc: dict[str, Any], tables: dict[str, pa.Table]) -> Diagnosis:
    layout = doc["layout"]
    return Diagnosis(
        version=doc["version"],
        layout=Layout(
            {int(r): c for r, c in layout["coords"].items()},
            layout["roles"],
            layout["found_by"],
            dict(layout["size"]),
        ),
        groups=[GroupInfo(**g) for g in doc["groups"]],
        step_time_ns=doc["step_time_ns"],
        stage_metrics=StageMetrics.from_json(doc["stage_metrics"]) if doc["stage_metrics"] else None,
        operators=[OperatorImbalance(**o) for o in doc["operators"]],
        findings=[Finding.from_json(f) for f in doc["findings"]],
        communication=CommunicationSummary(**doc["communication"]),
        communication_matrix=[CommLink(**c) for c in doc["communication_matrix"]],
        operator_times=doc["operator_times"],
        **tables,
    )
