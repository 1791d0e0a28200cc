"""``paradiag export --perfetto``: one aligned multi-rank trace that reads back through paradiag's Kineto parser."""

from __future__ import annotations

import bisect
import gzip
import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import paradiag
from paradiag.cli import main
from paradiag.job import Job
from paradiag.simulator.cli import simulate

# Two nodes, the second one's clock 1.7 s off: the export must carry the aligned times, not the raw ones.
SIM = [
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
SIM += [
    "--inject",
    "clock_skew:nodes=1,ms=1700",
    "--inject",
    "slow_device:ranks=5,factor=1.5",
    "--seed",
    "5",
    "--quiet",
]
COMPARED = [
    "kind",
    "name",
    "device",
    "track",
    "start_ns",
    "dur_ns",
    "step",
    "collective",
    "group",
    "peer",
    "bytes",
    "seq",
]


def _export(tmp: Path, fmt: str, *more: str) -> tuple[Job, dict[str, Any]]:
    result = CliRunner().invoke(
        simulate, [*SIM, *more, "--format", fmt, "-o", str(tmp / "job")], catch_exceptions=False
    )
    assert result.exit_code == 0, result.output
    out, cache = tmp / "trace.json.gz", tmp / "cache"
    result = CliRunner().invoke(
        main, ["export", str(tmp / "job"), "-o", str(cache), "--perfetto", str(out)], catch_exceptions=False
    )
    assert result.exit_code == 0, result.output
    return paradiag.open(tmp / "job", cache), json.loads(gzip.decompress(out.read_bytes()))


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> tuple[Job, dict[str, Any]]:
    """The Kineto job, exported once for the tests that only read the export."""
    return _export(tmp_path_factory.mktemp("export"), "kineto")


def _reread(doc: dict[str, Any], ranks: list[int], folder: Path) -> Job:
    """Each rank's process as a Kineto file of its own (the parser reads one rank per file), opened as a job."""
    folder.mkdir()
    for r in ranks:
        events = [e for e in doc["traceEvents"] if e["ph"] == "X" and e["pid"] == r]
        info = {
            "distributedInfo": {"rank": r, "world_size": len(ranks)},
            "baseTimeNanoseconds": doc["baseTimeNanoseconds"],
        }
        (folder / f"rank{r}.json").write_text(json.dumps({**info, "traceEvents": events}))
    return paradiag.open(folder)


def _rows(job: Job, rank: int) -> list[dict[str, Any]]:
    rows = job.events(ranks=[rank], columns=COMPARED).to_pylist()
    return sorted(rows, key=lambda r: (r["start_ns"], r["track"], r["dur_ns"], r["name"]))


@pytest.mark.parametrize("fmt", ["kineto", "ascend"])
def test_export_reads_back_aligned_with_every_event(
    tmp_path: Path, fmt: str, exported: tuple[Job, dict[str, Any]]
) -> None:
    # Ascend output is slower to write and read: one step of a smaller model.
    job, doc = exported if fmt == "kineto" else _export(tmp_path, fmt, "--steps", "1", "--layers", "2")
    assert any(o != 0 for o in job.ranks.column("clock_offset_ns").to_pylist())  # the source needed aligning
    again = _reread(doc, job.rank_ids, tmp_path / "again")
    assert not again.problems
    assert again.ranks.column("num_events").to_pylist() == job.ranks.column("num_events").to_pylist()
    assert all(abs(o) < 1_000 for o in again.ranks.column("clock_offset_ns").to_pylist())  # already aligned
    for rank in job.rank_ids:
        assert _rows(again, rank) == _rows(job, rank)
    assert again.diagnosis().instances.num_rows == job.diagnosis().instances.num_rows


def test_processes_are_named_by_mesh_coordinates(exported: tuple[Job, dict[str, Any]]) -> None:
    job, doc = exported
    names = {
        e["pid"]: e["args"]["name"]
        for e in doc["traceEvents"]
        if e["ph"] == "M" and e["name"] == "process_name"
    }
    coords = job.diagnosis().layout.coords
    for rank in job.rank_ids:
        c = coords[rank]
        assert names[rank] == f"rank {rank} (dp{c['dp']} tp{c['tp']} pp{c['pp']})"
    assert names[max(job.rank_ids) + 1] == "critical path"


def _slices(doc: dict[str, Any]) -> dict[tuple[int, int], list[tuple[float, float]]]:
    out: dict[tuple[int, int], list[tuple[float, float]]] = {}
    for e in doc["traceEvents"]:
        if e["ph"] == "X":
            out.setdefault((e["pid"], e["tid"]), []).append((e["ts"], e["ts"] + e["dur"]))
    return {k: sorted(v) for k, v in out.items()}


def _encloses(slices: list[tuple[float, float]], ts: float) -> bool:
    i = bisect.bisect_right(slices, (ts, float("inf"))) - 1
    return any(start <= ts <= end for start, end in slices[max(i - 8, 0) : i + 1])


def test_every_collective_and_send_recv_has_its_flow(exported: tuple[Job, dict[str, Any]]) -> None:
    job, doc = exported
    d = job.diagnosis()
    flows: dict[int, dict[str, dict[str, Any]]] = {}
    for e in doc["traceEvents"]:
        if e["ph"] in ("s", "f"):
            flows.setdefault(e["id"], {})[e["ph"]] = e
    assert all(set(f) == {"s", "f"} and f["s"]["name"] == f["f"]["name"] for f in flows.values())
    by_cat: dict[str, list[dict[str, dict[str, Any]]]] = {}
    for f in flows.values():
        by_cat.setdefault(f["s"]["cat"], []).append(f)
    members = d.instances.select(["instance", "members"]).to_pydict()
    expected = {i: n - 1 for i, n in zip(members["instance"], members["members"], strict=True) if n >= 2}
    got: dict[int, int] = {}
    for f in by_cat["collective"]:
        got[f["s"]["args"]["instance"]] = got.get(f["s"]["args"]["instance"], 0) + 1
    assert got == expected and expected
    assert len(by_cat["send_recv"]) == d.p2p.num_rows > 0
    slices = _slices(doc)
    for f in flows.values():  # each end binds to a slice (the kernel) on its rank's stream
        for end in f.values():
            assert _encloses(slices[(end["pid"], end["tid"])], end["ts"]), end
        assert f["f"]["ts"] >= f["s"]["ts"]


def test_findings_and_critical_path_are_in_the_trace(exported: tuple[Job, dict[str, Any]]) -> None:
    job, doc = exported
    d = job.diagnosis()
    marks = [e for e in doc["traceEvents"] if e["ph"] == "i"]
    slow = [m for m in marks if m["name"].startswith("slow_device")]
    assert [m["pid"] for m in slow] == [5] and slow[0]["s"] == "p"
    assert len(marks) == sum(max(len({*f.culprit.ranks, *(f.culprit.link or [])}), 1) for f in d.findings)
    path = [e for e in doc["traceEvents"] if e["ph"] == "X" and e["pid"] == max(job.rank_ids) + 1]
    assert len(path) == d.critical_path.num_rows > 0


def test_a_missing_output_folder_is_a_clear_error(
    tmp_path: Path, exported: tuple[Job, dict[str, Any]]
) -> None:
    job, _ = exported
    result = CliRunner().invoke(
        main, ["export", str(job.cache_dir), "--perfetto", str(tmp_path / "nowhere" / "t.json.gz")]
    )
    assert result.exit_code == 1
    assert "nowhere" in result.output and "does not exist" in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
