"""Findings on pipeline and DeviceMesh jobs of CPU ranks (issue 22): the cases real gloo jobs showed, built small.

* a stage imbalance's saving is weighed at the speed the clock ran the compute;
* a p2p pair whose transfers a busy host stretched now and then is no slow link; one slow in every transfer is;
* a replica with a single peer is weighed against how far the job's other replicas stray from each other.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

from paradiag.analysis import findings, stages

MS = 1_000_000


def figure(compute: float, delay: float, step_ns: float = 100 * MS) -> dict[str, int]:
    return {
        "compute_ns": int(compute),
        "launch_delay_ns": int(delay),
        "idle_ns": int(delay),
        "step_ns": int(step_ns),
    }


def test_a_replica_with_one_peer_is_weighed_against_the_other_replicas_spread() -> None:
    """dp2 x pp2: each stage's replicas differ by ~24 % at typical durations (a busy host runs one replica of
    each a fifth slower): nobody is named; a replica 70 % above its peer is."""
    stage_sets = [[0, 2], [1, 3]]
    alike = {0: 14.2e6, 2: 17.6e6, 1: 17.7e6, 3: 21.7e6}
    figures = {(r, s): figure(alike[r], 5 * MS) for r in range(4) for s in range(3)}
    assert [r for r in findings.rank_excess(figures, stage_sets, 100 * MS) if r["part"] == "compute_ns"] == []
    figures.update({(3, s): figure(30e6, 5 * MS) for s in range(3)})
    rows = [r for r in findings.rank_excess(figures, stage_sets, 100 * MS) if r["part"] == "compute_ns"]
    assert {r["rank"] for r in rows} == {3}


def _p2p(times: dict[tuple[int, int], list[float]]) -> pa.Table:
    cols: dict[str, list[Any]] = {
        "src": [],
        "dst": [],
        "bytes": [],
        "transfer_ns": [],
        "step": [],
        "receiver_waited": [],
    }
    for (a, b), values in times.items():
        for i, t in enumerate(values):
            for k, v in zip(cols, (a, b, 24576, int(t * MS), i % 3, True), strict=True):
                cols[k].append(v)
    return pa.table(cols)


def _no_collectives() -> pa.Table:
    return pa.table({"group": pa.array([], pa.string()), "collective": pa.array([], pa.string()), "bytes": pa.array([], pa.int64()),
                     "members": pa.array([], pa.int64()), "transfer_ns": pa.array([], pa.int64()), "step": pa.array([], pa.int32())})  # fmt: skip


def test_p2p_stretched_now_and_then_is_no_slow_link_but_one_slow_throughout_is() -> None:
    host = dict.fromkeys(range(4), "h")
    fast = [0.2, 0.25, 0.15, 0.2, 0.3, 0.2]
    noisy = {
        (0, 1): [2.3, 0.2, 2.5, 10.4, 0.1, 2.6, 0.2, 2.4, 0.2],
        (1, 2): [*fast, 12.5, 0.2, 0.16],
        (2, 3): fast,
    }
    assert findings.link_findings(_no_collectives(), _p2p(noisy), {}, host, 300 * MS, 3) == []
    slow = {(0, 1): [2.3, 2.1, 2.5, 2.4, 2.6, 2.2], (1, 2): fast, (2, 3): fast}
    (f,) = findings.link_findings(_no_collectives(), _p2p(slow), {}, host, 300 * MS, 3)
    assert (f.kind, f.culprit.ranks) == ("slow_link", [0, 1])


def test_a_cpu_jobs_links_are_those_between_hosts() -> None:
    """On CPU ranks (``between_hosts``) a pair on one host is no link (gloo copies through memory: its slowness
    is its threads' turn on a core); the same slow pair across two hosts is one, as it is on a GPU job."""
    fast = [0.2, 0.25, 0.15, 0.2, 0.3, 0.2]
    slow = {(0, 1): [2.3, 2.1, 2.5, 2.4, 2.6, 2.2], (1, 2): fast, (2, 3): fast, (3, 0): fast}
    one_host = dict.fromkeys(range(4), "h")
    args = (_no_collectives(), _p2p(slow), {})
    assert findings.link_findings(*args, one_host, 300 * MS, 3, between_hosts=True) == []
    (gpu,) = findings.link_findings(*args, one_host, 300 * MS, 3)
    assert gpu.culprit.ranks == [0, 1]
    # every pair across the two hosts: each has comparable ones, and the slow one stands apart
    two_hosts = {0: "a", 1: "b", 2: "a", 3: "b"}
    (cpu,) = findings.link_findings(*args, two_hosts, 300 * MS, 3, between_hosts=True)
    assert (cpu.kind, cpu.culprit.ranks) == ("slow_link", [0, 1])


def test_a_stage_imbalance_is_weighed_at_the_clocks_speed() -> None:
    """Two stages, stage 1 twice as heavy at typical durations; the host ran the compute 6x slower than that,
    so a balanced split saves 6x the typical difference of the clock's step."""
    rows: dict[str, list[Any]] = {
        k: []
        for k in (
            "rank",
            "stage",
            "step",
            "micro_batch",
            "chunk",
            "direction",
            "start_ns",
            "end_ns",
            "compute_ns",
        )
    }
    for rank, per_pass in ((0, 1 * MS), (1, 2 * MS)):
        for mb in range(4):
            for k, v in zip(
                rows,
                (rank, rank, 0, mb, 0, "forward", mb * 10 * MS, mb * 10 * MS + 6 * per_pass, per_pass),
                strict=True,
            ):
                rows[k].append(v)
    passes = pa.table(rows)
    plain = stages.stage_metrics(passes, [[0], [1]], 1, 200 * MS)
    scaled = stages.stage_metrics(passes, [[0], [1]], 1, 200 * MS, compute_scale=6.0)
    saved = 200 * MS - plain["balanced_step_time_ns"]
    assert saved == pytest.approx(5 * 0.5 * MS)  # (m + p - 1) slots x (max - mean)
    assert 200 * MS - scaled["balanced_step_time_ns"] == pytest.approx(6 * saved)
    assert findings.stage_findings(plain) == []  # 1.25 % of the step: under the floor at typical durations
    (f,) = findings.stage_findings(scaled)
    assert (f.kind, f.culprit.stage, f.impact_pct) == ("stage_imbalance", 1, 7.5)
