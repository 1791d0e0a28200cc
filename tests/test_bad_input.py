"""Bad input: each problem names the file and says what is wrong; the rest of the folder still loads."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import paradiag
from paradiag import dataset
from paradiag.cli import main
from paradiag.dataset import JobError
from tests.helpers import kineto_trace, write_job, write_trace

BAD_FILES = {
    "truncated.json.gz": (lambda: gzip.compress(json.dumps(kineto_trace(5)).encode())[:300], "truncated or corrupt gzip"),
    "invalid.json": (lambda: b'{"traceEvents": [{"ph": "X", "ts": 1,', "invalid JSON"),
    "notatrace.json": (lambda: b'{"model": "resnet50", "lr": 0.1}', "not a PyTorch profiler trace: no 'traceEvents' list"),
    "array.json": (lambda: b"[1, 2, 3]", "not a PyTorch profiler trace"),
    "empty.json": (lambda: b"", "the file is empty"),
    "no_events.json": (lambda: b'{"traceEvents": []}', "no complete ('X') events"),
}


@pytest.mark.parametrize("name", sorted(BAD_FILES))
def test_each_bad_file_is_reported_and_the_rest_loads(tmp_path: Path, name: str) -> None:
    folder = write_job(tmp_path / "job", ranks=2)
    content, message = BAD_FILES[name]
    (folder / name).write_bytes(content())
    job = paradiag.open(folder)
    assert job.rank_ids == [0, 1]
    errors = [p for p in job.problems if p.severity == "error"]
    assert len(errors) == 1
    assert errors[0].source == name
    assert message in errors[0].message
    assert name in str(errors[0])


def test_strict_fails_instead(tmp_path: Path) -> None:
    folder = write_job(tmp_path / "job", ranks=2)
    (folder / "empty.json").write_bytes(b"")
    with pytest.raises(JobError, match=r"empty\.json: the file is empty"):
        paradiag.open(folder, strict=True)
    result = CliRunner().invoke(main, ["info", "--strict", str(folder)])
    assert result.exit_code == 1
    assert "empty.json: the file is empty" in result.output


def test_events_with_missing_or_negative_times_are_skipped_with_a_warning(tmp_path: Path) -> None:
    doc = kineto_trace(0, world=1)
    good = sum(1 for e in doc["traceEvents"] if e["ph"] == "X")
    doc["traceEvents"].append({"ph": "X", "cat": "kernel", "name": "no_ts", "pid": 0, "tid": 7, "dur": 5})
    doc["traceEvents"].append({"ph": "X", "cat": "kernel", "name": "negative", "pid": 0, "tid": 7, "ts": -5, "dur": 5})
    doc["traceEvents"].append({"ph": "X", "cat": "kernel", "name": "neg_dur", "pid": 0, "tid": 7, "ts": 5, "dur": -1})
    doc["traceEvents"].append({"ph": "X", "cat": "kernel", "name": "str_ts", "pid": 0, "tid": 7, "ts": "soon", "dur": 1})
    (tmp_path / "job").mkdir()
    write_trace(tmp_path / "job" / "rank0.json", doc)
    job = paradiag.open(tmp_path / "job")
    assert job.events().num_rows == good
    warnings = [str(p) for p in job.problems if p.severity == "warning"]
    assert any("rank0.json" in w and "4 events with a missing, negative or out-of-range timestamp" in w for w in warnings)


def test_two_files_claiming_the_same_rank(tmp_path: Path) -> None:
    folder = write_job(tmp_path / "job", ranks=2)
    write_trace(folder / "copy_of_rank1.json", kineto_trace(1))
    job = paradiag.open(folder)
    assert job.rank_ids == [0, 1]
    errors = [p for p in job.problems if p.severity == "error"]
    assert len(errors) == 1
    # Both files are named: the one skipped and the one that keeps the rank.
    assert errors[0].source == "rank1.pt.trace.json.gz"
    assert "rank 1 is also claimed by copy_of_rank1.json" in errors[0].message


def test_a_folder_with_nothing_readable(tmp_path: Path) -> None:
    (tmp_path / "a.json").write_bytes(b"{")
    with pytest.raises(JobError, match=r"no trace could be read.*a\.json: invalid JSON"):
        paradiag.open(tmp_path)
    (tmp_path / "a.json").unlink()
    with pytest.raises(JobError, match="no trace found"):
        paradiag.open(tmp_path)


def test_unexpected_value_types_are_read_leniently(tmp_path: Path) -> None:
    doc = kineto_trace(0, world=1)
    for e in doc["traceEvents"]:
        if e.get("cat") == "kernel":
            e["args"]["stream"] = str(e["args"]["stream"])  # a string where an int belongs
    (tmp_path / "job").mkdir()
    write_trace(tmp_path / "job" / "rank0.json", doc)
    job = paradiag.open(tmp_path / "job")
    kernels = job.events().filter(job.events().column("device").to_numpy() >= 0)
    assert set(kernels.column("track").to_pylist()) == {7, 20}
    assert any("read leniently" in str(p) for p in job.problems)


def test_msprof_analyze_output_is_not_mistaken_for_traces(tmp_path: Path) -> None:
    out = tmp_path / "job" / "cluster_analysis_output"
    out.mkdir(parents=True)
    (out / "cluster_step_trace_time.csv").write_text("Step,Type,Index,Computing\n,rank,0,1.0\n")
    (out / "cluster_communication.json").write_text('{"step": {}}')
    (tmp_path / "job" / "profiler_metadata.json").write_text('{"distributed_args": {}}')
    with pytest.raises(JobError, match="msprof-analyze's aggregated cluster output"):
        paradiag.open(tmp_path / "job")


def test_mindspore_parallel_strategy_files_are_not_traces(tmp_path: Path) -> None:
    folder = write_job(tmp_path / "job", ranks=2)
    (folder / "parallel_strategy_0.json").write_text('{"config": {"rankId": 0}, "graph": {"node": []}}')
    job = paradiag.open(folder)
    assert job.rank_ids == [0, 1]
    assert job.problems == []


# --- the folder itself: links and permissions -------------------------------------------------------------------


def test_broken_and_looping_links_are_named_and_skipped(tmp_path: Path) -> None:
    folder = write_job(tmp_path / "job", ranks=2)
    (folder / "dangling.json").symlink_to(folder / "gone.json")
    (folder / "a.json").symlink_to(folder / "b.json")
    (folder / "b.json").symlink_to(folder / "a.json")
    rank_folder = folder / "host_1_ascend_pt" / "ASCEND_PROFILER_OUTPUT"
    rank_folder.mkdir(parents=True)
    (rank_folder / "trace_view.json").symlink_to(tmp_path / "nowhere.json")
    job = paradiag.open(folder)
    assert job.rank_ids == [0, 1]
    problems = {p.source: p.message for p in job.problems if p.severity == "error"}
    assert problems["dangling.json"] == "a broken symbolic link (its target does not exist)"
    assert problems["a.json"] == problems["b.json"] == "a symbolic link loop"
    assert problems["host_1_ascend_pt/ASCEND_PROFILER_OUTPUT/trace_view.json"].startswith("a broken symbolic link")
    assert paradiag.open(folder).problems == job.problems  # read back from the cache, still there


UNREADABLE_SCRIPT = """
import os, sys
from pathlib import Path
from paradiag import dataset
folder = Path(sys.argv[1])
os.chmod(folder / "rank2.json", 0)
os.chmod(folder / "sub", 0)
job = dataset.open_job(folder, Path(sys.argv[2]), workers=1)
print(job.rank_ids)
for p in job.problems:
    print(p)
