"""The simulator's Ascend output: folder shape, the paradiag parser reading it, and its summaries' arithmetic."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from paradiag.parsers import ascend, kineto
from paradiag.simulator import SimConfig, parse_fault, simulate
from paradiag.simulator.groundtruth import read as read_truth

REAL = (
    Path(__file__).resolve().parents[1].parent
    / "shared"
    / "traces"
    / "npu"
    / "msinsight_alexnet_dp8_text_level1"
)
SMALL = {
    "dp": 2,
    "tp": 2,
    "pp": 2,
    "microbatches": 4,
    "steps": 2,
    "layers": 4,
    "hidden": 1024,
    "seq_len": 1024,
}
FOLDER = re.compile(r"^(?P<host>.+)_(?P<pid>\d+)_(?P<ts>\d{17})_ascend_pt$")


@pytest.fixture(scope="module")
def npu_job(tmp_path_factory: pytest.TempPathFactory) -> Path:
    cfg = SimConfig(
        output=tmp_path_factory.mktemp("npu") / "job",
        device="910b",
        format="ascend",
        faults=(parse_fault("slow_device:ranks=2,factor=1.4"),),
        **SMALL,
    )
    return simulate(cfg)


def _rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_folders_are_shaped_like_torch_npu_output(npu_job: Path) -> None:
    folders = sorted(p for p in npu_job.iterdir() if p.is_dir())
    assert len(folders) == 8
    for folder in folders:
        assert FOLDER.match(folder.name)
        info = json.loads(next(folder.glob("profiler_info_*.json")).read_text())
        rank = info["rank_id"]
        assert (folder / f"profiler_info_{rank}.json").is_file()
        meta = json.loads((folder / "profiler_metadata.json").read_text())
        assert (
            meta["distributed_args"]["tensor_model_parallel_size"] == 2
            and meta["distributed_args"]["rank"] == rank
        )
        assert {v["group_name"] for v in meta["parallel_group_info"].values()} == {
            "default_group",
            "dp",
            "tp",
            "pp",
        }
        out = folder / "ASCEND_PROFILER_OUTPUT"
        for name in (
            "trace_view.json",
            "kernel_details.csv",
            "step_trace_time.csv",
            "communication.json",
            "communication_matrix.json",
            "op_statistic.csv",
        ):
            assert (out / name).is_file(), name
        trace = json.loads((out / "trace_view.json").read_text())
        assert isinstance(trace, list) and all(isinstance(e["ts"], str) for e in trace if "ts" in e)
        assert not list(out.glob(".*part"))


@pytest.mark.skipif(not REAL.is_dir(), reason="the real Ascend traces (../shared/traces) are not here")
def test_headers_match_the_real_files(npu_job: Path) -> None:
    real = REAL / "rank0_ascend_pt" / "ASCEND_PROFILER_OUTPUT"
    ours = next(npu_job.glob("*_ascend_pt")) / "ASCEND_PROFILER_OUTPUT"
    for name in ("kernel_details.csv", "step_trace_time.csv", "op_statistic.csv"):
        assert (ours / name).read_text().splitlines()[0] == (real / name).read_text().splitlines()[0], name
    real_comm = json.loads((real / "communication.json").read_text())
    our_comm = json.loads((ours / "communication.json").read_text())
    real_op = next(v for k, v in real_comm["step50"]["collective"].items() if k != "Total Op Info")
    our_op = next(v for k, v in our_comm["step0"]["collective"].items() if k != "Total Op Info")
    assert our_op["Communication Time Info"].keys() == real_op["Communication Time Info"].keys()
    assert (
        our_op["Communication Bandwidth Info"]["HCCS"].keys()
        == real_op["Communication Bandwidth Info"]["HCCS"].keys()
    )
    assert (
        our_comm["step0"]["collective"]["Total Op Info"].keys()
        == real_comm["step50"]["collective"]["Total Op Info"].keys()
    )


def test_parser_reads_every_rank(npu_job: Path) -> None:
    ranks = set()
    for folder in npu_job.glob("*_ascend_pt"):
        parsed = ascend.parse(folder)
        ranks.add(parsed.rank)
        assert parsed.warnings == [] and parsed.world_size == 8
        assert parsed.steps.column("step").to_pylist() == [0, 1]
        events = parsed.events
        comm = events.filter(pc.equal(events.column("kind").cast(pa.string()), "communication"))
        assert {"all_gather", "reduce_scatter", "all_reduce", "send", "recv"} <= set(
            comm.column("collective").cast(pa.string()).to_pylist()
        )
        assert comm.column("group_ranks").null_count == 0
    assert ranks == set(range(8))


def test_step_trace_time_is_consistent(npu_job: Path) -> None:
    truth = read_truth(npu_job)
    for folder in npu_job.glob("*_ascend_pt"):
        rank = json.loads(next(folder.glob("profiler_info_*.json")).read_text())["rank_id"]
        for row in _rows(folder / "ASCEND_PROFILER_OUTPUT" / "step_trace_time.csv"):
            v = {k: float(x) for k, x in row.items()}
            assert v["Overlapped"] == pytest.approx(
                v["Communication"] - v["Communication(Not Overlapped)"], abs=2e-3
            )
            span = v["Computing"] + v["Communication(Not Overlapped)"] + v["Free"]
            assert v["Stage"] == pytest.approx(span - v["Bubble"], abs=5e-3)
            assert v["Computing"] == pytest.approx(truth["compute_us"][str(rank)][int(v["Step"])], rel=1e-3)


def test_gpu_and_npu_output_give_the_same_timeline(tmp_path: Path) -> None:
    """The same simulated job written in both formats parses to the same device intervals."""
    base = {**SMALL, "dp": 1, "steps": 1, "device": "910b"}
    gpu = simulate(SimConfig(output=tmp_path / "gpu", format="kineto", **base))
    npu = simulate(SimConfig(output=tmp_path / "npu", format="ascend", **base))
    gpu_files = {int(r): gpu / f for r, f in read_truth(gpu)["files"].items()}
    npu_files = {int(r): npu / f for r, f in read_truth(npu)["files"].items()}

    def intervals(events: pa.Table, kind: str) -> list[tuple[int, int]]:
        rows = events.filter(pc.equal(events.column("kind").cast(pa.string()), kind))
        return sorted(
            zip(rows.column("start_ns").to_pylist(), rows.column("dur_ns").to_pylist(), strict=True)
        )

    for rank in gpu_files:
        g, n = kineto.parse(gpu_files[rank]).events, ascend.parse(npu_files[rank]).events
        for kind in ("compute", "communication"):
            a, b = intervals(g, kind), intervals(n, kind)
            assert len(a) == len(b) > 0, kind
            assert max(abs(x[0] - y[0]) for x, y in zip(a, b, strict=True)) <= 2
            assert max(abs(x[1] - y[1]) for x, y in zip(a, b, strict=True)) <= 2


def test_slow_link_shows_in_the_link_matrix(tmp_path: Path) -> None:
    cfg = SimConfig(
        output=tmp_path / "job",
        device="910b",
        format="ascend",
        dp=4,
        steps=1,
        layers=2,
        hidden=1024,
        seq_len=512,
        jitter=0.0,
        faults=(parse_fault("slow_link:ranks=1-2,factor=6"),),
    )
    job = simulate(cfg)
    truth = read_truth(job)

    def total_links(rank: int) -> dict[str, float]:
        matrix = json.loads(
            (
                job / truth["files"][str(rank)] / "ASCEND_PROFILER_OUTPUT" / "communication_matrix.json"
            ).read_text()
        )
        ops = matrix["step0"]["collective"]
        key = next(k for k in ops if k.startswith("allreduce-total@"))
        return {pair: v["Bandwidth(GB/s)"] for pair, v in ops[key].items() if v["Transport Type"] != "LOCAL"}

    slow, fast = total_links(1)["1-2"], total_links(0)["0-1"]
    assert slow == pytest.approx(fast / 6, rel=0.05)
