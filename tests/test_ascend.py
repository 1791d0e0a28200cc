"""The Ascend parser on every folder of ../shared/traces/npu/ (skipped when the folder is absent)."""

from __future__ import annotations

import csv
import json
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from paradiag import schema
from paradiag.analysis.npu_breakdown import COLUMNS, step_breakdown
from paradiag.parsers import ascend, ascend_common, ascend_db, ascend_text, mindspore, msprof
from paradiag.parsers.base import ParsedRank

TRACES = Path(__file__).resolve().parents[1].parent / "shared" / "traces"
NPU = TRACES / "npu"
REFERENCE = TRACES.parent / "reference" / "msprof_level1_cluster_output"
JOBS = (
    "msinsight_alexnet_dp8_text_level1",
    "msinsight_alexnet_dp8_text_level0",
    "msinsight_alexnet_dp8_db_level1",
)

pytestmark = [
    pytest.mark.real,
    pytest.mark.skipif(not NPU.is_dir(), reason=f"shared NPU traces not found at {NPU}"),
]

_CACHE: dict[tuple[str, int], ParsedRank] = {}


def parsed(job: str, rank: int) -> ParsedRank:
    key = (job, rank)
    if key not in _CACHE:
        folder = NPU / job / f"rank{rank}_ascend_pt"
        _CACHE[key] = ascend.parse(folder, NPU / job)
    return _CACHE[key]


def kind_rows(p: ParsedRank, kind: str) -> pa.Table:
    return p.events.filter(pc.equal(p.events.column("kind").cast(pa.string()), kind))


def test_every_shared_npu_folder_is_covered() -> None:
    assert sorted(d.name for d in NPU.iterdir() if d.is_dir()) == sorted(
        [*JOBS, "msinsight_cluster16_aggregated"]
    )


@pytest.mark.parametrize("job", JOBS)
@pytest.mark.parametrize("rank", [0, 1])
def test_rank_folder_parses_to_canonical_tables(job: str, rank: int) -> None:
    folder = NPU / job / f"rank{rank}_ascend_pt"
    assert ascend.detect(folder)
    p = parsed(job, rank)
    assert p.events.schema.equals(schema.EVENTS, check_metadata=False)
    assert p.steps.schema.equals(schema.STEPS, check_metadata=False)
    assert p.rank == rank and p.rank_from == "metadata" and p.device_type == "npu"
    assert p.format == ("ascend_db" if "db" in job else "ascend_text")
    assert p.source == f"rank{rank}_ascend_pt"
    counts = Counter(p.events.column("kind").cast(pa.string()).to_pylist())
    assert counts[schema.COMPUTE] == 187 and counts[schema.COMMUNICATION] == 4 and counts[schema.MEMORY] == 24
    assert counts[schema.HOST] > (2400 if "level0" in job else 3000)  # Level0 records no CANN APIs
    # Steps: the one profiled step, ProfilerStep#50, with its host and device spans; all device work is in it.
    assert p.steps.column("step").to_pylist() == [50]
    step = p.steps.to_pylist()[0]
    assert step["start_ns"] < step["device_start_ns"] < step["device_end_ns"] <= step["end_ns"] + 10**7
    device = kind_rows(p, schema.COMPUTE)
    assert set(device.column("step").to_pylist()) == {50}
    assert set(device.column("device").to_pylist()) == {
        rank
    }  # NPU:0 / NPU:1 from memory_record.csv or the db
    assert p.run_id


@pytest.mark.parametrize("job", JOBS)
def test_collectives_carry_group_bytes_and_seq(job: str) -> None:
    for rank in (0, 1):
        comm = kind_rows(parsed(job, rank), schema.COMMUNICATION).sort_by("start_ns")
        assert comm.column("collective").cast(pa.string()).to_pylist() == ["all_reduce"] * 4
        assert comm.column("seq").to_pylist() == [0, 1, 2, 3]
        # count x FP32 (4 bytes): AlexNet's gradient buckets
        assert comm.column("bytes").to_pylist() == [16388000, 67125248, 151011328, 9878784]
        assert comm.column("track").to_pylist() == [4] * 4  # the HCCL stream
        groups = set(comm.column("group").cast(pa.string()).to_pylist())
        assert len(groups) == 1
        if "level0" not in job:  # the hash communication*.json uses, also derived from the db's group name
            assert groups.pop().isdigit()


def test_text_ts_strings_are_exact_nanoseconds() -> None:
    p = parsed(JOBS[0], 0)
    first = kind_rows(p, schema.COMPUTE).sort_by("start_ns").slice(0, 1).to_pylist()[0]
    assert first["name"] == "trans_TransData_0"
    assert first["start_ns"] == 1736408883704643212  # "1736408883704643.212" in trace_view.json
    assert ascend_text.ts_ns("1736408883973810") == 1736408883973810000