"""


def test_unreadable_files_and_folders_are_named_and_skipped(tmp_path: Path) -> None:
    """Run without the permission bypass (as a plain user, or as root without CAP_DAC_*), so that the files
    really cannot be read."""
    folder = write_job(tmp_path / "job", ranks=2)
    write_trace(folder / "rank2.json", kineto_trace(2, world=3))
    (folder / "sub").mkdir()
    write_trace(folder / "sub" / "rank3.json", kineto_trace(3, world=3))
    command = [sys.executable, "-c", UNREADABLE_SCRIPT, str(folder), str(tmp_path / "cache")]
    if os.geteuid() == 0:
        if shutil.which("setpriv") is None:
            pytest.skip("running as root without setpriv: cannot drop the permission bypass")
        caps = "-dac_override,-dac_read_search"
        command = ["setpriv", f"--bounding-set={caps}", f"--inh-caps={caps}", *command]
    try:
        out = subprocess.run(command, capture_output=True, text=True, timeout=60, check=True).stdout
    finally:
        os.chmod(folder / "rank2.json", 0o644)
        os.chmod(folder / "sub", 0o755)
    lines = out.splitlines()
    assert lines[0] == "[0, 1]"
    assert "error: rank2.json: cannot be read (permission denied)" in lines
    assert "error: sub: folder cannot be read (Permission denied); its files were skipped" in lines


# --- killed ingest -----------------------------------------------------------------------------------------------

KILLED_SCRIPT = """
import sys, time
from pathlib import Path
from paradiag import dataset
from paradiag.parsers import kineto

parse = kineto.parse
def slow(*args, **kwargs):
    time.sleep(60)  # a big rank: the ingest is killed while its workers parse
    return parse(*args, **kwargs)
kineto.parse = slow
dataset.IN_PROCESS_BYTES = 0
dataset.ingest(Path(sys.argv[1]), Path(sys.argv[2]), workers=2)
"""


def test_killed_ingest_takes_its_workers_along_and_the_next_ingest_cleans_up(tmp_path: Path) -> None:
    psutil = pytest.importorskip("psutil")
    folder = write_job(tmp_path / "job", ranks=3)
    cache = tmp_path / "caches" / "job"
    proc = subprocess.Popen([sys.executable, "-c", KILLED_SCRIPT, str(folder), str(cache)])
    try:
        workers: list[Any] = []
        deadline = time.monotonic() + 30
        while len(workers) < 2 and time.monotonic() < deadline and proc.poll() is None:
            workers = psutil.Process(proc.pid).children()
            time.sleep(0.05)
        assert len(workers) >= 2, "the ingest did not start its workers"
        time.sleep(0.5)  # let them reach the parser
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    _, alive = psutil.wait_procs(workers, timeout=10)
    assert alive == [], f"workers outlived their parent: {alive}"
    leftovers = list(cache.parent.glob(".job.tmp-*"))
    assert len(leftovers) == 1  # the killed ingest's scratch folder
    assert paradiag.open(folder, cache).rank_ids == [0, 1, 2]
    assert list(cache.parent.iterdir()) == [cache]


def test_scratch_folders_of_live_ingests_are_kept(tmp_path: Path) -> None:
    live = tmp_path / f".job.tmp-{dataset._HOST}-{os.getpid()}-0123abcd"
    other_host = tmp_path / ".job.tmp-elsewhere-999999999-0123abcd"
    unrelated = tmp_path / ".job.tmp-notours"
    for path in (live, other_host, unrelated):
        path.mkdir()
    assert dataset.remove_stale(tmp_path) == []
    assert all(p.is_dir() for p in (live, other_host, unrelated))
