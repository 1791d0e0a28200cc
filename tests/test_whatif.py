"""The what-if replay: without edits it gives back the traces; with a finding's cause removed it predicts the step
time the simulator measures when the same job runs without the fault."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner

import paradiag
from paradiag.analysis.whatif import Edit, EditError, job_graph, parse_edit, replay_error, what_if
from paradiag.cli import main
from paradiag.simulator import SimConfig, parse_fault, simulate

# Small enough for seconds, big enough that compute (not kernel launches) sets the step.
MESH = {"dp": 2, "tp": 2, "pp": 2, "steps": 3, "layers": 4, "jitter": 0.03, "seed": 3}


def _job(root: Path, name: str, *faults: str, **options: Any) -> paradiag.job.Job:
    folder = root / name
    if not folder.exists():
        simulate(
            SimConfig(output=folder, faults=tuple(parse_fault(f) for f in faults), **{**MESH, **options})
        )
    return paradiag.open(folder, cache_dir=root / f"{name}.cache")


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("whatif")


@pytest.fixture(scope="module")
def fault_free_ms(root: Path) -> float:
    return _job(root, "clean").diagnosis().step_time_ns / 1e6


@pytest.mark.parametrize(
    ("fault", "kind", "edit"),
    [
        ("slow_device:ranks=5,factor=1.3", "slow_device", "rank=5:compute=peer-median:steps=0+1+2"),
        ("host_stall:ranks=1,steps=1,ms=30", "host_stall", "rank=1:host=remove:steps=1"),
        ("slow_link:ranks=4-6,factor=8", "slow_link", "link=4-6:transfer=comparable"),
        (
            "operator_hotspot:ranks=6,operator=flash_attention,factor=4",
            "operator_hotspot",
            "rank=6:compute=peer-median",
        ),
    ],
)
def test_finding_what_if_predicts_the_fault_free_run(
    root: Path, fault_free_ms: float, fault: str, kind: str, edit: str
) -> None:
    job = _job(root, kind, fault)
    d = job.diagnosis()
    found = next(f for f in d.findings if f.kind == kind)
    assert found.what_if is not None
    assert found.what_if["edits"][0].startswith(edit.split(":steps")[0])
    assert found.what_if["predicted_step_ms"] == pytest.approx(fault_free_ms, rel=0.05)
    assert found.what_if["saving_ms"] > 0
    assert found.impact_pct == pytest.approx(found.what_if["saving_pct"])
    assert d.findings == sorted(d.findings, key=lambda f: -f.impact_pct)


def test_tokens_spread_evenly_predict_the_balanced_experts(root: Path) -> None:
    moe = {"dp": 4, "ep": 4, "tp": 2, "pp": 2, "layers": 4, "microbatches": 4}
    d = _job(root, "expert_imbalance", "expert_imbalance:ep_rank=1,factor=2.5", **moe).diagnosis()
    found = next(f for f in d.findings if f.kind == "expert_imbalance")
    assert (
        found.what_if is not None
        and found.what_if["edits"][0].startswith("rank=")
        and ":compute=balanced" in found.what_if["edits"][0]
    )
    fault_free = _job(root, "moe-clean", **moe).diagnosis().step_time_ns / 1e6
    assert found.what_if["predicted_step_ms"] == pytest.approx(fault_free, rel=0.05)


@pytest.mark.parametrize(
    ("options", "fault", "layers"),
    [
        ({}, "stage_imbalance:stage=1,extra=1", ([1, 3], [2, 2])),
        (
            {"pp": 4, "dp": 1, "layers": 8, "microbatches": 4},
            "stage_imbalance:stage=2,extra=2",
            ([1, 1, 4, 2], [3, 2, 2, 1]),
        ),
        (
            {"pp": 4, "layers": 8, "microbatches": 4, "schedule": "gpipe"},
            "stage_imbalance:stage=0,extra=2",
            ([4, 1, 1, 2], [2, 2, 2, 2]),
        ),
        (
            {
                "pp": 2,
                "dp": 1,
                "layers": 8,
                "microbatches": 4,
                "schedule": "interleaved",
                "virtual_stages": 2,
            },
            "stage_imbalance:stage=0,extra=2",
            ([6, 2], [4, 4]),
        ),
        (
            {"pp": 4, "dp": 1, "layers": 8, "microbatches": 4, "format": "ascend", "device": "910b"},
            "stage_imbalance:stage=3,extra=2",
            ([1, 1, 2, 4], [3, 2, 2, 1]),
        ),
    ],
    ids=["gpu-pp2", "gpu-pp4", "gpu-gpipe", "gpu-interleaved", "npu-pp4"],
)
def test_whole_layers_moved_predict_the_run_of_that_split(
    root: Path, options: dict[str, Any], fault: str, layers: tuple[list[int], list[int]]
) -> None:
    """The stages balanced by moving whole layers (the LM head and the embedding stay) predict the run the
    simulator makes of that split, a run as fast as the even split's at least, and the evidence quotes that
    prediction. With four micro-batches on four stages the even split is no pipeline's best: the simulator runs
    3/2/2/1 5 % faster than 2/2/2/2 (the last stage, on the critical path of every micro-batch, lighter), and the
    replay finds it."""
    # A layer as wide as the benchmark's: the LM head is then a fraction of a layer.
    options = {**options, "hidden": 2048, "heads": 16, "seq_len": 2048, "vocab": 8192}
    name = "-".join(f"{k}{v}" for k, v in options.items())
    even = _job(root, f"even{name}", **options).diagnosis().step_time_ns / 1e6
    d = _job(root, f"uneven{name}", fault, **options).diagnosis()
    found = next(f for f in d.findings if f.kind == "stage_imbalance")
    assert found.what_if is not None and found.what_if["edits"] == ["stages=balanced"]
    now, balanced = found.what_if["layers"]["now"], found.what_if["layers"]["balanced"]
    assert (now, balanced) == layers
    moved = (f"stage_imbalance:layers={'/'.join(map(str, balanced))}",) if len(set(balanced)) > 1 else ()
    run = (
        _job(root, f"split{'_'.join(map(str, balanced))}{name}", *moved, **options).diagnosis().step_time_ns
        / 1e6
    )
    assert found.what_if["predicted_step_ms"] == pytest.approx(run, rel=0.05)
    assert run <= even * 1.01
    assert found.evidence.endswith(f"to {found.what_if['predicted_step_ms']:.1f} ms")


def test_slow_tensor_parallel_link_in_an_interleaved_pipeline(root: Path) -> None:
    """Sends are eager: when the replay makes a receiver late (its stage's tensor-parallel link repaired, the other
    end of the wrap-around send from the last stage to the first is not), the send is not held for it."""
    options = {
        "dp": 2,
        "tp": 2,
        "pp": 4,
        "layers": 16,
        "microbatches": 8,
        "schedule": "interleaved",
        "virtual_stages": 2,
    }
    fault_free = _job(root, "interleaved", **options).diagnosis().step_time_ns / 1e6
    d = _job(root, "interleaved-slow-tp-link", "slow_link:ranks=12-13,factor=4", **options).diagnosis()
    found = next(f for f in d.findings if f.kind == "slow_link")
    assert found.what_if is not None and found.what_if["edits"][0].startswith(
        "link=12-13:transfer=comparable"
    )
    assert d.step_time_ns / 1e6 > 1.1 * fault_free
    assert found.what_if["predicted_step_ms"] == pytest.approx(
        fault_free, rel=0.01
    )  # about 3 % high when the send waited for its receiver


def test_host_stall_in_a_gpipe_pipeline(root: Path) -> None:
    """A stalled last-stage rank holds its tensor-parallel peer's compute stream (the batch's broadcast) while the
    peer's receives of several micro-batches end: each micro-batch's kernels wait for their own receive (the first
    kernel launched after it), not for the last one that ended before they started (7.7 % high when they did)."""
    options = {"dp": 1, "tp": 2, "pp": 4, "steps": 2, "layers": 8, "microbatches": 8, "schedule": "gpipe"}
    fault_free = _job(root, "gpipe", **options).diagnosis().step_time_ns / 1e6
    d = _job(root, "gpipe-host-stall", "host_stall:ranks=6,steps=1,ms=20", **options).diagnosis()
    found = next(f for f in d.findings if f.kind == "host_stall")
    assert found.what_if is not None and found.what_if["edits"][0].startswith("rank=6:host=remove")
    assert d.step_time_ns / 1e6 > 1.2 * fault_free
    assert found.what_if["predicted_step_ms"] == pytest.approx(fault_free, rel=0.01)


def test_replay_without_edits_gives_back_the_traces(root: Path) -> None:
    job = _job(root, "slow_device", "slow_device:ranks=5,factor=1.3")
    graph, peers = job_graph(job, job.diagnosis())
    assert replay_error(graph) == (0, 0.0)
    nothing = what_if(graph, peers, [Edit("rank", (5,), "compute", 1.0)])
    assert nothing.saving_ns == 0 and nothing.predicted_step_ns == nothing.step_ns


def test_a_factor_scales_the_culprit(root: Path, fault_free_ms: float) -> None:
    """Undoing the injected factor by hand predicts the fault-free run as well as the peers' median does."""
    job = _job(root, "slow_device", "slow_device:ranks=5,factor=1.3")
    graph, peers = job_graph(job, job.diagnosis())
    undone = what_if(graph, peers, [parse_edit(f"rank=5:compute={1 / 1.3}")])
    assert undone.predicted_step_ns / 1e6 == pytest.approx(fault_free_ms, rel=0.05)
    worse = what_if(graph, peers, [parse_edit("rank=5:compute=1.5")])
    assert worse.saving_ns < 0 < undone.saving_ns


