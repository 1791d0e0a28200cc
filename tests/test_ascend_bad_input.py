"""Broken Ascend folders: each problem is reported against the file that has it, and what is intact still loads.

The cases are made by copying a real rank folder to a temporary directory and damaging the copy."""

from __future__ import annotations

import contextlib
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import pytest

import paradiag
from paradiag.parsers import ascend
from paradiag.parsers.base import TraceError

NPU = Path(__file__).resolve().parents[1].parent / "shared" / "traces" / "npu"
TEXT = NPU / "msinsight_alexnet_dp8_text_level1" / "rank0_ascend_pt"
DB = NPU / "msinsight_alexnet_dp8_db_level1" / "rank0_ascend_pt"

pytestmark = [
    pytest.mark.real,
    pytest.mark.skipif(not NPU.is_dir(), reason=f"shared NPU traces not found at {NPU}"),
]
OUT = "ASCEND_PROFILER_OUTPUT"


def copy(src: Path, job: Path, name: str = "host_123_20250101000000000_ascend_pt") -> Path:
    dst = job / name
    shutil.copytree(src, dst)
    for path in dst.rglob("*"):  # the shared files are read-only
        path.chmod(0o755 if path.is_dir() else 0o644)
    return dst


def truncate(path: Path, keep: float) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * keep)])


def test_missing_output_folder(tmp_path: Path) -> None:
    rank = copy(TEXT, tmp_path)
    shutil.rmtree(rank / OUT)
    with pytest.raises(TraceError) as err:
        ascend.parse(rank, tmp_path)
    assert err.value.source == rank.name and OUT in err.value.problem


def test_truncated_trace_view(tmp_path: Path) -> None:
    rank = copy(TEXT, tmp_path)
    truncate(rank / OUT / "trace_view.json", 0.6)
    with pytest.raises(TraceError) as err:
        ascend.parse(rank, tmp_path)
    assert err.value.source == f"{rank.name}/{OUT}/trace_view.json"
    assert "truncated" in err.value.problem


def test_truncated_trace_view_is_reported_on_the_file_by_the_job(tmp_path: Path) -> None:
    import paradiag
    from paradiag.cache import JobError

    rank = copy(TEXT, tmp_path / "job")
    truncate(rank / OUT / "trace_view.json", 0.6)
    with pytest.raises(JobError) as err:
        paradiag.open(tmp_path / "job", cache_dir=tmp_path / "cache")
    assert f"{rank.name}: {OUT}/trace_view.json: truncated" in str(err.value)


def test_empty_trace_view(tmp_path: Path) -> None:
    rank = copy(TEXT, tmp_path)
    (rank / OUT / "trace_view.json").write_bytes(b"")
    with pytest.raises(TraceError, match=r"trace_view\.json: the file is empty"):
        ascend.parse(rank, tmp_path)


def test_truncated_csv_drops_the_broken_row_with_a_warning(tmp_path: Path) -> None:
    rank = copy(TEXT, tmp_path)
    path = rank / OUT / "kernel_details.csv"
    text = path.read_text()
    path.write_text(text[: text.rindex("\n", 0, len(text) - 2) + 40])  # cut inside the last row
    parsed = ascend.parse(rank, tmp_path)
    assert parsed.extra["kernels"].num_rows == 190  # 191 rows, the cut one skipped
    assert any("kernel_details.csv" in w and "truncated" in w for w in parsed.warnings)
    assert parsed.events.num_rows > 3000


def test_truncated_communication_json_costs_only_its_tables(tmp_path: Path) -> None:
    rank = copy(TEXT, tmp_path)
    truncate(rank / OUT / "communication.json", 0.5)
    parsed = ascend.parse(rank, tmp_path)
    assert "comm_ops" not in parsed.extra and "links" in parsed.extra
    assert any(
        w.startswith(f"{rank.name}/{OUT}/communication.json: truncated or invalid JSON")
        for w in parsed.warnings
    )
    assert parsed.steps.num_rows == 1


def test_truncated_profiler_info_falls_back_to_the_file_name(tmp_path: Path) -> None:
    rank = copy(TEXT, tmp_path)
    truncate(rank / "profiler_info_0.json", 0.5)
    parsed = ascend.parse(rank, tmp_path)
    assert parsed.rank == 0 and parsed.rank_from == "file name"
    assert any("profiler_info_0.json" in w for w in parsed.warnings)


