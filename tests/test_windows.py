"""Several files per rank: profiling windows (profiler cycles, iteration_N folders, rank{R}.window{W} names), a
rerun's older files set aside, missing ranks, and the run manifest paradiag_run.json."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import paradiag
from paradiag import dataset, discover, windows
from paradiag.cache import MANIFEST as CACHE_MANIFEST
from paradiag.cache import JobError
from paradiag.cli import main
from paradiag.job import Job
from tests.helpers import kineto_trace, write_trace

BASE_NS = 1_790_000_000 * 10**9  # a wall clock (2026)
REAL = Path("/work/realtraces")


def cycle(
    rank: int, first_step: int, pid: int, start_s: float, world: int = 2, steps: int = 2
) -> dict[str, Any]:
    """One profiler cycle of one rank: ``steps`` ProfilerSteps from ``first_step``, in process ``pid``, starting
    ``start_s`` seconds after BASE_NS on the wall clock."""
    doc = kineto_trace(rank, steps=steps, world=world, shift_us=start_s * 1e6)
    for e in doc["traceEvents"]:
        if e.get("pid") == 100 + rank:
            e["pid"] = pid
        if e["name"].startswith("ProfilerStep#"):
            e["name"] = f"ProfilerStep#{int(e['name'].split('#')[1]) + first_step}"
    doc["baseTimeNanoseconds"] = BASE_NS
    return doc


def tb_name(rank: int, pid: int, write_s: float) -> str:
    """tensorboard_trace_handler's default file name: {hostname}_{pid}.{time_ns}.pt.trace.json."""
    return f"node{rank}_{pid}.{BASE_NS + int(write_s * 1e9)}.pt.trace.json"


def write_run(folder: Path, pids: list[int], cycles: list[tuple[int, float]], world: int = 2) -> list[Path]:
    """A run of ``len(pids)`` ranks, one file per rank and cycle ((first step, start seconds) each)."""
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for rank, pid in enumerate(pids):
        for first, start in cycles:
            written.append(
                write_trace(folder / tb_name(rank, pid, start + 1), cycle(rank, first, pid, start, world))
            )
    return written


def steps_of(job: Job) -> set[int]:
    return set(job.steps.column("step").to_pylist())


def test_two_cycles_of_one_run_are_two_windows_the_latest_by_default(tmp_path: Path) -> None:
    folder = tmp_path / "job"
    write_run(folder, [4001, 4002], [(2, 0.0), (7, 5.0)])
    job = paradiag.open(folder, tmp_path / "cache")
    assert job.rank_ids == [0, 1] and job.problems == []
    assert steps_of(job) == {7, 8} and job.window == 1
    assert [(w["index"], w["steps"]) for w in job.windows] == [(0, [2, 3]), (1, [7, 8])]
    assert all(len(w["files"]) == 2 for w in job.windows)
    first = paradiag.open(folder, tmp_path / "cache", window=0)
    assert steps_of(first) == {2, 3} and first.window == 0
    assert first.cache_dir == tmp_path / "cache.window0"  # a cache of its own, outside the source folder
    assert first.content_hash != job.content_hash
    # Switching back reparses nothing: the latest window's cache is still current.
    stamp = (tmp_path / "cache" / CACHE_MANIFEST).stat().st_mtime_ns
    assert paradiag.open(folder, tmp_path / "cache").window == 1
    assert (tmp_path / "cache" / CACHE_MANIFEST).stat().st_mtime_ns == stamp
    assert paradiag.open(tmp_path / "cache.window0").window == 0  # a cache folder opened: the window it holds
    assert paradiag.open(tmp_path / "cache", window=0).cache_dir == tmp_path / "cache.window0"
    # Asking the latest by number reuses the default cache too.
    assert paradiag.open(folder, tmp_path / "cache", window=1).cache_dir == tmp_path / "cache"
    with pytest.raises(JobError, match="no window 2: the job has windows 0-1"):
        paradiag.open(folder, tmp_path / "cache", window=2)