@pytest.mark.parametrize("job", JOBS)
@pytest.mark.parametrize("rank", [0, 1])
def test_breakdown_matches_producer_step_trace_time(job: str, rank: int) -> None:
    """The breakdown computed from the events agrees with step_trace_time.csv / analysis.db within 1 %."""
    p = parsed(job, rank)
    mine = step_breakdown(p.events, p.steps).to_pylist()[0]
    theirs = p.extra["step_trace"].to_pylist()[0]
    assert mine["step"] == theirs["step"] == 50
    for col in COLUMNS:
        assert mine[col] == pytest.approx(theirs[col], rel=0.01, abs=1000), col


def test_breakdown_matches_msprof_analyze_reference() -> None:
    if not REFERENCE.is_dir():
        pytest.skip(f"msprof-analyze reference output not found at {REFERENCE}")
    with open(REFERENCE / "cluster_step_trace_time.csv", newline="") as f:
        rows = {int(r["Index"]): r for r in csv.DictReader(f) if r["Type"] == "rank"}
    for rank in (0, 1):
        p = parsed(JOBS[0], rank)
        mine = step_breakdown(p.events, p.steps).to_pylist()[0]
        for title, col in ascend_common.STEP_TRACE_COLUMNS.items():
            assert mine[col] / 1000 == pytest.approx(float(rows[rank][title]), rel=0.01, abs=1.0), title


def test_communication_extras_match_msprof_analyze_reference() -> None:
    if not REFERENCE.is_dir():
        pytest.skip(f"msprof-analyze reference output not found at {REFERENCE}")
    reference = json.loads((REFERENCE / "cluster_communication.json").read_text())["(0, 1)"]["step50"]
    for rank in (0, 1):
        ops = parsed(JOBS[0], rank).extra["comm_ops"].to_pylist()
        assert len(ops) == 4
        for op in ops:
            ref = reference[f"{op['op_name']}@{op['group']}"][str(rank)]["Communication Time Info"]
            assert op["elapse_ns"] == pytest.approx(ref["Elapse Time(ms)"] * 1e6, abs=1)
            assert op["wait_ns"] == pytest.approx(ref["Wait Time(ms)"] * 1e6, abs=1)
            assert op["synchronization_ratio"] == ref["Synchronization Time Ratio"]


@pytest.mark.parametrize("job", [JOBS[0], JOBS[2]])
def test_link_level_tables(job: str) -> None:
    p = parsed(job, 0)
    links = p.extra["links"]
    assert links.num_rows == 48
    assert set(links.column("transport").to_pylist()) == {"LOCAL", "HCCS"}
    assert set(links.column("dst_rank").to_pylist()) == set(
        range(8)
    )  # group-local ranks of the 8-rank DP group
    tasks = p.extra["comm_tasks"]
    assert tasks.num_rows == 296
    assert tasks.column("op_name").null_count == 0  # every plane task is tied to its collective
    hccs = tasks.filter(pc.equal(tasks.column("link_type"), "HCCS"))
    assert hccs.num_rows > 0 and pc.min(hccs.column("bytes")).as_py() > 0
    bandwidth = p.extra["comm_bandwidth"].filter(
        pc.equal(p.extra["comm_bandwidth"].column("link_type"), "HCCS")
    )
    assert all(5 < b < 30 for b in bandwidth.column("bandwidth_gbps").to_pylist())  # GB/s over HCCS on 910B
    assert [g.description for g in p.groups] == ["HCCL group of 8 ranks; members not recorded"]


def test_text_and_db_exports_give_the_same_canonical_tables() -> None:
    """The shared text and db folders are two profiling runs of the same job (one step each, minutes apart), so
    times differ by run-to-run jitter: device work must agree kernel for kernel, collectives op for op."""
    for rank in (0, 1):
        text, db = parsed(JOBS[0], rank), parsed(JOBS[2], rank)
        for kind in (schema.COMPUTE, schema.MEMORY, schema.COMMUNICATION):
            a, b = kind_rows(text, kind), kind_rows(db, kind)
            assert a.num_rows == b.num_rows, kind
            assert pc.sum(a.column("dur_ns")).as_py() == pytest.approx(
                pc.sum(b.column("dur_ns")).as_py(), rel=0.05 if kind != schema.MEMORY else 0.7
            )
            if kind != schema.COMMUNICATION:  # HCCL op names carry a per-run id
                assert Counter(a.column("name").cast(pa.string()).to_pylist()) == Counter(
                    b.column("name").cast(pa.string()).to_pylist()
                )
        for col in ("collective", "bytes", "seq", "track", "step", "category"):
            a = kind_rows(text, schema.COMMUNICATION).sort_by("start_ns").column(col).to_pylist()
            assert a == kind_rows(db, schema.COMMUNICATION).sort_by("start_ns").column(col).to_pylist(), col
        ta, tb = (
            Counter(text.events.column("category").cast(pa.string()).to_pylist()),
            Counter(db.events.column("category").cast(pa.string()).to_pylist()),
        )
        for cat in ("cpu_op", "python_function", "enqueue", "dequeue", "node", "hccl"):
            assert ta[cat] == tb[cat], cat
        assert text.steps.column("step").to_pylist() == db.steps.column("step").to_pylist()
        assert set(text.extra) == set(db.extra) | {"op_statistic"}
        breakdown_t = step_breakdown(text.events, text.steps).to_pylist()[0]
        breakdown_d = step_breakdown(db.events, db.steps).to_pylist()[0]
        assert breakdown_t["computing_ns"] == pytest.approx(breakdown_d["computing_ns"], rel=0.01)


