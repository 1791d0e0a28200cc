"""``paradiag simulate``: every option documented, impossible jobs refused with a clear message, a job written."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from paradiag.simulator.cli import simulate
from paradiag.simulator.groundtruth import read as read_truth

OPTIONS = (
    "--model",
    "--device",
    "--dp",
    "--tp",
    "--pp",
    "--ep",
    "--schedule",
    "--virtual-stages",
    "--microbatches",
    "--steps",
    "--layers",
    "--inject",
    "--format",
    "--gzip",
    "--jitter",
    "--seed",
    "--output",
)


def test_help_documents_every_option() -> None:
    result = CliRunner().invoke(simulate, ["--help"])
    assert result.exit_code == 0
    for option in OPTIONS:
        assert option in result.output, option
    for kind in (
        "slow_device",
        "slow_link",
        "stage_imbalance",
        "host_stall",
        "operator_hotspot",
        "clock_skew",
        "expert_imbalance",
    ):
        assert kind in result.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--tp", "16"], "larger than a node"),
        (["--pp", "8", "--layers", "4"], "larger than the model allows"),
        (["--dp", "2", "--inject", "slow_device:ranks=9"], "rank 9 is out of range"),
        (["--inject", "wobbly_gpu:ranks=0"], "unknown fault kind 'wobbly_gpu'"),
        (["--inject", "slow_device:color=red"], "unknown parameter"),
        (
            [
                "--pp",
                "2",
                "--schedule",
                "interleaved",
                "--virtual-stages",
                "2",
                "--microbatches",
                "3",
                "--layers",
                "8",
            ],
            "divisible by --pp",
        ),
        (["--model", "resnet50", "--tp", "2"], "data parallel only"),
        (["--dp", "4", "--ep", "3"], "--ep 3 must divide --dp 4"),
        (["--dp", "2", "--inject", "expert_imbalance:factor=2"], "needs an MoE model"),
        (["--pp", "2", "--inject", "slow_device:ranks=0,steps=9"], "step 9 is out of range"),
    ],
)
def test_impossible_jobs_are_refused(tmp_path: Path, args: list[str], message: str) -> None:
    result = CliRunner().invoke(simulate, [*args, "-o", str(tmp_path / "job")])
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert not (tmp_path / "job").exists()


def test_writes_a_job(tmp_path: Path) -> None:
    out = tmp_path / "job"
    args = [
        "--dp",
        "2",
        "--pp",
        "2",
        "--steps",
        "1",
        "--layers",
        "2",
        "--microbatches",
        "2",
        "--gzip",
        "--quiet",
        "--inject",
        "slow_device:rank=1,factor=1.3",
        "--seed",
        "7",
        "-o",
        str(out),
    ]
    result = CliRunner().invoke(simulate, args)
    assert result.exit_code == 0, result.output
    assert "4 ranks x 1 steps" in result.output
    truth = read_truth(out)
    assert truth["seed"] == 7 and truth["faults"][0] == {"kind": "slow_device", "ranks": [1], "factor": 1.3}
    assert sorted(p.name.split(".")[0] for p in out.glob("rank*.pt.trace.json.gz")) == [
        "rank0",
        "rank1",
        "rank2",
        "rank3",
    ]


def test_no_p2p_peer_writes_send_recv_without_rank(tmp_path: Path) -> None:
    """--no-p2p-peer: send/recv carry their group and its ranks but no "Rank" (older PyTorch); collectives keep it."""
    import json

    out = tmp_path / "job"
    args = [
        "--pp",
        "2",
        "--microbatches",
        "2",
        "--steps",
        "1",
        "--layers",
        "2",
        "--hidden",
        "256",
        "--seq-len",
        "128",
    ]
    args += ["--vocab", "1024", "--dp", "2", "--no-p2p-peer", "--quiet", "-o", str(out)]
    assert CliRunner().invoke(simulate, args, catch_exceptions=False).exit_code == 0
    events = json.loads(next(out.glob("rank0.*.pt.trace.json")).read_text())["traceEvents"]
    comms = [e["args"] for e in events if e.get("name") == "record_param_comms"]
    p2p = [a for a in comms if a["Collective name"] in ("send", "recv")]
    assert p2p and all("Rank" not in a and a["Process Group Ranks"] for a in p2p)
    assert all("Rank" in a for a in comms if a not in p2p)
    assert json.loads((out / "ground_truth.json").read_text())["p2p_peer"] is False