def test_clock_skew_has_nothing_to_replay(root: Path) -> None:
    d = _job(root, "skew", "clock_skew:nodes=1,ms=3", devices_per_node=4).diagnosis()
    skew = next(f for f in d.findings if f.kind == "clock_skew")
    assert skew.what_if is None and skew.impact_pct == 0


@pytest.mark.parametrize(
    ("text", "edit"),
    [
        ("rank=37:compute=peer-median", Edit("rank", (37,), "compute", "peer-median")),
        ("rank=2:compute=balanced", Edit("rank", (2,), "compute", "balanced")),
        ("ranks=3+5:communication=0.5:steps=1-2", Edit("rank", (3, 5), "communication", 0.5, (1, 2))),
        ("rank=4:host=remove", Edit("rank", (4,), "host", "remove")),
        ("link=8-16:transfer=comparable", Edit("link", (8, 16), "transfer", "comparable")),
        ("stages=balanced", Edit("stages", value="balanced")),
    ],
)
def test_parse_edit(text: str, edit: Edit) -> None:
    assert parse_edit(text) == edit
    assert parse_edit(edit.text()) == edit


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("rank=x:compute=peer-median", "expected integers"),
        ("rank=3:gpu=peer-median", "'gpu' is not one of compute, communication, host"),
        ("rank=3:compute=fast", "neither peer-median nor balanced nor a factor"),
        ("rank=3:compute=0", "must be positive"),
        ("rank=3:host=0.5", "removed"),
        ("link=4:transfer=comparable", "two or more ranks"),
        ("link=4-5:compute=peer-median", "transfer=comparable"),
        ("node=1:compute=2", "not rank, link or stages"),
        ("rank=3", "give one change"),
        ("", "empty"),
    ],
)
def test_bad_edits_say_what_is_wrong(text: str, says: str) -> None:
    with pytest.raises(EditError, match=says):
        parse_edit(text)