def test_level0_loads_and_says_what_needs_level1() -> None:
    p = parsed(JOBS[1], 0)
    assert not {"comm_ops", "links", "comm_tasks", "op_statistic"} & set(p.extra)
    assert {"kernels", "step_trace"} <= set(p.extra)
    assert (
        p.extra["kernels"].num_rows == 191 and p.extra["kernels"].column("op_type").null_count == 191
    )  # N/A at Level0
    note = [w for w in p.warnings if "Level1" in w]
    assert note and "Level0" in note[0] and "bandwidth" in note[0]
    assert not [w for w in parsed(JOBS[0], 0).warnings if "Level1" in w]


def test_runs_are_told_apart() -> None:
    runs = {job: {parsed(job, r).run_id for r in (0, 1)} for job in JOBS}
    assert all(len(ids) == 1 for ids in runs.values()), runs  # both ranks of one run agree
    assert len({next(iter(ids)) for ids in runs.values()}) == 3  # three different runs


def test_kernel_details_columns_mapped_by_name() -> None:
    kernels = parsed(JOBS[0], 0).extra["kernels"]
    first = kernels.slice(0, 1).to_pylist()[0]
    assert first["start_ns"] == 1736408883704643212  # the trailing tab is gone, digits exact
    assert (
        first["input_shapes"] == "32,3,224,224"
        and first["op_type"] == "TransData"
        and first["block_dim"] == 32
    )
    stats = parsed(JOBS[0], 0).extra["op_statistic"]
    assert stats.slice(0, 1).to_pylist()[0]["op_type"] == "ForeachAddList"


def test_cluster_metadata_gives_layout_and_groups() -> None:
    """The aggregated 16-rank folder holds no rank source, but its profiler_metadata.json is the richest sample of
    distributed_args + parallel_group_info."""
    folder = NPU / "msinsight_cluster16_aggregated"
    assert not any(m.detect(d) for d in folder.rglob("*") if d.is_dir() for m in (ascend, msprof, mindspore))
    info = ascend_common.FolderInfo(rank=0)
    ascend_common.apply_metadata(
        info, json.loads((folder / "metadata" / "profiler_metadata.json").read_text())
    )
    assert info.world_size == 8
    assert info.parallel == {"tp": 0, "dp": 0, "pp": 0, "ep": 0}
    by_name = {g.description: g.ranks for g in info.groups.values()}
    assert by_name["tp"] == [0, 1] and by_name["pp"] == [0, 4] and by_name["dp"] == [0, 2]
    assert ascend_common.parallel_coordinates({"tensor_model_parallel_size": 2, "pipeline_model_parallel_size": 2,
                                               "data_parallel_size": 2}, 7) == {"tp": 1, "dp": 1, "pp": 1, "ep": 0}  # fmt: skip


def test_db_group_name_hash_is_the_text_group_id() -> None:
    assert (
        ascend_common.group_hash("90.91.105.46%enp189s0f0_60000_0_1736410538306028") == "17148521525495523210"
    )
    db = parsed(JOBS[2], 0)
    assert (
        db.extra["comm_ops"].column("group").to_pylist()[0] == "17148521525495523210"
    )  # analysis.db's own id
    assert ascend_db.detect(NPU / JOBS[2] / "rank0_ascend_pt") and not ascend_db.detect(
        NPU / JOBS[0] / "rank0_ascend_pt"
    )


