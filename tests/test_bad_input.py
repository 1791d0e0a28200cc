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
from paradiag.cache import HOST, JobError, remove_stale
from paradiag.cli import main
from tests.helpers import kineto_trace, write_job, write_trace

BAD_FILES = {
    "truncated.json.gz": (
        lambda: gzip.compress(json.dumps(kineto_trace(5)).encode())[:300],
        "truncated or corrupt gzip",
    ),
    "invalid.json": (lambda: b'{"traceEvents": [{"ph": "X", "ts": 1,', "invalid JSON"),
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


# Valid JSON of another kind beside the traces (a config, a metrics dump): a stray file, not a broken trace.
NOT_TRACES = {
    "notatrace.json": (
        b'{"model": "resnet50", "lr": 0.1}',
        "not a PyTorch profiler trace: no 'traceEvents' list",
    ),
    "array.json": (b"[1, 2, 3]", "not a PyTorch profiler trace"),
}


@pytest.mark.parametrize("name", sorted(NOT_TRACES))
def test_a_stray_json_file_is_a_warning_and_the_rest_loads(tmp_path: Path, name: str) -> None:
    folder = write_job(tmp_path / "job", ranks=2)
    content, message = NOT_TRACES[name]
    (folder / name).write_bytes(content)
    job = paradiag.open(folder)
    assert job.rank_ids == [0, 1]
    assert [p for p in job.problems if p.severity == "error"] == []
    (warning,) = job.problems
    assert warning.source == name and warning.severity == "warning"
    assert warning.message.startswith("not a trace: skipped") and message in warning.message


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
    doc["traceEvents"].append(
        {"ph": "X", "cat": "kernel", "name": "negative", "pid": 0, "tid": 7, "ts": -5, "dur": 5}
    )
    doc["traceEvents"].append(
        {"ph": "X", "cat": "kernel", "name": "neg_dur", "pid": 0, "tid": 7, "ts": 5, "dur": -1}
    )
    doc["traceEvents"].append(
        {"ph": "X", "cat": "kernel", "name": "str_ts", "pid": 0, "tid": 7, "ts": "soon", "dur": 1}
    )
    (tmp_path / "job").mkdir()
    write_trace(tmp_path / "job" / "rank0.json", doc)
    job = paradiag.open(tmp_path / "job")
    assert job.events().num_rows == good
    warnings = [str(p) for p in job.problems if p.severity == "warning"]
    assert any(
        "rank0.json" in w and "4 events with a missing, negative or out-of-range timestamp" in w
        for w in warnings
    )


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
    assert problems["host_1_ascend_pt/ASCEND_PROFILER_OUTPUT/trace_view.json"].startswith(
        "a broken symbolic link"
    )
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
from paradiag import ingest, pool
from paradiag.parsers import kineto

parse = kineto.parse
def slow(*args, **kwargs):
    time.sleep(60)  # a big rank: the ingest is killed while its workers parse
    return parse(*args, **kwargs)
kineto.parse = slow
pool.IN_PROCESS_BYTES = 0
ingest.ingest(Path(sys.argv[1]), Path(sys.argv[2]), workers=2)
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
    live = tmp_path / f".job.tmp-{HOST}-{os.getpid()}-0123abcd"
    other_host = tmp_path / ".job.tmp-elsewhere-999999999-0123abcd"
    unrelated = tmp_path / ".job.tmp-notours"
    for path in (live, other_host, unrelated):
        path.mkdir()
    assert remove_stale(tmp_path) == []
    assert all(p.is_dir() for p in (live, other_host, unrelated))


# --- values out of range, broken structure: one problem on that file, the rest loads --------------------------


def _doc(change: Any) -> bytes:
    doc = kineto_trace(2, world=3)
    change(doc)
    return json.dumps(doc).encode()


def _set_event(index: int, **values: Any) -> Any:
    return lambda doc: doc["traceEvents"][index].update(values)


def _set_args(index: int, **values: Any) -> Any:
    return lambda doc: doc["traceEvents"][index]["args"].update(values)


def _flip_gzip_byte() -> bytes:
    data = bytearray(gzip.compress(_doc(lambda d: None)))
    data[len(data) // 2] ^= 0xFF
    return bytes(data)


# name -> (content of rank2.json[.gz], severity, text of the problem, ranks that load)
VALUE_CASES: dict[str, tuple[Any, str, str, list[int]]] = {
    "rank >= 2**31": (
        lambda: _doc(lambda d: d["distributedInfo"].update(rank=2**31)),
        "warning",
        "distributedInfo.rank 2147483648 is not a valid rank",
        [0, 1, 2],
    ),
    "negative rank": (
        lambda: _doc(lambda d: d["distributedInfo"].update(rank=-3)),
        "warning",
        "distributedInfo.rank -3 is not a valid rank",
        [0, 1, 2],
    ),
    "rank 1e300": (
        lambda: _doc(lambda d: d["distributedInfo"].update(rank=1e300)),
        "warning",
        "distributedInfo.rank 1e+300 is not",
        [0, 1, 2],
    ),
    "world_size >= 2**31": (
        lambda: _doc(lambda d: d["distributedInfo"].update(world_size=2**31)),
        "warning",
        "distributedInfo.world_size 2147483648 is not a valid world size",
        [0, 1, 2],
    ),
    "ts beyond int64": (
        lambda: _doc(_set_event(3, ts=10**20)),
        "warning",
        "1 events with a missing, negative or out-of-range timestamp",
        [0, 1, 2],
    ),
    "ts 1e30": (
        lambda: _doc(_set_event(3, ts=1e30)),
        "warning",
        "1 events with a missing, negative or out-of-range timestamp",
        [0, 1, 2],
    ),
    "dur 1e30": (
        lambda: _doc(_set_event(3, dur=1e30)),
        "warning",
        "1 events with a missing, negative or out-of-range timestamp",
        [0, 1, 2],
    ),
    "ProfilerStep#1e20": (
        lambda: _doc(lambda d: d["traceEvents"][-1].update(name="ProfilerStep#100000000000000000000")),
        "warning",
        "step number out of range",
        [0, 1, 2],
    ),
    "device 1e300": (lambda: _doc(_set_args(4, device=1e300)), "warning", "read leniently", [0, 1, 2]),
    "correlation 1e30": (lambda: _doc(_set_args(4, correlation=10**30)), "", "", [0, 1, 2]),
    "baseTimeNanoseconds 1e300": (
        lambda: _doc(lambda d: d.update(baseTimeNanoseconds=1e300)),
        "warning",
        "baseTimeNanoseconds 1e+300 is not a valid time",
        [0, 1, 2],
    ),
    "flipped gzip byte": (_flip_gzip_byte, "error", "truncated or corrupt gzip data", [0, 1]),
    "deep nesting outside the events": (
        lambda: _doc(lambda d: None)[:-1] + b', "x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
        "error",
        "values nested too deeply outside 'traceEvents'",
        [0, 1],
    ),
    "deep nesting in an event": (
        lambda: _doc(_set_args(3, x=0)).replace(b'"x": 0', b'"x": ' + b"[" * 100_000 + b"]" * 100_000),
        "error",
        "values nested too deeply",
        [0, 1],
    ),
    "traceEvents of numbers": (
        lambda: b'{"traceEvents": [1, 2, 3]}',
        "error",
        "an element of the array is not an object",
        [0, 1],
    ),
    "invalid UTF-8 in a name": (
        lambda: _doc(lambda d: None).replace(b"aten::mm", b"aten\xff\xfemm", 1),
        "error",
        "invalid JSON",
        [0, 1],
    ),
}


@pytest.mark.parametrize("case", sorted(VALUE_CASES))
def test_bad_values_become_a_named_problem(tmp_path: Path, case: str) -> None:
    content, severity, text, ranks = VALUE_CASES[case]
    folder = write_job(tmp_path / "job", ranks=2)
    name = "rank2.json.gz" if case == "flipped gzip byte" else "rank2.json"
    (folder / name).write_bytes(content())
    job = paradiag.open(folder)
    assert job.rank_ids == ranks
    assert not any("internal error" in p.message for p in job.problems)
    if severity:
        assert any(p.source == name and p.severity == severity and text in p.message for p in job.problems), (
            job.problems
        )
    else:
        assert job.problems == []


# --- limits: bombs stop early, whitespace costs no time ---------------------------------------------------------


def test_decompressed_size_limit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = write_job(tmp_path / "job", ranks=2)
    doc = kineto_trace(2, world=3)
    doc["padding"] = "x" * (3 * 1024 * 1024)  # compresses to a few KB
    write_trace(folder / "rank2.json.gz", doc)
    monkeypatch.setenv("PARADIAG_MAX_FILE_MB", "2")
    job = paradiag.open(folder)
    assert job.rank_ids == [0, 1]
    [error] = [p for p in job.problems if p.severity == "error"]
    assert error.source == "rank2.json.gz"
    assert error.message == "decompressed size exceeds 2 MB (limit PARADIAG_MAX_FILE_MB)"


def test_long_names_are_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = write_job(tmp_path / "job", ranks=2)
    write_trace(folder / "rank2.json.gz", _long_name_doc(200 * 1024))
    write_trace(folder / "rank3.json.gz", _long_name_doc(40 * 1024 * 1024))
    monkeypatch.setenv("PARADIAG_MAX_STRING_KB", "100")
    job = paradiag.open(folder)
    assert job.rank_ids == [0, 1]
    errors = {p.source: p.message for p in job.problems if p.severity == "error"}
    assert errors["rank2.json.gz"].startswith("event name longer than 100 KiB (204800 bytes")
    # A name far beyond one slice is stopped by the element size, before it is all read.
    assert "is longer than 16384 KiB" in errors["rank3.json.gz"]


def _long_name_doc(length: int) -> dict[str, Any]:
    doc = kineto_trace(2, world=4)
    doc["traceEvents"][3]["name"] = "n" * length
    return doc


def test_default_limits_let_real_sizes_through(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PARADIAG_MAX_FILE_MB", raising=False)
    monkeypatch.delenv("PARADIAG_MAX_STRING_KB", raising=False)
    folder = write_job(tmp_path / "job", ranks=2)
    write_trace(folder / "rank2.json.gz", _long_name_doc(20 * 1024))  # a long templated kernel name
    assert paradiag.open(folder).rank_ids == [0, 1, 2]


def test_a_bad_limit_setting_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PARADIAG_MAX_FILE_MB", "lots")
    folder = write_job(tmp_path / "job", ranks=1)
    with pytest.raises(
        JobError, match=r"rank0.pt.trace.json.gz: \$PARADIAG_MAX_FILE_MB is not a whole number \('lots'\)"
    ):
        paradiag.open(folder)


@pytest.mark.parametrize("where", ["before the list", "inside the list", "between events", "after the list"])
def test_long_runs_of_whitespace_are_read_like_any_text(tmp_path: Path, where: str) -> None:
    """The class of the slow upload: a long run of whitespace was skipped one byte at a time (33 s for 255 KB
    of gzip). Read now like any other text (no timing here: benchmarks/fuzz.py prints the figure)."""
    text = json.dumps(kineto_trace(0, world=1))
    pad = " " * (8 * 1024 * 1024)
    text = {
        "before the list": pad + text,
        "inside the list": text.replace('"traceEvents": [', '"traceEvents": [' + pad),
        "between events": text.replace("}, {", "}," + pad + "{", 1),
        "after the list": text[:-1] + pad + "}",
    }[where]
    (tmp_path / "job").mkdir()
    (tmp_path / "job" / "rank0.json.gz").write_bytes(gzip.compress(text.encode(), 1))
    job = paradiag.open(tmp_path / "job")
    assert job.rank_ids == [0]
    assert job.events().num_rows == sum(1 for e in kineto_trace(0, world=1)["traceEvents"] if e["ph"] == "X")


# --- two runs in one folder -------------------------------------------------------------------------------------

DAY_NS = 86_400 * 10**9
EPOCH = 1_750_000_000 * 10**9


def _run(folder: Path, ranks: range, world: int, base_ns: int, first_step: int = 0) -> None:
    folder.mkdir(exist_ok=True)
    for r in ranks:
        doc = kineto_trace(r, world=world)
        doc["baseTimeNanoseconds"] = base_ns
        for e in doc["traceEvents"]:
            if e.get("name", "").startswith("ProfilerStep#"):
                e["name"] = f"ProfilerStep#{first_step + int(e['name'].split('#')[1])}"
        write_trace(folder / f"rank{r}.json", doc)


def test_two_runs_profiled_apart_are_warned(tmp_path: Path) -> None:
    _run(tmp_path / "job", range(2), 4, EPOCH)
    _run(tmp_path / "job", range(2, 4), 4, EPOCH + DAY_NS)
    job = paradiag.open(tmp_path / "job")
    assert job.rank_ids == [0, 1, 2, 3]
    [warning] = [p.message for p in job.problems]
    assert warning.startswith(
        "the folder seems to mix 2 profiling runs, profiled more than 10 minutes apart: ranks 0, 1 from 2025-06-15"
    )
    assert "ranks 2, 3 from 2025-06-16" in warning


def test_two_runs_with_disjoint_steps_are_warned(tmp_path: Path) -> None:
    _run(tmp_path / "job", range(2), 4, EPOCH)
    _run(tmp_path / "job", range(2, 4), 4, EPOCH + 10**9, first_step=100)
    job = paradiag.open(tmp_path / "job")
    [warning] = [p.message for p in job.problems]
    assert (
        warning
        == "the folder seems to mix 2 profiling runs (no step id in common): ranks 0, 1 have steps 0-1; ranks 2, 3 have steps 100-101"
    )


def test_one_run_with_skewed_clocks_is_not_warned(tmp_path: Path) -> None:
    _run(tmp_path / "job", range(2), 4, EPOCH)
    _run(tmp_path / "job", range(2, 4), 4, EPOCH + 30 * 10**9)
    assert paradiag.open(tmp_path / "job").problems == []


# --- cache currency ---------------------------------------------------------------------------------------------


def test_a_same_size_same_mtime_rewrite_is_found_by_verify(tmp_path: Path) -> None:
    """Size and mtime decide by default (documented); ``--verify`` hashes every file."""
    folder = write_job(tmp_path / "job", ranks=2)
    target = folder / "rank1.pt.trace.json.gz"
    cache = tmp_path / "cache"
    before = paradiag.open(folder, cache)
    stat = target.stat()
    data = bytearray(target.read_bytes())
    doc = json.loads(gzip.decompress(bytes(data)))
    doc["traceEvents"] = [e for e in doc["traceEvents"] if not e.get("name", "").startswith("ProfilerStep#1")]
    new = gzip.compress(json.dumps(doc).encode())
    target.write_bytes(new.ljust(len(data), b"\0") if len(new) <= len(data) else new[: len(data)])
    os.utime(target, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert target.stat().st_size == stat.st_size
    assert (
        paradiag.open(folder, cache).content_hash == before.content_hash
    )  # not noticed: the documented limit
    result = CliRunner().invoke(main, ["info", "--verify", "--cache", str(cache), str(folder)])
    assert result.exit_code == 0, result.output
    after = paradiag.open(folder, cache)
    assert after.content_hash != before.content_hash
    assert sorted(
        set(after.steps.filter(after.steps.column("rank").to_numpy() == 1).column("step").to_pylist())
    ) == [0]
