"""Clock alignment across ranks from shared collectives."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import paradiag
from paradiag import align
from tests.conftest import shared_path

SHIFT_NS = 1_700_000_000  # +1.7 s


def shifted_copy(src: Path, dst: Path, shift_us: int) -> None:
    """The same trace with every timestamp moved by ``shift_us`` (as if its host clock ran ahead)."""
    doc = json.loads(gzip.decompress(src.read_bytes()))
    for e in doc["traceEvents"]:
        if isinstance(e.get("ts"), int | float):
            e["ts"] += shift_us
    dst.write_bytes(gzip.compress(json.dumps(doc).encode()))


@pytest.mark.real
def test_recovers_a_known_shift_on_a_real_pair(tmp_path: Path) -> None:
    folder = shared_path("gpu", "hta_sampled_128rank_job")
    shutil.copy(folder / "sampled_rank-0.json.gz", tmp_path / "sampled_rank-0.json.gz")
    shifted_copy(folder / "sampled_rank-1.json.gz", tmp_path / "sampled_rank-1.json.gz", SHIFT_NS // 1000)
    original = paradiag.open(folder).ranks.column("clock_offset_ns").to_pylist()
    shifted = paradiag.open(tmp_path).ranks.column("clock_offset_ns").to_pylist()
    assert shifted[0] == original[0] == 0  # rank 0 is the reference clock
    recovered = original[1] - shifted[1]
    assert abs(recovered - SHIFT_NS) < 50_000  # within 50 us
    # Aligned, the two ranks' steps start together again.
    job = paradiag.open(tmp_path)
    starts = job.steps.filter(pa.compute.equal(job.steps.column("step"), 551)).column("start_ns").to_pylist()
    assert abs(starts[0] - starts[1]) < 1_000_000


def comm_table(ends: list[int], group: str = "dp0") -> pa.Table:
    n = len(ends)
    return pa.table(
        {
            "collective": ["all_reduce"] * n,
            "group": [group] * n,
            "group_ranks": ["0,1,2,3"] * n,
            "peer": pa.nulls(n, pa.int32()),
            "step": [1] * n,
            "seq": list(range(n)),
            "start_ns": [e - 1000 for e in ends],
            "dur_ns": [1000] * n,
        }
    )


def test_estimates_offsets_of_four_ranks_with_noise() -> None:
    rng = np.random.default_rng(7)
    truth = {0: 0, 1: 1_700_000_000, 2: -250_000, 3: 42_000}  # each rank's clock ahead of rank 0's by this
    exits = np.cumsum(rng.integers(1_000_000, 5_000_000, size=40)) + 10**18
    comm = {r: comm_table([int(t + off + rng.normal(0, 3000)) for t in exits]) for r, off in truth.items()}
    result = align.estimate(comm)
    for r, off in truth.items():
        assert abs(result.offset_ns[r] + off) < 10_000  # the offset to add undoes the clock's lead
    assert result.instances == 40
    assert all(u is not None and u < 10_000 for u in result.uncertainty_ns.values())


def test_ranks_sharing_a_host_share_one_offset() -> None:
    exits = [10**18 + i * 1_000_000 for i in range(10)]
    comm = {
        0: comm_table(exits),
        1: comm_table([e + 500 for e in exits]),
        2: comm_table([e + 900_000 for e in exits]),
    }
    result = align.estimate(comm, {0: "hostA", 1: "hostA", 2: "hostB"})
    assert result.offset_ns[0] == result.offset_ns[1] == 0
    assert abs(result.offset_ns[2] + 900_000) < 1_000


def test_no_shared_collective_means_no_offset() -> None:
    result = align.estimate({0: comm_table([1, 2], "a"), 1: comm_table([5, 6], "b")})
    assert result.offset_ns == {0: 0, 1: 0}
    assert result.uncertainty_ns == {0: None, 1: None}
    assert result.instances == 0


@pytest.mark.parametrize("fmt", ["kineto", "ascend"])
def test_recovers_the_simulators_clock_skew_across_nodes(tmp_path: Path, fmt: str) -> None:
    """Two nodes, pipeline stages across them: only send/recv pairs cross the nodes, and they suffice."""
    from click.testing import CliRunner

    from paradiag.simulator.cli import simulate

    args = [
        "--dp",
        "2",
        "--tp",
        "4",
        "--pp",
        "2",
        "--steps",
        "2",
        "--layers",
        "4",
        "--hidden",
        "1024",
        "--seq-len",
        "512",
    ]
    args += [
        "--inject",
        "clock_skew:nodes=1,ms=1700",
        "--format",
        fmt,
        "--seed",
        "5",
        "--quiet",
        "-o",
        str(tmp_path / "job"),
    ]
    result = CliRunner().invoke(simulate, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    truth = json.loads((tmp_path / "job" / "ground_truth.json").read_text())
    skewed = set(truth["faults"][0]["ranks"])
    job = paradiag.open(tmp_path / "job")
    offsets = dict(zip(job.rank_ids, job.ranks.column("clock_offset_ns").to_pylist(), strict=True))
    for rank, offset in offsets.items():
        expected = -SHIFT_NS if rank in skewed else 0
        assert abs(offset - expected) < 50_000, (rank, offset)


@pytest.mark.real
def test_events_of_all_ranks_load_when_offsets_were_applied(tmp_path: Path) -> None:
    folder = shared_path("gpu", "hta_sampled_128rank_job")
    shutil.copy(folder / "sampled_rank-0.json.gz", tmp_path / "sampled_rank-0.json.gz")
    shifted_copy(folder / "sampled_rank-1.json.gz", tmp_path / "sampled_rank-1.json.gz", SHIFT_NS // 1000)
    job = paradiag.open(tmp_path)
    assert job.ranks.column("clock_offset_ns")[1].as_py() != 0
    events = job.events()
    assert events.num_rows == sum(job.ranks.column("num_events").to_pylist())
    assert events.schema == job.events(ranks=[0]).schema


@pytest.mark.parametrize("fmt", ["kineto", "ascend"])
def test_kth_send_matches_kth_receive_in_1f1b(tmp_path: Path, fmt: str) -> None:
    """1F1B interleaves sends and receives differently on the two sides; seq still pairs each transfer."""
    from click.testing import CliRunner

    from paradiag.simulator.cli import simulate

    args = [
        "--pp",
        "2",
        "--microbatches",
        "4",
        "--steps",
        "2",
        "--layers",
        "2",
        "--hidden",
        "512",
        "--seq-len",
        "256",
    ]
    args += ["--vocab", "1024", "--format", fmt, "--seed", "3", "--quiet", "-o", str(tmp_path / "job")]
    assert CliRunner().invoke(simulate, args, catch_exceptions=False).exit_code == 0
    events = paradiag.open(tmp_path / "job").events().to_pylist()
    p2p = [e for e in events if e["device"] >= 0 and e["collective"] in ("send", "recv")]
    sends = {
        (e["group"], e["step"], e["rank"], e["peer"], e["seq"]): e for e in p2p if e["collective"] == "send"
    }
    recvs = {
        (e["group"], e["step"], e["peer"], e["rank"], e["seq"]): e for e in p2p if e["collective"] == "recv"
    }
    assert len(sends) == len(recvs) == 2 * 2 * 4  # per step: 4 activations forward, 4 gradients back
    assert sends.keys() == recvs.keys()
    for key, send in sends.items():
        recv = recvs[key]
        assert recv["bytes"] == send["bytes"], key
        # The data cannot arrive before it was sent (the receive may be posted later than the send ends).
        assert recv["start_ns"] + recv["dur_ns"] >= send["start_ns"], key
