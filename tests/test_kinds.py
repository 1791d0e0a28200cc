"""The finding-kind registry (paradiag.analysis.kinds): every layer that names a kind reads it, the report schema's
enum is generated from it, and each kind's entry is whole (its edits replayable, its simulator fault injectable)."""

from __future__ import annotations

import json
import random
from dataclasses import replace
from pathlib import Path
from typing import get_args

import pytest

from paradiag.analysis import focus, kinds, whatif
from paradiag.analysis.diagnosis_types import Finding
from paradiag.analysis.edit import parse_edit
from paradiag.simulator import FAULT_KINDS, groundtruth
from paradiag.simulator import faults as sim_faults

SCHEMA = Path(__file__).resolve().parents[1] / "docs" / "report.schema.json"
# A culprit of every shape a detector names: ranks, an operator on them, a stage, a link, hosts.
CULPRIT = {
    "ranks": [2, 3],
    "operator": "flash_attention",
    "stage": 1,
    "link": {"ranks": [2, 3]},
    "hosts": ["node1"],
}


def _finding(kind: str, steps: list[int] | None = None) -> Finding:
    return Finding.from_json(
        {
            "kind": kind,
            "culprit": CULPRIT,
            "steps": steps or [1, 2],
            "impact_pct": 5.0,
            "severity": "medium",
            "evidence": "e",
            "step": 1,
        }
    )


def test_the_report_schema_enum_is_the_registry() -> None:
    """docs/report.schema.json is what ``python -m paradiag.analysis.kinds`` writes: its kind enum is the registry's."""
    text = SCHEMA.read_text()
    assert kinds.schema_text(text) == text, (
        "docs/report.schema.json is stale: run python -m paradiag.analysis.kinds"
    )
    enum = json.loads(text)["$defs"]["finding"]["properties"]["kind"]["enum"]
    assert enum == list(kinds.NAMES) == list(get_args(kinds.Kind))


def test_the_schema_writer_rewrites_the_enum_alone(tmp_path: Path) -> None:
    stale = SCHEMA.read_text().replace('"clock_skew", ', "")
    target = tmp_path / "report.schema.json"
    target.write_text(stale)
    assert kinds.main([str(target)]) == 0
    assert target.read_text() == SCHEMA.read_text()
    with pytest.raises(ValueError, match="kind enum was not found"):
        kinds.schema_text('{"kind": "x"}')


@pytest.mark.parametrize("name", kinds.NAMES)
def test_every_kind_is_whole(name: kinds.Kind) -> None:
    """Each kind's edits are what ``--set`` parses back, its simulator fault is injectable and scored against it."""
    entry = kinds.KINDS[name]
    f = _finding(name)
    if (
        name == "host_stall"
    ):  # a stall held in autograd hooks names their nodes, and has no launch delay to replay
        assert whatif.finding_edits(f) == []
        f = replace(f, culprit=replace(f.culprit, operator=None))
    edits = whatif.finding_edits(f)
    assert [parse_edit(e.text()) for e in edits] == edits
    assert bool(edits) == (not entry.informative)  # what costs no time has nothing to replay
    assert entry.metric in focus.METRICS and focus.METRIC_OF[name] == entry.metric
    assert entry.fault in sim_faults.PARAMS and kinds.produced_by(entry.fault) == name
    mesh = {"dp": 4, "tp": 2, "pp": 2, "ep": 2}  # 16 ranks: two nodes of 8, for a clock skew
    spec = sim_faults.random_fault(entry.fault, mesh, random.Random(name))
    assert spec is not None and sim_faults.parse(spec).kind == entry.fault
    assert Finding.from_json(_finding(name).as_json()) == _finding(name)


def test_the_layers_read_the_registry() -> None:
    assert (
        FAULT_KINDS
        == kinds.faults()
        == (
            "slow_device",
            "slow_link",
            "stage_imbalance",
            "host_stall",
            "operator_hotspot",
            "clock_skew",
            "expert_imbalance",
        )
    )
    assert focus.RANK_KINDS == ("slow_device", "host_stall", "operator_hotspot", "expert_imbalance")
    assert kinds.EXTRA_WORK == ("slow_device", "stage_imbalance", "operator_hotspot", "expert_imbalance")
    assert kinds.scenario_kinds(moe=False) == (
        "slow_device",
        "slow_link",
        "stage_imbalance",
        "host_stall",
        "operator_hotspot",
        "clock_skew",
    )
    assert [e.text() for e in whatif.finding_edits(_finding("slow_link", [2]))] == [
        "link=2-3:transfer=comparable:steps=2"
    ]
    assert [e.text() for e in whatif.finding_edits(_finding("stage_imbalance"))] == ["stages=balanced"]


def test_an_unknown_kind_is_refused_by_name() -> None:
    with pytest.raises(
        ValueError, match="unknown finding kind 'slow_rank'; known kinds: slow_device, slow_link"
    ):
        Finding.from_json(_finding("slow_rank"))
    with pytest.raises(ValueError, match="no finding kind is produced by the fault 'nope'"):
        kinds.produced_by("nope")


@pytest.mark.parametrize(
    ("entry", "culprit", "right"),
    [
        (
            {"kind": "stage_imbalance", "stage": 1, "ranks": [9]},
            {"stage": 1, "ranks": [2, 3]},
            True,
        ),  # a stage by its stage
        ({"kind": "stage_imbalance", "stage": 0, "ranks": [2, 3]}, {"stage": 1, "ranks": [2, 3]}, False),
        (
            {"kind": "slow_link", "link": {"ranks": [3, 2]}},
            {"link": {"ranks": [2, 3]}, "ranks": [2, 3]},
            True,
        ),  # a link by its pair
        (
            {"kind": "slow_link", "link": {"ranks": [2, 4]}},
            {"link": {"ranks": [2, 3]}, "ranks": [2, 4]},
            False,
        ),
        (
            {"kind": "operator_hotspot", "ranks": [3, 2]},
            {"ranks": [2, 3], "operator": "x"},
            True,
        ),  # the rest by ranks
        ({"kind": "host_stall", "ranks": [2]}, {"ranks": [2, 3]}, False),
    ],
)
def test_ground_truth_matches_by_what_the_kind_blames(
    entry: dict[str, object], culprit: dict[str, object], right: bool
) -> None:
    assert groundtruth.matches({"kind": entry["kind"], "culprit": culprit}, entry) is right
    assert not groundtruth.matches({"kind": "slow_device", "culprit": culprit}, entry)
