"""The committed sample_traces/: each job parses, carries its ground truth, stays small, and regenerates
byte for byte from the command its README gives."""

from __future__ import annotations

import io
import shlex
import tarfile
from pathlib import Path

import pytest
from click.testing import CliRunner

from paradiag.parsers import ascend, kineto
from paradiag.simulator.cli import simulate
from paradiag.simulator.groundtruth import read as read_truth
from paradiag.simulator.samples import SAMPLES, command

ROOT = Path(__file__).resolve().parents[1] / "sample_traces"


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_sample_parses_and_is_small(name: str) -> None:
    job = ROOT / name
    truth = read_truth(job)
    assert command(name) in (ROOT / "README.md").read_text()
    for rank, file in truth["files"].items():
        parsed = (ascend if truth["format"] == "ascend" else kineto).parse(job / file)
        assert parsed.rank == int(rank) and parsed.warnings == []
        assert parsed.steps.num_rows == len(truth["schedule"]["steps"])
    packed = io.BytesIO()
    with tarfile.open(fileobj=packed, mode="w:gz") as tar:
        tar.add(job, arcname=name)
    assert packed.tell() <= 2_000_000


def test_smallest_sample_regenerates_byte_identical(tmp_path: Path) -> None:
    name = "gpu_moe_expert_imbalance"
    out = tmp_path / name
    result = CliRunner().invoke(simulate, [*shlex.split(SAMPLES[name][1]), "--quiet", "-o", str(out)])
    assert result.exit_code == 0, result.output
    committed = sorted(p.relative_to(ROOT / name) for p in (ROOT / name).rglob("*") if p.is_file())
    assert committed == sorted(p.relative_to(out) for p in out.rglob("*") if p.is_file())
    for rel in committed:
        assert (out / rel).read_bytes() == (ROOT / name / rel).read_bytes(), rel