def test_whatif_command(root: Path) -> None:
    job = _job(root, "host_stall", "host_stall:ranks=1,steps=1,ms=30")
    runner = CliRunner()
    base = ["whatif", str(job.source), "-o", str(root / "host_stall.cache")]
    result = runner.invoke(main, [*base, "--set", "rank=1:host=remove", "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert doc["schema"] == "paradiag.whatif/1" and doc["edits"] == ["rank=1:host=remove"]
    assert [s["step"] for s in doc["steps"]] == [0, 1, 2]
    stalled = doc["steps"][1]
    assert stalled["measured_ms"] - stalled["predicted_ms"] > 25  # the 30 ms stall, less what the job hid
    text = runner.invoke(main, [*base, "--set", "rank=1:host=remove", "--step", "1"])
    assert text.exit_code == 0 and "rank=1:host=remove:steps=1" in text.output and "saving" in text.output
    bad = runner.invoke(main, [*base, "--set", "rank=1:cpu=remove"])
    assert bad.exit_code == 2 and "'cpu' is not one of compute, communication, host" in bad.output
    missing = runner.invoke(main, [*base, "--set", "rank=99:compute=peer-median"])
    assert missing.exit_code == 1 and "no rank 99" in missing.output and "Traceback" not in missing.output


def test_stages_need_a_pipeline(root: Path) -> None:
    job = _job(root, "no-pipeline", dp=4, pp=1, tp=1)
    result = CliRunner().invoke(
        main, ["whatif", str(job.source), "-o", str(root / "no-pipeline.cache"), "--set", "stages=balanced"]
    )
    assert result.exit_code == 1 and "no pipeline stages to balance" in result.output


def test_edits_leave_the_graph_as_the_traces_have_it(root: Path) -> None:
    """An edit changes a copy of what it edits (``Timing.own``), never the graph: the diagnosis replays every
    finding on one graph, so one edit's change must not leak into the next replay."""
    job = _job(root, "slow_device", "slow_device:ranks=5,factor=1.3")
    graph, peers = job_graph(job, job.diagnosis())
    kept = {k: getattr(graph, k).copy() for k in ("start", "end", "tail", "floor", "gap")}
    edits = [
        "rank=5:compute=peer-median",
        "rank=5:communication=2",
        "rank=1:host=remove",
        "link=4-6:transfer=comparable",
        "stages=balanced",
    ]
    first = [what_if(graph, peers, [parse_edit(e)]).as_json() for e in edits]
    for name, values in kept.items():
        assert (getattr(graph, name) == values).all(), name
    assert [what_if(graph, peers, [parse_edit(e)]).as_json() for e in edits] == first
    assert replay_error(graph) == (0, 0.0)


def test_the_layers_are_counted_by_a_name_that_splits_its_runs_as_most_names_do() -> None:
    """A real dp4 x pp2 job under FSDP2, checkpointing and AdamW (stages of 4 and 6 blocks), runs per micro-batch:
    ``aten::detach_`` ran the fewest times (1 and 5), and was taken for the layers (a split of 1 : 5, its replay
    22 % slower than the profiled step); the layers' kernels, its backward nodes and its optimizer's per-tensor
    steps ran 1 : 1.5 (its foreach steps about so). The marker is the fewest-run name of the 1 : 1.5 names."""
    from paradiag.analysis.rebalance import _alike

    runs = {
        "aten::detach_": (1.0, 5.0),
        "aten::gelu_backward": (5.33, 8.0),
        "aten::_foreach_sqrt": (7.0, 9.67),
        "GeluBackward0": (10.67, 16.0),
        "aten::gelu": (16.0, 24.0),
        "aten::_foreach_mul_": (21.0, 29.0),
        "TBackward0": (21.33, 32.0),
        "aten::view": (120.0, 179.0),
    }
    names = list(runs)
    stage_runs = np.array([runs[n] for n in names]).T
    alike = [names[i] for i in _alike(stage_runs, np.arange(len(names)))]
    assert "aten::detach_" not in alike and {"aten::gelu_backward", "aten::gelu", "aten::view"} <= set(alike)
    assert min(alike, key=lambda n: sum(runs[n])) == "aten::gelu_backward"


def test_a_split_keeps_the_layers_the_model_has_when_it_has_fewer_than_chunks() -> None:
    """Each stage keeps a layer per model chunk in any split, but never more layers than the stages hold now: a
    zero-bubble pp2 job of two blocks and two chunks a rank counted one layer a stage, and a floor of two a stage
    made its "balanced" split 2/2, four layers, replayed 77 % slower (``pipe_zb_none_s52_llm``)."""
    from paradiag.analysis.edit import Peers
    from paradiag.analysis.rebalance import least_layers

    def peers(virtual: int) -> Peers:
        return Peers({0: 0, 1: 1}, {0: [0], 1: [1]}, {}, {0: 1, 1: 1}, virtual=virtual)

    assert least_layers(peers(2), (1, 1)) == 1
    assert least_layers(peers(2), (15, 18)) == 2  # a layer per chunk where the stages hold them
    assert least_layers(peers(1), (3, 5)) == 1