def test_corrupt_database(tmp_path: Path) -> None:
    rank = copy(DB, tmp_path)
    db = rank / OUT / "ascend_pytorch_profiler_0.db"
    db.write_bytes(b"this is not a database" * 100)
    with pytest.raises(TraceError) as err:
        ascend.parse(rank, tmp_path)
    assert err.value.source.endswith("ascend_pytorch_profiler_0.db")


def test_database_missing_tables_still_loads_what_is_there(tmp_path: Path) -> None:
    rank = copy(DB, tmp_path)
    with sqlite3.connect(rank / OUT / "ascend_pytorch_profiler_0.db") as conn:
        conn.execute("drop table COMMUNICATION_TASK_INFO")
    (rank / OUT / "analysis.db").unlink()
    parsed = ascend.parse(rank, tmp_path)
    assert "comm_tasks" not in parsed.extra and parsed.steps.num_rows == 1
    assert any("Level1" in w for w in parsed.warnings)


def test_source_folder_is_not_modified(tmp_path: Path) -> None:
    rank = copy(DB, tmp_path)
    before = {p: p.stat().st_mtime_ns for p in rank.rglob("*")}
    ascend.parse(rank, tmp_path)
    assert {p: p.stat().st_mtime_ns for p in rank.rglob("*")} == before


def test_duplicate_ranks_and_mixed_runs_are_visible_to_discovery(tmp_path: Path) -> None:
    """Discovery raises the job-level error / warning; the parser gives it the rank and run of each folder."""
    a = ascend.parse(copy(TEXT, tmp_path, "a_1_20250101000000000_ascend_pt"), tmp_path)
    b = ascend.parse(copy(TEXT, tmp_path, "b_2_20250101000000000_ascend_pt"), tmp_path)
    level0 = NPU / "msinsight_alexnet_dp8_text_level0" / "rank1_ascend_pt"
    c = ascend.parse(copy(level0, tmp_path, "c_3_20250101000000000_ascend_pt"), tmp_path)
    assert a.rank == b.rank == 0 and a.source != b.source
    assert a.host == "a" and b.host == "b"  # {hostname}_{pid}_{timestamp}_ascend_pt
    assert a.run_id == b.run_id != c.run_id


# --- damaged databases: named problems, the other rank still loads ----------------------------------------------


def _sql(*statements: str) -> Any:
    def change(db: Path) -> None:
        with contextlib.closing(sqlite3.connect(db)) as conn:
            for statement in statements:
                conn.execute(statement)
            conn.commit()

    return change


def _only_other_tables(db: Path) -> None:
    db.unlink()
    _sql("create table notes (x)")(db)


# name -> (change to rank 1's database, severity, text of the problem)
DB_CASES: dict[str, tuple[Any, str, str]] = {
    "zero-byte .db": (
        lambda db: db.write_bytes(b""),
        "error",
        "ascend_pytorch_profiler_1.db: the file is empty",
    ),
    "only other tables": (_only_other_tables, "error", "ascend_pytorch_profiler_1.db: no profiler tables"),
    "TEXT in TASK.startNs": (
        _sql("update TASK set startNs = 'soon' where rowid % 7 = 0"),
        "warning",
        "TASK: 78 rows with a missing or malformed startNs",
    ),
    "TEXT in PYTORCH_API.startNs": (
        _sql("update PYTORCH_API set startNs = '12x' where rowid % 7 = 0"),
        "warning",
        "PYTORCH_API: 351 rows with a missing or malformed startNs",
    ),
    "NULL TASK.endNs": (_sql("update TASK set endNs = NULL where rowid % 7 = 0"), "warning", "TASK: 78 rows"),
    "negative CANN_API.startNs": (
        _sql("update CANN_API set startNs = -5 where rowid % 7 = 0"),
        "warning",
        "CANN_API: 101 rows",
    ),
    "TEXT stream and thread ids": (
        _sql("update TASK set streamId = 'q' where rowid % 7 = 0", "update CANN_API set globalTid = 'q'"),
        "warning",
        "CANN_API: 709 rows",
    ),
    "TEXT in COMMUNICATION_OP.startNs": (
        _sql("update COMMUNICATION_OP set startNs = 'q' where rowid % 2 = 0"),
        "warning",
        "COMMUNICATION_OP: 2 rows",
    ),
    "binary names": (_sql("update STRING_IDS set value = X'FFFE00' where rowid % 3 = 0"), "", ""),
    "rank beyond int32, device as text": (
        _sql("update RANK_DEVICE_MAP set rankId = 9999999999999, deviceId = 'x'"),
        "",
        "",
    ),
    "metadata nested too deeply": (_sql("update META_DATA set value = '" + "[" * 100_000 + "'"), "", ""),
}