def test_db_level0_no_value_marker_in_communication_tasks(tmp_path: Path) -> None:
    """Level0 db exports write 4294967295 (32-bit "no value") into planeId, srcRank and dstRank: read as unknown."""
    import shutil
    import sqlite3

    folder = tmp_path / "rank0_ascend_pt"
    shutil.copytree(NPU / JOBS[2] / "rank0_ascend_pt", folder)
    db = ascend_db.find_db(folder)
    assert db is not None
    with sqlite3.connect(db) as conn:
        conn.execute(
            "update COMMUNICATION_TASK_INFO set planeId = 4294967295, srcRank = 4294967295, dstRank = 4294967295"
        )
    p = ascend.parse(folder, tmp_path)
    tasks = p.extra["comm_tasks"]
    assert tasks.num_rows > 0
    assert tasks.column("plane").null_count == tasks.num_rows
    assert tasks.column("src_rank").null_count == tasks.column("dst_rank").null_count == tasks.num_rows


@pytest.mark.parametrize("job", [JOBS[0], JOBS[2]])
def test_world_size_and_layout_from_communication_groups(job: str, tmp_path: Path) -> None:
    """Two profiled ranks of an 8-rank data-parallel job: the all-reduce group has 8 members."""
    import paradiag
    from paradiag.analysis.diagnose import diagnose

    opened = paradiag.open(NPU / job, cache_dir=tmp_path / "cache")
    assert opened.ranks.column("world_size").to_pylist() == [8, 8]
    diagnosis = diagnose(opened)
    layout = diagnosis.layout
    assert (layout.size["dp"], layout.size["tp"], layout.size["pp"]) == (8, 1, 1)
    assert {r: c["dp"] for r, c in layout.coords.items()} == {0: 0, 1: 1}
    # Bus bandwidth with the group's 8 members (factor 2 x 7 / 8), not the 2 profiled ones.
    for row in diagnosis.instances.to_pylist():
        if row["collective"] == "all_reduce" and row["transfer_ns"] > 0 and row["bytes"] > 0:
            assert row["busbw_gbps"] == pytest.approx(row["bytes"] * 1.75 / row["transfer_ns"])


@pytest.mark.parametrize("job", JOBS)
def test_report_breakdown_reproduces_step_trace_time(job: str, tmp_path: Path) -> None:
    """The report's default NPU breakdown is the producer's: window = Stage, comm_exposed = Communication (Not
    Overlapped), comm_overlapped = Overlapped, idle = Free, each within 0.5 % of Stage."""
    import paradiag
    from paradiag.analysis.report import build_report

    opened = paradiag.open(NPU / job, cache_dir=tmp_path / "cache")
    for entry in build_report(opened)["ranks"]:
        assert (
            entry["steps"][0]["breakdown"]["window_ns"] == entry["breakdown"]["window_ns"]
        )  # one step: the same
        theirs = parsed(job, entry["rank"]).extra["step_trace"].to_pylist()[0]
        mine, stage = entry["breakdown"], theirs["stage_ns"]
        pairs = (("window_ns", "stage_ns"), ("compute_ns", "computing_ns"), ("comm_exposed_ns", "communication_not_overlapped_ns"),
                 ("comm_overlapped_ns", "overlapped_ns"), ("idle_ns", "free_ns"))  # fmt: skip
        for ours, producer in pairs:
            assert abs(mine[ours] - theirs[producer]) <= 0.005 * stage, (ours, mine[ours], theirs[producer])


def test_analyze_convention_option(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from paradiag.cli import main

    folder = NPU / JOBS[0]
    windows = {}
    for convention in ("ascend", "paradiag"):
        result = CliRunner().invoke(
            main,
            ["analyze", str(folder), "-o", str(tmp_path / "cache"), "--json", "--convention", convention],
        )
        assert result.exit_code == 0, result.output
        windows[convention] = json.loads(result.output)["ranks"][0]["breakdown"]["window_ns"]
    assert windows["ascend"] == pytest.approx(
        136_581_000, abs=1_000
    )  # Stage of step 50 in step_trace_time.csv
    assert windows["paradiag"] > windows["ascend"]  # every device task, memory copies included


@pytest.mark.parametrize("job", [JOBS[0], JOBS[2]])
def test_communication_matrix_from_the_exported_link_traffic(job: str, tmp_path: Path) -> None:
    """Level1 exports record per-link traffic (communication_matrix.json / the db): the report's matrix is it."""
    import paradiag
    from paradiag.analysis.report import build_report

    opened = paradiag.open(NPU / job, cache_dir=tmp_path / "cache")
    matrix = build_report(opened)["metrics"]["communication_matrix"]
    links = opened.extra("links").to_pylist()
    sent = [r for r in links if r["transport"] != "LOCAL" and r["bytes"]]
    assert {(m["src"], m["dst"]) for m in matrix} == {(r["src_rank"], r["dst_rank"]) for r in sent}
    assert len(matrix) == 14 and {m["src"] for m in matrix} == {0, 1}  # 2 profiled ranks x 7 peers
    assert sum(m["bytes"] for m in matrix) == sum(r["bytes"] for r in sent)
    assert all(m["link_type"] == "intra" and m["bandwidth_gbps"] > 0 for m in matrix)