def test_the_cli_takes_window_and_info_lists_them(tmp_path: Path) -> None:
    folder = tmp_path / "job"
    write_run(folder, [4001, 4002], [(2, 0.0), (7, 5.0)])
    runner = CliRunner()
    result = runner.invoke(main, ["info", str(folder), "-o", str(tmp_path / "c"), "--window", "0", "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert doc["window"] == 0 and len(doc["windows"]) == 2
    assert {s for r in doc["ranks"] for s in r["steps"]} == {2, 3}
    table = runner.invoke(main, ["info", str(folder), "-o", str(tmp_path / "c")])
    assert table.exit_code == 0 and "2 profiling windows" in table.output and "1 (shown)" in table.output
    analysed = runner.invoke(
        main, ["analyze", str(folder), "-o", str(tmp_path / "c"), "--window", "0", "--json"]
    )
    assert analysed.exit_code == 0 and json.loads(analysed.output)["job"]["steps"] == [2, 3]
    bad = runner.invoke(main, ["analyze", str(folder), "-o", str(tmp_path / "c"), "--window", "5"])
    assert bad.exit_code == 1 and "no window 5" in bad.output


def test_a_rerun_in_the_same_folder_sets_the_older_files_aside(tmp_path: Path) -> None:
    folder = tmp_path / "job"
    old = write_run(folder, [4001, 4002], [(2, 0.0), (7, 5.0)])
    new = write_run(folder, [5001, 5002], [(2, 60.0)])  # a new process per rank, steps from 2 again
    job = paradiag.open(folder, tmp_path / "cache")
    assert steps_of(job) == {2, 3} and len(job.windows) == 1
    assert sorted(job.windows[0]["files"]) == sorted(p.name for p in new)
    aside = [p for p in job.problems if p.severity == "warning" and "older profiling run" in p.message]
    assert sorted(p.source for p in aside if p.source != ".") == sorted(p.name for p in old)
    assert all(p.severity != "error" for p in job.problems)


def test_a_rerun_is_told_by_its_steps_starting_again_when_the_names_say_no_process(tmp_path: Path) -> None:
    """worker_name=rank{R} (no pid in the name), and the same pid in both runs (a container's pid 1): the steps
    starting again tell the rerun; the older run is set aside although its names sort after the newer one's."""
    folder = tmp_path / "job"
    folder.mkdir()
    for rank in range(2):
        write_trace(
            folder / f"rank{rank}.{BASE_NS + 9 * 10**9}.pt.trace.json", cycle(rank, 2, 1, 0.0)
        )  # the old run
        write_trace(
            folder / f"rank{rank}.{BASE_NS + 1 * 10**9}.pt.trace.json", cycle(rank, 2, 1, 30.0)
        )  # names lie
    job = paradiag.open(folder, tmp_path / "cache")
    kept = sorted(job.windows[0]["files"])
    assert kept == [f"rank{r}.{BASE_NS + 1 * 10**9}.pt.trace.json" for r in range(2)]
    assert job.by_rank("source") == {0: kept[0], 1: kept[1]}


def test_a_copy_of_a_rank_is_still_named_as_claiming_it(tmp_path: Path) -> None:
    folder = tmp_path / "job"
    folder.mkdir()
    for rank in range(2):
        write_trace(folder / f"rank{rank}.json", cycle(rank, 2, 10 + rank, 0.0))
    shutil.copy(folder / "rank1.json", folder / "backup_rank1.json")
    job = paradiag.open(folder, tmp_path / "cache")
    assert len(job.windows) == 1
    (error,) = [p for p in job.problems if p.severity == "error"]
    assert "rank 1 is also claimed by backup_rank1.json" in error.message


def test_iteration_folders_are_windows(tmp_path: Path) -> None:
    """torchtitan's layout: profile_trace/iteration_N/rankR_trace.json (no wall clock, no manifest)."""
    for it in (10, 20):
        sub = tmp_path / "job" / "profile_trace" / f"iteration_{it}"
        sub.mkdir(parents=True)
        for rank in range(2):
            write_trace(sub / f"rank{rank}_trace.json", kineto_trace(rank))
    (tmp_path / "job" / "notes.json").write_text('{"lr": 0.1}')  # outside every window
    job = paradiag.open(tmp_path / "job", tmp_path / "cache")
    assert [w["label"] for w in job.windows] == ["profile_trace/iteration_10", "profile_trace/iteration_20"]
    assert job.window == 1 and job.rank_ids == [0, 1]
    assert set(job.by_rank("source").values()) == {
        "profile_trace/iteration_20/rank0_trace.json",
        "profile_trace/iteration_20/rank1_trace.json",
    }
    (aside,) = job.problems
    assert (
        aside.source == "notes.json"
        and aside.severity == "warning"
        and "outside every profiling window" in aside.message
    )
    first = paradiag.open(tmp_path / "job", tmp_path / "cache", window=0)
    assert set(first.by_rank("source").values()) == {
        "profile_trace/iteration_10/rank0_trace.json",
        "profile_trace/iteration_10/rank1_trace.json",
    }


def test_paradiag_torch_names_are_windows_and_a_missing_rank_is_a_warning(tmp_path: Path) -> None:
    folder = tmp_path / "job"
    folder.mkdir()
    for w in range(2):
        for rank in range(4):
            if (w, rank) != (1, 3):  # rank 3's second window is missing
                write_trace(
                    folder / f"rank{rank}.window{w}.pt.trace.json",
                    cycle(rank, 2 + 5 * w, 50 + rank, 5.0 * w, world=4),
                )
    job = paradiag.open(folder, tmp_path / "cache")
    assert job.window == 1 and job.rank_ids == [0, 1, 2]
    (missing,) = job.problems
    assert (
        missing.severity == "warning"
        and "1 of the world size's 4 ranks have no trace in window 1" in missing.message
    )
    assert missing.message.endswith("rank 3")
    assert paradiag.open(folder, tmp_path / "cache", window=0).problems == []


MANIFEST = {
    "format": "paradiag.torch/1", "torch_version": "2.13.0", "backend": "gloo", "device_type": "cpu", "world_size": 4,
    "mesh": {"dim_names": ["dp", "pp"], "shape": [2, 2], "ranks": [[0, 1], [2, 3]]},
    "groups": [
        {"name": "0", "desc": "default_pg", "ranks": [0, 1, 2, 3]},
        {"name": "1", "desc": "mesh_dp", "ranks": [0, 2]},
        {"name": "mesh_dp", "desc": "mesh_dp", "ranks": [1, 3]},
        {"name": "mesh_pp", "desc": "mesh_pp", "ranks": [0, 1]},
        {"name": "mesh_pp", "desc": "mesh_pp", "ranks": [2, 3]},
    ],
    "schedule": {"wait": 1, "warmup": 1, "active": 2, "repeat": 1, "skip_first": 0},
    "started_ns": BASE_NS,
}  # fmt: skip


def mesh_job(folder: Path, manifest: Any) -> Path:
    """A dp x pp job of 4 ranks, each trace listing only its own process groups, with the run manifest ``manifest``."""
    folder.mkdir()
    for rank in range(4):
        doc = cycle(rank, 2, 50 + rank, 1.0, world=4)
        doc["distributedInfo"]["pg_config"] = [
            doc["distributedInfo"]["pg_config"][0]
        ]  # only the rank's own groups
        if rank in (0, 2):
            doc["distributedInfo"]["pg_config"].append(
                {"pg_name": "1", "pg_desc": "mesh_dp", "pg_size": 2, "ranks": [0, 2]}
            )
        write_trace(folder / f"rank{rank}.window0.pt.trace.json", doc)
    (folder / "paradiag_run.json").write_text(manifest if isinstance(manifest, str) else json.dumps(manifest))
    return folder


def test_the_run_manifest_gives_the_groups_and_the_mesh_coordinates(tmp_path: Path) -> None:
    job = paradiag.open(mesh_job(tmp_path / "job", MANIFEST), tmp_path / "cache")
    assert job.problems == []
    members = job.group_members()
    assert members["0"] == [0, 1, 2, 3] and members["1"] == [0, 2]  # reported by the ranks, completed
    # A name that several of the manifest's groups share gets their members (mesh_pp[0,1]); the [0, 2] slice of
    # mesh_dp is the process group "1", so its other slice keeps the name alone.
    assert (
        members["mesh_dp"] == [1, 3]
        and members["mesh_pp[0,1]"] == [0, 1]
        and members["mesh_pp[2,3]"] == [2, 3]
    )
    assert len(members) == 5
    descriptions = dict(
        zip(job.groups.column("group").to_pylist(), job.groups.column("description").to_pylist(), strict=True)
    )
    assert descriptions["mesh_pp[2,3]"] == "mesh_pp"
    assert job.by_rank("dp") == {0: 0, 1: 0, 2: 1, 3: 1} and job.by_rank("pp") == {0: 0, 1: 1, 2: 0, 3: 1}
    assert job.by_rank("tp") == dict.fromkeys(range(4), 0)
    assert job.manifest["run_manifest"]["mesh"] == ["dp", "pp"]


def test_the_run_manifest_s_world_size_names_missing_ranks_and_its_start_sets_older_files_aside(
    tmp_path: Path,
) -> None:
    folder = mesh_job(
        tmp_path / "job", {**MANIFEST, "started_ns": BASE_NS + 5 * 10**8}
    )  # the files start at 1 s
    (folder / "rank3.window0.pt.trace.json").unlink()
    write_trace(
        folder / "rank1.window1.pt.trace.json", cycle(1, 20, 9, 0.0, world=4)
    )  # before the run started
    job = paradiag.open(folder, tmp_path / "cache")
    assert len(job.windows) == 1 and job.rank_ids == [0, 1, 2]
    messages = {(p.source, p.message) for p in job.problems}
    assert (".", "1 of the world size's 4 ranks have no trace: rank 3") in messages
    assert any(
        s == "rank1.window1.pt.trace.json" and "before the run that paradiag_run.json describes" in m
        for s, m in messages
    )


BROKEN = {
    "not json": "{",
    "wrong format": json.dumps({**MANIFEST, "format": "other/1"}),
    "rank outside the world": json.dumps(
        {**MANIFEST, "groups": [{"name": "x", "desc": "x", "ranks": [0, 9]}]}
    ),
    "mesh does not match": json.dumps(
        {**MANIFEST, "mesh": {"dim_names": ["dp", "pp"], "shape": [2, 2], "ranks": [[0, 1], [2]]}}
    ),
    "wrong type": json.dumps({**MANIFEST, "world_size": "4"}),
    "path-like names are data": json.dumps({**MANIFEST, "groups": "../../etc/passwd"}),
}


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_a_broken_run_manifest_is_a_warning_naming_it(tmp_path: Path, case: str) -> None:
    job = paradiag.open(mesh_job(tmp_path / "job", BROKEN[case]), tmp_path / "cache")
    assert job.rank_ids == [0, 1, 2, 3]
    (warning,) = job.problems
    assert (
        warning.source == "paradiag_run.json"
        and warning.severity == "warning"
        and "the run manifest is ignored" in warning.message
    )
    assert job.by_rank("dp") == dict.fromkeys(range(4)) and "mesh_pp[0,1]" not in job.group_members()


def test_peeks_never_fail_and_read_what_the_head_says(tmp_path: Path) -> None:
    path = write_trace(tmp_path / "x_77.1790000000000000001.pt.trace.json.gz", cycle(3, 4, 77, 2.0, world=8))
    source = discover.Source(path, windows.KINETO, (path,))
    peek = windows.head_peek(source)
    assert (peek.rank, peek.world_size, peek.pid) == (3, 8, 77)
    assert (
        peek.start_ns is None
    )  # baseTimeNanoseconds comes after the events here: in a gzip file, only a full read finds it
    windows.full_peek(source, peek)
    assert peek.steps == (4, 5)
    assert peek.start_ns is not None and BASE_NS + 2 * 10**9 <= peek.start_ns < BASE_NS + 3 * 10**9
    plain = write_trace(tmp_path / "z.json", cycle(3, 4, 77, 2.0, world=8))
    assert (
        windows.head_peek(discover.Source(plain, windows.KINETO, (plain,))).start_ns == peek.start_ns
    )  # its tail read
    broken = tmp_path / "y.json.gz"
    broken.write_bytes(path.read_bytes()[:200])
    assert windows.head_peek(discover.Source(broken, windows.KINETO, (broken,))).rank is None


@pytest.mark.skipif(
    not (REAL / "quick_ddp").is_dir(),
    reason="real traces absent: /work/realtraces/quick_ddp (made by tests/realjobs)",
)
def test_a_real_job_rerun_into_its_folder(tmp_path: Path) -> None:
    """A real 4-rank DDP job (worker_name=rank{R}) and the same files shifted as a second run by a new process."""
    folder = tmp_path / "job"
    shutil.copytree(REAL / "quick_ddp", folder)
    first = paradiag.open(folder, tmp_path / "cache")
    assert first.rank_ids == [0, 1, 2, 3] and len(first.windows) == 1 and first.problems == []
    older = sorted(p.name for p in folder.iterdir())
    for p in list(folder.iterdir()):  # the rerun: later on the wall clock, another process, the same steps
        doc = json.loads(p.read_text())
        doc["baseTimeNanoseconds"] += 120 * 10**9
        for e in doc["traceEvents"]:
            if isinstance(e.get("pid"), int) and e["pid"] > 100:
                e["pid"] += 1
        rank, stamp = p.name.split(".")[:2]
        (folder / f"{rank}.{int(stamp) + 120 * 10**9}.pt.trace.json").write_text(json.dumps(doc))
    job = paradiag.open(folder, tmp_path / "cache")
    assert job.rank_ids == [0, 1, 2, 3] and len(job.windows) == 1
    assert not set(job.windows[0]["files"]) & set(older)
    assert (
        sorted(p.source for p in job.problems if "older profiling run" in p.message and p.source != ".")
        == older
    )


def test_the_dashboard_opens_a_window_by_its_token(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from paradiag.app import jobs
    from paradiag.app.callbacks.header import window_picker

    assert jobs.split_window("upload:abc@w3") == ("upload:abc", 3) and jobs.split_window("sample:a@wx") == (
        "sample:a@wx",
        None,
    )
    assert (
        jobs.with_window("upload:abc@w3", 0) == "upload:abc@w0"
        and jobs.with_window("upload:abc@w3", None) == "upload:abc"
    )
    monkeypatch.setenv("PARADIAG_CACHE_DIR", str(tmp_path / "caches"))
    folder = tmp_path / "job"
    write_run(folder, [4001, 4002], [(2, 0.0), (7, 5.0)])
    latest, first = jobs.open_path(folder), jobs.open_path(folder, 0)
    assert (latest.window, first.window) == (1, 0) and steps_of(first) == {2, 3}
    picker = str(window_picker("served:", latest.window, latest.windows).to_plotly_json())
    assert "job=served%3A%40w0" in picker and "window 1 of 2" in picker
    jobs.forget(folder)
    assert jobs.open_path(folder, 0) is not first  # forgotten, every window of it


def test_windows_of_a_cache_at_a_url_are_caches_of_their_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Any fsspec file system serves (file:// here): window N goes to <url>.windowN, as a folder cache's does."""
    pytest.importorskip("fsspec")
    monkeypatch.setenv("PARADIAG_CACHE_DIR", str(tmp_path / "root"))
    folder = tmp_path / "job"
    write_run(folder, [4001, 4002], [(2, 0.0), (7, 5.0)])
    url = f"file://{tmp_path}/store/job"
    latest = paradiag.open(folder, url)
    first = paradiag.open(folder, url, window=0)
    assert (latest.window, first.window) == (1, 0) and steps_of(first) == {2, 3}
    assert first.url == url + ".window0" and latest.url == url
    assert (
        paradiag.open(url).window == 1 and paradiag.open(url + ".window0").window == 0
    )  # a cache opened: its window
    assert (
        paradiag.open(url, window=0).url == url + ".window0"
    )  # the URL of the latest, asked for another window


def test_a_window_parsed_on_a_dask_cluster(tmp_path: Path) -> None:
    distributed = pytest.importorskip("distributed")
    folder = tmp_path / "job"
    write_run(folder, [4001, 4002], [(2, 0.0), (7, 5.0)])
    with distributed.LocalCluster(
        n_workers=1, processes=False, threads_per_worker=1, dashboard_address=":0"
    ) as cluster:
        job = dataset.open_job(folder, tmp_path / "cache", window=0, dask=cluster.scheduler_address)
    assert job.window == 0 and steps_of(job) == {2, 3} and job.rank_ids == [0, 1] and job.problems == []
    assert sorted(job.by_rank("source").values()) == sorted(job.windows[0]["files"])
