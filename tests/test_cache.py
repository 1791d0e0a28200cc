"""The Parquet cache: reused while current, rebuilt when a source changes, written atomically."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pyarrow.parquet as pq
import pytest

import paradiag
from paradiag import ingest
from paradiag.cache import JobError, is_cache
from tests.helpers import kineto_trace, write_job, write_trace


def tree_digest(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def test_layout_one_part_per_rank_sorted_by_start(tmp_path: Path) -> None:
    job = paradiag.open(write_job(tmp_path / "job", ranks=3))
    parts = sorted((job.cache_dir / "events").glob("part-*.parquet"))
    assert len(parts) == 3
    for part in parts:
        starts = pq.read_table(part, columns=["start_ns"]).column("start_ns").to_pylist()
        assert starts == sorted(starts)
    manifest = json.loads((job.cache_dir / "manifest.json").read_text())
    assert manifest["format"] == "paradiag.cache/1"
    assert {f["path"] for f in manifest["files"]} == {
        "rank0.pt.trace.json.gz",
        "rank1.pt.trace.json.gz",
        "rank2.pt.trace.json.gz",
    }
    assert all(len(f["hash"]) == 32 for f in manifest["files"])
    assert job.rank_ids == [0, 1, 2]
    assert job.events().num_rows == 3 * (2 * (3 * 3 + 3) + 2)


def test_current_cache_is_read_not_parsed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = write_job(tmp_path / "job")
    first = paradiag.open(folder)

    def no_parse(*args: object, **kwargs: object) -> None:
        raise AssertionError("the cache was current: nothing should be parsed")

    monkeypatch.setattr("paradiag.ingest.parse_all", no_parse)
    again = paradiag.open(folder)
    assert again.cache_dir == first.cache_dir
    assert again.content_hash == first.content_hash
    # Touching a file without changing it keeps the cache (the hash decides).
    os.utime(folder / "rank0.pt.trace.json.gz", ns=(1, 1))
    assert paradiag.open(folder).content_hash == first.content_hash


@pytest.mark.parametrize("change", ["modify", "add", "remove"])
def test_changed_added_or_removed_source_invalidates(tmp_path: Path, change: str) -> None:
    folder = write_job(tmp_path / "job", ranks=2)
    before = paradiag.open(folder)
    if change == "modify":
        write_trace(folder / "rank1.pt.trace.json.gz", kineto_trace(1, steps=3))
    elif change == "add":
        write_trace(folder / "rank2.pt.trace.json.gz", kineto_trace(2, world=3))
    else:
        (folder / "rank1.pt.trace.json.gz").unlink()
    after = paradiag.open(folder)
    assert after.content_hash != before.content_hash
    expected = {"modify": ([0, 1], [0, 1, 2]), "add": ([0, 1, 2], [0, 1]), "remove": ([0], [0, 1])}[change]
    assert after.rank_ids == expected[0]
    assert sorted(set(after.steps.column("step").to_pylist())) == expected[1]


def test_killed_ingest_leaves_no_valid_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = write_job(tmp_path / "job")
    cache = tmp_path / "cache"

    def killed(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt  # as if the process were stopped half-way

    monkeypatch.setattr("paradiag.ingest._finish", killed)
    with pytest.raises(KeyboardInterrupt):
        ingest.ingest(folder, cache)
    assert not is_cache(cache)
    assert list(tmp_path.glob(".cache.tmp-*")) == []
    monkeypatch.undo()
    assert paradiag.open(folder, cache).rank_ids == [0, 1]


def test_existing_cache_survives_a_failed_rebuild(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = write_job(tmp_path / "job")
    cache = tmp_path / "cache"
    good = paradiag.open(folder, cache)
    monkeypatch.setattr(
        "paradiag.ingest._finish", lambda *a, **k: (_ for _ in ()).throw(OSError("disk full"))
    )
    with pytest.raises(OSError):
        ingest.ingest(folder, cache)
    monkeypatch.undo()
    assert is_cache(cache)
    assert paradiag.open(cache).content_hash == good.content_hash


def test_source_folder_is_never_modified(tmp_path: Path) -> None:
    folder = write_job(tmp_path / "job")
    before = tree_digest(folder)
    paradiag.open(folder)
    ingest.ingest(folder)
    assert tree_digest(folder) == before
    with pytest.raises(JobError, match="inside the source folder"):
        ingest.ingest(folder, folder / "cache")


def test_opening_the_cache_folder_directly(tmp_path: Path) -> None:
    folder = write_job(tmp_path / "job")
    job = paradiag.open(folder)
    again = paradiag.open(job.cache_dir)
    assert again.rank_ids == job.rank_ids
    assert again.events().num_rows == job.events().num_rows


def test_time_window_and_rank_selection(tmp_path: Path) -> None:
    job = paradiag.open(write_job(tmp_path / "job", ranks=2))
    every = job.events()
    step1 = job.steps.filter(job.steps.column("step").to_numpy() == 1).to_pylist()[0]
    window = job.events(ranks=[0], start_ns=step1["start_ns"], end_ns=step1["end_ns"])
    assert 0 < window.num_rows < every.num_rows
    assert set(window.column("rank").to_pylist()) == {0}
    ends = [
        s + d
        for s, d in zip(
            window.column("start_ns").to_pylist(), window.column("dur_ns").to_pylist(), strict=True
        )
    ]
    assert min(ends) > step1["start_ns"]
    assert max(window.column("start_ns").to_pylist()) < step1["end_ns"]


def test_groups_without_listed_members_get_the_ranks_that_report_them() -> None:
    from paradiag.discover import group_table
    from paradiag.parsers.base import Group

    table = group_table(
        {
            0: [
                Group("hccl_1", [], "HCCL group of 3 ranks; members not recorded", size=3),
                Group("dp", [0, 1]),
            ],
            1: [Group("hccl_1", [], size=3), Group("dp", [0, 1]), Group("hccl_8", [], size=8)],
            3: [Group("hccl_1", [], size=3), Group("hccl_8", [], size=8)],
        }
    )
    rows = {r["group"]: r for r in table.to_pylist()}
    assert rows["hccl_1"]["ranks"] == [0, 1, 3]
    assert rows["hccl_1"]["description"] == "HCCL group of 3 ranks; members not recorded"
    assert rows["dp"]["ranks"] == [0, 1]
    # Two of eight members profiled: which global ranks the others are is unknown, so none are listed.
    assert rows["hccl_8"]["ranks"] == []
