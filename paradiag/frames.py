"""pandas DataFrames of a job, for notebooks: ``job.frames.breakdown()``, ``job.frames.findings()``, ...

Every frame is a view of what the job already stores: the canonical tables (events, steps, ranks) and the
Diagnosis computed at ingest (breakdowns, per-rank step metrics, findings, pipeline stages, critical path).
Nothing is analysed again here. Names, kinds and other repeated strings are ``category`` columns (the Arrow
dictionaries as pandas categoricals); integers that may be missing (a breakdown's ``step``, a finding's
``step``) are pandas' nullable integers. Times stay integer nanoseconds, on the aligned clock.

pandas is an optional dependency: ``pip install 'paradiag[pandas]'``.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from paradiag import schema
from paradiag.analysis.breakdown import Breakdown
from paradiag.analysis.diagnosis_types import BREAKDOWN_FIELDS

if TYPE_CHECKING:
    import pandas as pd

    from paradiag.analysis.diagnosis_types import Diagnosis


class Job(Protocol):
    """What the DataFrames read of a job (``paradiag.job.Job``, which builds them: named here, not imported,
    so that the read API and its notebook view import one way)."""

    ranks: pa.Table
    steps: pa.Table

    def events(
        self,
        ranks: Iterable[int] | None = None,
        start_ns: int | None = None,
        end_ns: int | None = None,
        columns: Sequence[str] | None = None,
    ) -> pa.Table: ...

    def diagnosis(self) -> Diagnosis: ...


INSTALL_HINT = "paradiag's DataFrames need pandas, which is not installed: pip install 'paradiag[pandas]'"
_SHARES = ("compute", "comm_exposed", "memory_exposed", "sync_exposed", "idle")


def pandas_module() -> Any:
    """The pandas module, or an ImportError that says how to install it."""
    try:
        return importlib.import_module("pandas")
    except ImportError as exc:
        raise ImportError(INSTALL_HINT) from exc


def to_frame(table: pa.Table) -> pd.DataFrame:
    """An Arrow table as a DataFrame: dictionary and string columns become categoricals, integer columns
    with nulls nullable integers (not floats)."""
    pd = pandas_module()
    nullable = {
        pa.int8(): pd.Int8Dtype(),
        pa.int16(): pd.Int16Dtype(),
        pa.int32(): pd.Int32Dtype(),
        pa.int64(): pd.Int64Dtype(),
    }
    frame = table.to_pandas(strings_to_categorical=True)
    for field, column in zip(table.schema, table.columns, strict=True):
        if column.null_count and field.type in nullable:
            frame[field.name] = column.to_pandas(types_mapper=nullable.get)
    return frame


class Frames:
    """The DataFrames of one job (``job.frames``)."""

    def __init__(self, job: Job) -> None:
        pandas_module()  # say at once, not at the first frame, when pandas is missing
        self.job = job

    def events(
        self,
        ranks: Iterable[int] | None = None,
        start_ns: int | None = None,
        end_ns: int | None = None,
        columns: Sequence[str] | None = None,
    ) -> pd.DataFrame:
        """Events of ``ranks`` overlapping [start_ns, end_ns) on the aligned clock (``Job.events``'s arguments);
        one row per event, the columns of ``docs/schema.md``."""
        return to_frame(self.job.events(ranks, start_ns, end_ns, columns))

    def kernels(self, ranks: Iterable[int] | None = None, steps: Iterable[int] | None = None) -> pd.DataFrame:
        """Device work (compute, communication, memory and sync kernels) of ``ranks`` in ``steps``, as HTA's
        kernel frames: one row per kernel with its stream (``track``), name, kind, step and time."""
        events = self.job.events(ranks)
        keep = schema.in_values(events.column("kind"), schema.DEVICE_KINDS) & (
            events.column("device").to_numpy() >= 0
        )
        if steps is not None:
            keep &= np.isin(
                events.column("step").fill_null(-1).to_numpy(), np.fromiter(steps, dtype=np.int64)
            )
        return to_frame(events.filter(pa.array(keep)))

    def ranks(self) -> pd.DataFrame:
        """One row per rank: host, device, world size, parallel coordinates, clock offset, source."""
        return to_frame(self.job.ranks)

    def steps(self) -> pd.DataFrame:
        """One row per (rank, step): host span and device span of the step on the aligned clock."""
        return to_frame(self.job.steps)

    def breakdown(self, per_step: bool = True) -> pd.DataFrame:
        """Where each rank's device time goes, per (rank, step) (``per_step=False``: over all its steps), as
        HTA's temporal and communication/computation-overlap breakdowns: ``window_ns`` split into compute,
        exposed communication, exposed memory copies, exposed sync and idle (the ``*_pct`` of the window),
        with ``comm_overlapped_ns`` and ``overlap_ratio`` (share of communication hidden under compute).
        Definitions: ``paradiag.analysis.breakdown``."""
        table = self.job.diagnosis().breakdowns
        table = table.filter(
            pc.is_valid(table.column("step")) if per_step else pc.is_null(table.column("step"))
        )
        table = table.sort_by([("rank", "ascending"), ("step", "ascending")])
        rows = [Breakdown(**{k: row[k] for k in BREAKDOWN_FIELDS}).as_dict() for row in table.to_pylist()]
        derived = ["overlap_ratio", *(f"{s}_pct" for s in _SHARES)]
        columns = {name: table.column(name) for name in ("rank", "step", *BREAKDOWN_FIELDS)}
        columns.update({name: pa.array([r[name] for r in rows], pa.float64()) for name in derived})
        frame = to_frame(pa.table(columns))
        return frame.drop(columns="step") if not per_step else frame

    def rank_steps(self) -> pd.DataFrame:
        """Per (rank, step): stage, step time, compute, launch delay, idle, time waiting for peers and time peers
        waited for it, and robust z-scores of compute and launch delay within the stage and step."""
        return to_frame(self.job.diagnosis().rank_steps)

    def findings(self) -> pd.DataFrame:
        """One row per finding, most costly first: kind, severity, share of the step time lost (``impact_pct``),
        who is blamed (``ranks``, ``stage``, ``operator``, ``link``, ``hosts``), the step its evidence cites
        and the evidence in words."""
        pd = pandas_module()
        rows = [
            {
                "kind": f.kind,
                "severity": f.severity,
                "impact_pct": f.impact_pct,
                "ranks": f.culprit.ranks,
                "stage": f.culprit.stage,
                "operator": f.culprit.operator,
                "link": f.culprit.link,
                "hosts": f.culprit.hosts,
                "step": f.step,
                "steps": f.steps,
                "evidence": f.evidence,
            }
            for f in self.job.diagnosis().findings
        ]
        frame = pd.DataFrame(
            rows,
            columns=[
                "kind",
                "severity",
                "impact_pct",
                "ranks",
                "stage",
                "operator",
                "link",
                "hosts",
                "step",
                "steps",
                "evidence",
            ],
        )
        for name in ("kind", "severity", "operator"):
            frame[name] = frame[name].astype("category")
        for name in ("stage", "step"):
            frame[name] = frame[name].astype(pd.Int64Dtype())
        frame["impact_pct"] = frame["impact_pct"].astype(float)
        return frame

    def stages(self) -> pd.DataFrame:
        """One row per pipeline stage: its ranks, compute per micro-batch (its slowest rank and the median) and
        bubble ratio, and whether it is the bottleneck; empty without pipeline parallelism."""
        pd = pandas_module()
        metrics = self.job.diagnosis().stage_metrics
        names = [
            "stage",
            "ranks",
            "compute_per_micro_batch_ns",
            "compute_per_micro_batch_median_ns",
            "bubble_ratio",
            "bottleneck",
        ]
        if metrics is None:
            return pd.DataFrame(
                {
                    name: pd.Series(dtype=dtype)
                    for name, dtype in zip(
                        names, ["int64", object, "int64", "int64", float, bool], strict=True
                    )
                }
            )
        rows = [
            [
                s.stage,
                s.ranks,
                s.compute_per_micro_batch_ns,
                s.compute_per_micro_batch_median_ns,
                s.bubble_ratio,
                s.stage == metrics.bottleneck_stage,
            ]
            for s in metrics.stages
        ]
        return pd.DataFrame(rows, columns=names)

    def critical_path(self, step: int | None = None) -> pd.DataFrame:
        """The segments of each step's critical path (of ``step`` only, when given): rank, stream (``track``),
        kind (compute, communication, host, wait, ...), operator and time span."""
        table = self.job.diagnosis().critical_path
        if step is not None:
            table = table.filter(
                pc.equal(table.column("step"), pa.scalar(step, table.schema.field("step").type))
            )
        return to_frame(table)

    def operators(self) -> pd.DataFrame:
        """Device time per (step, rank, operator): the sums the operator-imbalance analysis compared."""
        return to_frame(self.job.diagnosis().operator_totals)

    def passes(self) -> pd.DataFrame:
        """One row per pipeline pass (rank, micro-batch, chunk, forward/backward) with its span and compute."""
        return to_frame(self.job.diagnosis().passes)