@pytest.mark.parametrize("case", sorted(DB_CASES))
def test_damaged_database(tmp_path: Path, case: str) -> None:
    change, severity, text = DB_CASES[case]
    job = tmp_path / "job"
    copy(DB, job, "rank0_ascend_pt")
    rank1 = copy(DB.parent / "rank1_ascend_pt", job, "rank1_ascend_pt")
    change(rank1 / OUT / "ascend_pytorch_profiler_1.db")
    opened = paradiag.open(job)
    assert opened.rank_ids == ([0] if severity == "error" else [0, 1])
    assert not any("internal error" in p.message for p in opened.problems)
    mine = [
        p for p in opened.problems if p.source == "rank1_ascend_pt" and p.severity == (severity or "error")
    ]
    if severity:
        assert any(text in p.message for p in mine), opened.problems
    else:
        assert mine == []


def _pending_wal(db: Path) -> None:
    """Leave committed rows in a ``-wal`` beside the database, as a profiler killed before its checkpoint does."""
    conn = sqlite3.connect(db)
    conn.execute("pragma journal_mode=wal")
    conn.execute("pragma wal_autocheckpoint=0")
    conn.execute("create table LATE (x)")
    conn.execute("insert into PYTORCH_API select * from PYTORCH_API limit 5")
    conn.commit()
    for name in (db.name, db.name + "-wal"):
        shutil.copyfile(db.parent / name, db.parent / f"{name}.keep")
    conn.close()  # the last close checkpoints and removes the -wal: put the kept copies back
    for name in (db.name, db.name + "-wal"):
        (db.parent / f"{name}.keep").replace(db.parent / name)
    (db.parent / (db.name + "-shm")).unlink(missing_ok=True)


@pytest.mark.parametrize("read_only", [False, True])
def test_pending_wal_is_read_without_writing_beside_it(tmp_path: Path, read_only: bool) -> None:
    rank = copy(DB, tmp_path)
    db = rank / OUT / "ascend_pytorch_profiler_0.db"
    plain = ascend.parse(copy(DB, tmp_path / "plain"), tmp_path / "plain")
    _pending_wal(db)
    assert (rank / OUT / (db.name + "-wal")).stat().st_size > 0
    if read_only:
        for path in [*rank.rglob("*"), rank]:
            path.chmod(0o555 if path.is_dir() else 0o444)
    before = {p: p.stat().st_mtime_ns for p in rank.rglob("*")}
    try:
        parsed = ascend.parse(rank, tmp_path)
    finally:
        for path in [rank, *rank.rglob("*")]:
            path.chmod(0o755 if path.is_dir() else 0o644)
    assert {p: p.stat().st_mtime_ns for p in rank.rglob("*")} == before  # no -shm, nothing touched
    assert parsed.events.num_rows == plain.events.num_rows + 5  # the rows still in the -wal were read


def test_limits_apply_to_ascend_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rank = copy(TEXT, tmp_path)
    trace = rank / OUT / "trace_view.json"
    trace.write_bytes(trace.read_bytes().replace(b'"name":', b'"name": "' + b"n" * 300_000 + b'", "was":', 1))
    monkeypatch.setenv("PARADIAG_MAX_STRING_KB", "100")
    with pytest.raises(TraceError, match=r"trace_view\.json: event name longer than 100 KiB"):
        ascend.parse(rank, tmp_path)
    monkeypatch.setenv("PARADIAG_MAX_STRING_KB", "0")
    monkeypatch.setenv("PARADIAG_MAX_FILE_MB", "1")
    with pytest.raises(
        TraceError, match=r"trace_view\.json: size exceeds 1 MB \(limit PARADIAG_MAX_FILE_MB\)"
    ):
        ascend.parse(rank, tmp_path)


def test_malformed_csv_row_with_invalid_utf8(tmp_path: Path) -> None:
    """Arrow's CSV reader cannot pass such a row to its handler (an 'exception ignored'): the Python reader does."""
    rank = copy(TEXT, tmp_path)
    path = rank / OUT / "kernel_details.csv"
    lines = path.read_bytes().split(b"\n")
    lines[5] = lines[5][:30] + b"\xb3\xff"
    path.write_bytes(b"\n".join(lines))
    parsed = ascend.parse(rank, tmp_path)
    assert parsed.extra["kernels"].num_rows == 190
    assert any("kernel_details.csv: truncated or malformed row 6" in w for w in parsed.warnings)
