"""The streamed Ascend timeline reader (parsers/ascend_trace.py, ascend_timeline.py) and the Arrow CSV reader:
exact ts conversion in bulk, slice boundaries, metadata anywhere in the file, external_id from async_npu flows,
send/recv peers from the HCCL plane tasks. Synthetic folders, plus checks on the shared traces (skipped when
absent) and on the simulator's sample job."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from paradiag import schema
from paradiag.parsers import ascend, ascend_common, ascend_text, ascend_trace, json_stream
from paradiag.parsers.base import Group

REPO = Path(__file__).resolve().parents[1]
NPU = REPO.parent / "shared" / "traces" / "npu"
PP_SAMPLE = REPO / "sample_traces" / "npu_pangu_pipeline_stage_imbalance"
PY, CANN, HW, HCCL = 4242, 9001, 9002, 9003
T0 = 1736408883700000  # epoch µs


def ts(us: float) -> str:
    ns = round((T0 + us) * 1000)
    return f"{ns // 1000}.{ns % 1000:03d}"


def meta(pid: int, name: str, threads: dict[int, str] | None = None) -> list[dict[str, Any]]:
    out = [{"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": name}}]
    out += [
        {"ph": "M", "name": "thread_name", "pid": pid, "tid": t, "args": {"name": n}}
        for t, n in (threads or {}).items()
    ]
    return out


def timeline(peer_local: int, kind: str = "send") -> list[dict[str, Any]]:
    """One step: a host op launching a kernel (CANN launch, HostToDevice and async_npu flows), an HCCL send or
    receive with its plane tasks, a counter, and the metadata *after* the events (as torch_npu writes Python's)."""
    op = "hcom_send__1_0_1" if kind == "send" else "hcom_receive__1_0_1"
    src, dst = (0, peer_local) if kind == "send" else (peer_local, 0)
    events = [
        {
            "ph": "X",
            "name": "ProfilerStep#7",
            "pid": PY,
            "tid": 1,
            "ts": ts(0),
            "dur": 1000.0,
            "cat": "cpu_op",
            "args": {},
        },
        {
            "ph": "X",
            "name": "aten::mm",
            "pid": PY,
            "tid": 1,
            "ts": ts(10),
            "dur": 50.0,
            "cat": "cpu_op",
            "args": {"Call stack": "x.py(1): f"},
        },
        {
            "ph": "X",
            "name": "aten::empty",
            "pid": PY,
            "tid": 1,
            "ts": ts(10),
            "dur": 5.5,
            "cat": "cpu_op",
            "args": {},
        },
        {
            "ph": "s",
            "name": "torch_to_npu",
            "id": 1736408883700100000,
            "pid": PY,
            "tid": 1,
            "ts": ts(10),
            "cat": "async_npu",
            "bp": "e",
        },
        {
            "ph": "X",
            "name": "Node@launch",
            "pid": CANN,
            "tid": 1,
            "ts": ts(12),
            "dur": 3.0,
            "args": {"level": "node", "connection_id": 11},
        },
        {
            "ph": "s",
            "name": "HostToDevice11",
            "id": "11",
            "pid": CANN,
            "tid": 1,
            "ts": ts(12),
            "cat": "HostToDevice",
        },
        {
            "ph": "X",
            "name": "MatMul_1",
            "pid": HW,
            "tid": 2,
            "ts": ts(100),
            "dur": 200.123,
            "args": {"Task Type": "AI_CORE", "connection_id": 11},
        },
        {
            "ph": "f",
            "name": "HostToDevice11",
            "id": "11",
            "pid": HW,
            "tid": 2,
            "ts": ts(100),
            "cat": "HostToDevice",
            "bp": "e",
        },
        {
            "ph": "f",
            "name": "torch_to_npu",
            "id": 1736408883700100000,
            "pid": HW,
            "tid": 2,
            "ts": ts(100),
            "cat": "async_npu",
            "bp": "e",
        },
        {
            "ph": "X",
            "name": "HcomSend",
            "pid": CANN,
            "tid": 1,
            "ts": ts(400),
            "dur": 3.0,
            "args": {"level": "node", "connection_id": 12},
        },
        {
            "ph": "X",
            "name": "Notify Wait",
            "pid": HW,
            "tid": 5,
            "ts": ts(500),
            "dur": 10.0,
            "args": {"Task Type": "Notify Wait", "connection_id": 12},
        },
        {
            "ph": "X",
            "name": op,
            "pid": HCCL,
            "tid": 0,
            "ts": ts(500),
            "dur": 100.0,
            "args": {"connection_id": 12, "data_type": "BF16", "count": 1024},
        },
        {
            "ph": "X",
            "name": "Notify_Wait",
            "pid": HCCL,
            "tid": 1,
            "ts": ts(500),
            "dur": 10.0,
            "args": {
                "stream id": 5,
                "task type": "Notify_Wait",
                "src rank": dst,
                "dst rank": src,
                "transport type": "SDMA",
                "size(Byte)": 0,
            },
        },
        {
            "ph": "X",
            "name": "Memcpy",
            "pid": HCCL,
            "tid": 1,
            "ts": ts(510),
            "dur": 80.0,
            "args": {
                "stream id": 5,
                "task type": "Memcpy",
                "src rank": src,
                "dst rank": dst,
                "transport type": "SDMA",
                "size(Byte)": 2048,
                "link type": "HCCS",
            },
        },
        {"ph": "C", "name": "HBM 0/Read", "pid": 9004, "tid": 0, "ts": ts(1), "args": {"Read(MB/s)": 1.0}},
    ]
    return [
        *events,
        *meta(PY, "Python"), *meta(CANN, "CANN"), *meta(HW, "Ascend Hardware"),
        *meta(HCCL, "HCCL", {0: "Group 1 Communication", 1: "Plane 0"}), *meta(9004, "HBM"),
    ]  # fmt: skip


def rank_folder(
    root: Path, events: list[dict[str, Any]], rank: int = 1, groups: dict[str, Any] | None = None
) -> Path:
    folder = root / f"host_{100 + rank}_2025010100000000{rank}_ascend_pt"
    out = folder / "ASCEND_PROFILER_OUTPUT"
    out.mkdir(parents=True)
    (out / "trace_view.json").write_text(json.dumps(events))
    (folder / f"profiler_info_{rank}.json").write_text(json.dumps({"rank_id": rank, "config": {}}))
    if groups is not None:  # the members, and communication.json naming each op's group (by its hash)
        (folder / "profiler_metadata.json").write_text(json.dumps({"parallel_group_info": groups}))
        gid = ascend_common.group_hash(next(iter(groups)))
        ops = {e["name"] for e in events if e.get("pid") == HCCL and e.get("tid") == 0 and e.get("ph") == "X"}
        info = {"Communication Time Info": {"Elapse Time(ms)": 0.1}, "Communication Bandwidth Info": {}}
        (out / "communication.json").write_text(
            json.dumps({"step7": {"p2p": {f"{op}@{gid}": info for op in ops}}})
        )
    return folder


def by_name(events: pa.Table, name: str) -> dict[str, Any]:
    rows = events.filter(pc.equal(events.column("name").cast(pa.string()), name)).to_pylist()
    assert len(rows) == 1, name
    return rows[0]


@pytest.mark.parametrize(
    "text",
    [
        "1736408883704643.212",
        "1736408883704643",
        "12.5",
        " 7.000\t",
        "-1.250",
        "0.0009",
        "",
        "N/A",
        "1e3",
        "99999999999999999999.000",
    ],
)
def test_bulk_us_text_matches_the_exact_scalar_conversion(text: str) -> None:
    bulk = ascend_trace.us_text_to_ns(pa.array([text, "1.000"])).to_pylist()[0]
    scalar = ascend_trace.ts_ns(text)
    assert bulk == (scalar if scalar is not None and abs(scalar) < 2**63 and "e" not in text else None)


def test_columns_of_mixed_types_still_convert() -> None:
    assert ascend_trace.ts_column(["1.000", 2, 3.5, None, "x"]).to_pylist() == [1000, 2000, 3500, None, None]
    assert ascend_trace.dur_column([1.5, "2.25", None, float("nan"), 0.0025]).to_pylist() == [
        1500,
        2250,
        None,
        None,
        2,
    ]


def test_synthetic_rank_streams_with_metadata_last(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    group = {"g": {"group_name": "pp", "global_ranks": [3, 5]}}
    folder = rank_folder(tmp_path, timeline(peer_local=1), rank=3, groups=group)
    whole = ascend.parse(folder, tmp_path)
    monkeypatch.setattr(
        json_stream, "SLICE", 300
    )  # a slice of a few events: many cuts, metadata in a late slice
    monkeypatch.setattr(json_stream, "BLOCK", 512)
    sliced = ascend.parse(folder, tmp_path)
    assert sliced.events.equals(whole.events) and sliced.steps.equals(whole.steps)
    events = whole.events
    kernel, host, inner = (
        by_name(events, "MatMul_1"),
        by_name(events, "aten::mm"),
        by_name(events, "aten::empty"),
    )
    assert (
        kernel["start_ns"] == (T0 + 100) * 1000
        and kernel["dur_ns"] == 200123
        and kernel["kind"] == schema.COMPUTE
    )
    assert kernel["step"] == 7 and kernel["correlation"] == 11
    # the async_npu arrow leaves the innermost op starting at its tail: aten::empty, not aten::mm
    assert kernel["external_id"] == inner["external_id"] >= 0 and host["external_id"] == -1
    send = by_name(events, "hcom_send__1_0_1")
    gid = ascend_common.group_hash("g")
    assert send["collective"] == "send" and send["bytes"] == 2048 and send["track"] == 5
    assert send["peer"] == 5  # group-local 1 of [3, 5]
    assert by_name(events, "launch")["category"] == "node"
    assert send["group"] == gid and send["group_ranks"] == "3,5"
    assert [(g.group, g.ranks) for g in whole.groups] == [(gid, [3, 5])]
    tasks = whole.extra["comm_tasks"].to_pylist()
    assert [t["name"] for t in tasks] == ["Notify_Wait", "Memcpy"]
    assert (
        all(t["op_name"] == "hcom_send__1_0_1" for t in tasks) and tasks[1]["bandwidth_gbps"] == 2048 / 80000
    )


@pytest.mark.parametrize(
    ("kind", "members", "peer"), [("receive", None, 1), ("receive", [3, 5], 5), ("send", None, 1)]
)
def test_peer_without_and_with_group_members(
    tmp_path: Path, kind: str, members: list[int] | None, peer: int
) -> None:
    # Without members the peer is group-local, from the transfer's direction; with them, global.
    folder = rank_folder(tmp_path, timeline(peer_local=1, kind=kind), rank=3)
    parsed = ascend.parse(folder, tmp_path)
    op = f"hcom_{kind}__1_0_1"
    if members is not None:
        tasks = parsed.extra["comm_tasks"]
        groups = {"Group 1": Group("Group 1", members)}
        assert ascend_common.p2p_peers([op], ["recv"], ["Group 1"], tasks, 3, groups) == [peer]
    else:
        assert by_name(parsed.events, op)["peer"] == peer


def test_unexpected_value_types_are_read_leniently(tmp_path: Path) -> None:
    events = timeline(peer_local=1)
    events[1] = {**events[1], "tid": [1], "name": 5}  # a list tid and a numeric name: lenient slice
    folder = rank_folder(tmp_path, events)
    parsed = ascend.parse(folder, tmp_path)
    assert any("read leniently" in w for w in parsed.warnings)
    assert by_name(parsed.events, "MatMul_1")["dur_ns"] == 200123


def test_csv_reader_strips_tabs_quotes_and_drops_a_broken_row(tmp_path: Path) -> None:
    path = tmp_path / "kernel_details.csv"
    path.write_bytes(
        "\ufeffStep Id,Name,Type,Start Time(us)\t,Duration(us),Input Shapes,Block Dim\n"
        '7,MatMul_1,MatMul,1736408883704643.212\t,12.5,"""32,3""",24\n'
        "7,Add_2,Add,1736408883704700.000\t,N/A,,\n"
        "7,Cut".encode()
    )
    warnings: list[str] = []
    table = ascend_text.read_csv_table(path, Path("k.csv"), warnings)
    assert table is not None and table.num_rows == 2 and "Start Time(us)" in table.column_names
    assert any("k.csv" in w and "truncated" in w for w in warnings)
    kernels = ascend_text.kernels_table(table, 3).to_pylist()
    assert kernels[0]["start_ns"] == 1736408883704643212 and kernels[0]["dur_ns"] == 12500
    assert kernels[0]["input_shapes"] == "32,3" and kernels[0]["block_dim"] == 24 and kernels[0]["step"] == 7
    assert (
        kernels[1]["dur_ns"] is None
        and kernels[1]["block_dim"] is None
        and kernels[1]["input_shapes"] is None
    )


@pytest.mark.skipif(not NPU.is_dir(), reason=f"shared NPU traces not found at {NPU}")
@pytest.mark.parametrize("job", ["msinsight_alexnet_dp8_text_level1", "msinsight_alexnet_dp8_text_level0"])
def test_external_id_links_every_async_npu_arrow_on_shared_traces(job: str) -> None:
    folder = NPU / job / "rank0_ascend_pt"
    events = json.loads((folder / "ASCEND_PROFILER_OUTPUT" / "trace_view.json").read_bytes())
    arrows = sum(1 for e in events if e.get("ph") == "f" and e.get("cat") == "async_npu")
    parsed = ascend.parse(folder, NPU / job).events
    ext = parsed.column("external_id").to_numpy()
    device = parsed.column("device").to_numpy() >= 0
    linked_device, linked_host = ext[device & (ext >= 0)], ext[~device & (ext >= 0)]
    assert arrows > 100 and len(linked_device) >= arrows - 10  # arrows that land on a kept device event
    assert set(linked_device.tolist()) == set(linked_host.tolist())
    assert len(set(linked_host.tolist())) == len(linked_host)  # one host op per id


@pytest.mark.skipif(not PP_SAMPLE.is_dir(), reason="the simulator's pipeline sample job is absent")
def test_pipeline_sample_send_recv_peers_are_the_neighbouring_stages() -> None:
    for folder in sorted(PP_SAMPLE.glob("*_ascend_pt")):
        parsed = ascend.parse(folder, PP_SAMPLE)
        p2p = parsed.events.filter(
            pc.is_in(parsed.events.column("collective").cast(pa.string()), pa.array(["send", "recv"]))
        )
        peers = set(p2p.column("peer").to_pylist())
        assert p2p.num_rows and None not in peers
        assert peers <= {parsed.rank - 1, parsed.rank + 1}, (parsed.rank, peers)
