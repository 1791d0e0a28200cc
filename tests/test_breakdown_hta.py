"""The per-rank breakdown, computed with HTA's conventions, matches HTA 0.5's figures on the real traces
(../shared/reference/hta_on_shared.md) within 0.5 percentage points."""

from __future__ import annotations

import pytest

import paradiag
from paradiag.analysis.breakdown import rank_breakdown, rank_steps
from tests.conftest import shared_path

pytestmark = pytest.mark.real

# (folder, rank): idle %, compute %, non-compute %, comm-comp overlap % (of communication time)
HTA = {
    ("hta_sampled_128rank_job", 0): (53.56, 17.71, 28.74, 11.81),
    ("hta_sampled_128rank_job", 1): (54.72, 22.57, 22.72, 20.05),
    ("hta_16rank_job_rank0", 0): (69.44, 14.15, 16.41, 1.37),
    ("hta_nccl_2rank_job", 0): (77.78, 17.26, 4.97, 14.31),
}


@pytest.mark.parametrize(("folder", "rank"), sorted(HTA))
def test_matches_hta_temporal_breakdown(folder: str, rank: int) -> None:
    job = paradiag.open(shared_path("gpu", folder))
    steps = rank_steps(job.steps, rank).column("step").to_pylist()
    b = rank_breakdown(job.events(ranks=[rank]), steps, convention="hta")
    assert b is not None
    idle, compute, non_compute, overlap = HTA[(folder, rank)]
    assert b.pct("idle_ns") == pytest.approx(idle, abs=0.5)
    assert b.pct("compute_ns") == pytest.approx(compute, abs=0.5)
    assert 100 - b.pct("idle_ns") - b.pct("compute_ns") == pytest.approx(non_compute, abs=0.5)
    assert b.overlap_ratio is not None
    assert 100 * b.overlap_ratio == pytest.approx(overlap, abs=0.5)


def test_paradiag_convention_keeps_the_last_step() -> None:
    """paradiag's own breakdown covers every profiled step: a longer window than HTA's, same partition."""
    job = paradiag.open(shared_path("gpu", "hta_sampled_128rank_job"))
    steps = rank_steps(job.steps, 0).column("step").to_pylist()
    ours = rank_breakdown(job.events(ranks=[0]), steps)
    hta = rank_breakdown(job.events(ranks=[0]), steps, convention="hta")
    assert ours is not None and hta is not None
    assert ours.window_ns > 1.9 * hta.window_ns  # two steps of ~600 ms instead of one
    parts = (
        ours.compute_ns + ours.comm_exposed_ns + ours.memory_exposed_ns + ours.sync_exposed_ns + ours.idle_ns
    )
    assert parts == ours.window_ns
