"""The cache at an fsspec URL (paradiag.remote), against a real S3 protocol server on loopback.

moto's ThreadedMotoServer speaks S3 over HTTP on a free port; s3fs reaches it through AWS_ENDPOINT_URL with dummy
keys, set in this process's environment (so the Dask workers started here and the CLI subprocesses inherit them).
An ingest to ``s3://BUCKET/job`` writes a generation and commits it with the pointer object; the generation's
objects equal a local ingest's cache byte for byte, and a reader elsewhere (a fresh local cache root) gets the same
report."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from paradiag import dataset, ingest, parse_worker, remote
from paradiag.analysis.report import build_report
from paradiag.cache import HOST, JobError
from paradiag.cli import main
from tests.helpers import assert_same_cache, write_job

pytest.importorskip("s3fs")
moto_server = pytest.importorskip("moto.server")


@pytest.fixture(scope="module")
def s3() -> Iterator[Any]:
    """An S3 server on loopback and the environment that points s3fs at it; yields an S3FileSystem."""
    import fsspec

    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    env = pytest.MonkeyPatch()
    for name, value in {
        "AWS_ENDPOINT_URL": f"http://{host}:{port}",
        "AWS_ACCESS_KEY_ID": "testing-key",
        "AWS_SECRET_ACCESS_KEY": "testing-secret",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_EC2_METADATA_DISABLED": "true",
    }.items():
        env.setenv(name, value)
    try:
        yield fsspec.filesystem("s3", skip_instance_cache=True)
    finally:
        env.undo()
        server.stop()


@pytest.fixture
def bucket(s3: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A new bucket, and a local cache root of this test's own (where mirrors go)."""
    name = f"b-{uuid.uuid4().hex[:12]}"
    s3.mkdir(name)
    monkeypatch.setenv("PARADIAG_CACHE_DIR", str(tmp_path / "root"))
    return name


def _pointer(s3: Any, url: str) -> dict[str, Any] | None:
    path = url.removeprefix("s3://") + "/" + remote.POINTER
    s3.invalidate_cache()
    return json.loads(s3.cat_file(path)) if s3.exists(path) else None


def _entries(s3: Any, url: str) -> list[str]:
    s3.invalidate_cache()
    prefix = url.removeprefix("s3://")
    return sorted(p.rsplit("/", 1)[-1] for p in s3.ls(prefix, detail=False)) if s3.exists(prefix) else []


def _download(s3: Any, url: str, into: Path) -> Path:
    """The committed generation's objects, as a folder (to compare with a local cache file by file)."""
    prefix = url.removeprefix("s3://") + "/" + _pointer(s3, url)["generation"]  # type: ignore[index]
    for path in s3.find(prefix):
        target = into / path[len(prefix) + 1 :]
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(s3.cat_file(path))
    return into


def _analyze(*args: str) -> dict[str, Any]:
    result = CliRunner().invoke(main, ["analyze", "--json", *args])
    assert result.exit_code == 0, result.output
    return dict(json.loads(result.output))


def _assert_same_as_local(
    s3: Any, url: str, local_cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The generation's objects equal the local ingest's files; a reader with an empty cache root (which
    downloads the generation) gets the local cache's report from ``paradiag analyze --json URL``."""
    pointer = _pointer(s3, url)
    assert pointer is not None and pointer["format"] == remote.POINTER_FORMAT
    assert _entries(s3, url) == sorted([pointer["generation"], remote.POINTER])
    assert_same_cache(_download(s3, url, tmp_path / "objects"), local_cache)
    monkeypatch.setenv("PARADIAG_CACHE_DIR", str(tmp_path / "elsewhere"))
    assert _analyze(url) == _analyze(str(local_cache))
    assert next((tmp_path / "elsewhere" / "remote").iterdir()).name.startswith("job-")


def test_local_pool_ingest_to_s3_equals_local_ingest(
    sim_job: Path, local_cache: Path, bucket: str, s3: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``paradiag ingest FOLDER -o s3://…`` in a fresh process whose two worker processes (forked) parse and
    upload their ranks; the client uploads the rest and commits."""
    url = f"s3://{bucket}/job"
    code = "import sys; from paradiag import pool; pool.IN_PROCESS_BYTES = 0; from paradiag.cli import main; sys.exit(main())"
    run = subprocess.run(
        [sys.executable, "-c", code, "ingest", str(sim_job), "-o", url, "--workers", "2"],
        capture_output=True, text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(Path(__file__).parent.parent)},
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert "4 ranks" in run.stdout and f"-> {url} (local mirror " in run.stdout
    mirror = tmp_path / "root" / "remote"
    (folder,) = [p for p in mirror.glob("*/gen-*") if p.is_dir()]  # the client kept its folder as the mirror
    assert_same_cache(folder, local_cache)
    _assert_same_as_local(s3, url, local_cache, tmp_path, monkeypatch)


def test_dask_ingest_to_s3_equals_local_ingest(
    sim_job: Path, local_cache: Path, bucket: str, s3: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two Dask worker processes (started after the S3 environment, which they inherit) each parse into a
    scratch folder of their own and upload; the client downloads the ranks for the reduce."""
    distributed = pytest.importorskip("distributed")
    url = f"s3://{bucket}/job"
    with distributed.LocalCluster(
        n_workers=2, processes=True, threads_per_worker=1, dashboard_address=":0"
    ) as cluster:
        job = ingest.ingest(sim_job, url, dask=cluster.scheduler_address)
    assert job.url == url and job.rank_ids == [0, 1, 2, 3] and job.problems == []
    assert_same_cache(job.cache_dir, local_cache)
    _assert_same_as_local(s3, url, local_cache, tmp_path, monkeypatch)


def test_second_ingest_replaces_the_first_atomically(
    sim_job: Path, bucket: str, s3: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = f"s3://{bucket}/job"
    first = ingest.ingest(sim_job, url, workers=1)
    old = _pointer(s3, url)
    other = write_job(tmp_path / "other", ranks=2)
    seen: list[str] = []
    real = remote.Writer.point

    def point(self: remote.Writer, pointer: dict[str, Any]) -> None:
        """Just before the commit: every file of the new generation is there, yet a reader sees the old job."""
        assert _pointer(s3, url) == old
        assert len(_entries(s3, url)) == 3  # the old generation, the new one, the pointer
        with monkeypatch.context() as m:
            m.setenv("PARADIAG_CACHE_DIR", str(tmp_path / f"reader{len(seen)}"))
            reader = dataset.open_job(url)
            seen.append(reader.source)
            assert build_report(reader) == build_report(first)
        real(self, pointer)

    monkeypatch.setattr(remote.Writer, "point", point)
    second = ingest.ingest(other, url, workers=1)
    assert seen == [str(sim_job)]
    new = _pointer(s3, url)
    assert new is not None and old is not None and new["generation"] != old["generation"]
    assert _entries(s3, url) == sorted([new["generation"], remote.POINTER])  # the old generation is gone
    assert [p.name for p in second.cache_dir.parent.iterdir()] == [
        new["generation"].lstrip(".")
    ]  # and its mirror
    monkeypatch.setenv("PARADIAG_CACHE_DIR", str(tmp_path / "later"))
    assert dataset.open_job(url).source == str(other) and new["source"] == str(other)


def test_failed_ingest_keeps_the_committed_cache(
    sim_job: Path, bucket: str, s3: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A strict ingest with a broken rank, and one whose parse raises, leave no new pointer and no new
    generation; the committed cache still opens."""
    url = f"s3://{bucket}/job"
    ingest.ingest(sim_job, url, workers=1)
    committed = _pointer(s3, url)
    broken = write_job(tmp_path / "broken", ranks=2)
    (broken / "rank1.pt.trace.json.gz").write_bytes(b"not gzip")
    with pytest.raises(JobError, match=r"rank1\.pt\.trace\.json\.gz"):
        ingest.ingest(broken, url, workers=1, strict=True)
    assert _pointer(s3, url) == committed and len(_entries(s3, url)) == 2

    def parse(source: Any, root: Path, out_dir: Path, index: int) -> Any:
        raise RuntimeError("a worker's bug")

    monkeypatch.setattr(parse_worker, "parse_rank", parse)
    with pytest.raises(RuntimeError, match="a worker's bug"):
        ingest.ingest(write_job(tmp_path / "fine", ranks=2), url, workers=1)
    assert _pointer(s3, url) == committed and len(_entries(s3, url)) == 2
    monkeypatch.undo()
    monkeypatch.setenv("PARADIAG_CACHE_DIR", str(tmp_path / "reader"))
    assert dataset.open_job(url).source == str(sim_job)


def test_stale_generations_are_removed(sim_job: Path, bucket: str, s3: Any) -> None:
    """A killed ingest's generation (this host, its process gone; or another host's, a day old) is removed by the
    next commit; another host's recent one (an ingest that may be running) is left alone."""
    url = f"s3://{bucket}/job"
    host = HOST
    dead = 2**22 + 12345  # above Linux's largest pid: no such process
    now = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    stale = [".gen-20260101T000000Z-otherhost-7-0123abcd", f".gen-{now}-{host}-{dead}-0123abcd"]
    running = f".gen-{now}-otherhost-7-0123abcd"
    for name in [*stale, running]:
        s3.pipe_file(f"{bucket}/job/{name}/events/part-00000.parquet", b"half")
    ingest.ingest(sim_job, url, workers=1)
    assert _entries(s3, url) == sorted([_pointer(s3, url)["generation"], running, remote.POINTER])  # type: ignore[index]


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("s3://{bucket}/nojob", "s3://{bucket}/nojob: not a paradiag cache (no paradiag-cache.json there"),
        (
            "s3://no-such-bucket-x/job",
            "s3://no-such-bucket-x/job: the bucket 'no-such-bucket-x' does not exist",
        ),
        ("nosuchscheme://host/job", "nosuchscheme://host/job: not a URL fsspec can use"),
    ],
)
def test_unusable_url_is_a_one_line_error(bucket: str, url: str, expected: str) -> None:
    for command in (["analyze"], ["info"], ["snapshot", "-o", os.devnull]):
        result = CliRunner().invoke(main, [*command, url.format(bucket=bucket)])
        assert result.exit_code == 1, result.output
        assert expected.format(bucket=bucket) in result.output and "Traceback" not in result.output
        assert len(result.output.strip().splitlines()) == 1


def test_url_with_another_cache_is_refused(bucket: str, tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["analyze", f"s3://{bucket}/job", "-o", str(tmp_path / "cache")])
    assert result.exit_code == 1 and "a cache's URL is opened as it is: give no other cache" in result.output


def test_ingest_to_a_missing_bucket_writes_nothing(sim_job: Path, bucket: str, tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["ingest", str(sim_job), "-o", "s3://no-such-bucket-y/job"])
    assert result.exit_code == 1 and "the bucket 'no-such-bucket-y' does not exist" in result.output
    assert "Traceback" not in result.output and not (tmp_path / "root").exists()


def test_refused_credentials_are_a_one_line_error(
    sim_job: Path, bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The server (in this process) made to check credentials: its IAM knows no user, so every key is refused."""
    from moto import settings
    from moto.core.authorization import ActionAuthenticatorMixin

    url = f"s3://{bucket}/job"
    ingest.ingest(sim_job, url, workers=1)
    monkeypatch.setattr(settings, "INITIAL_NO_AUTH_ACTION_COUNT", 0)
    monkeypatch.setattr(ActionAuthenticatorMixin, "request_count", 0)
    for args in (["analyze", url], ["ingest", str(sim_job), "-o", url]):
        result = CliRunner().invoke(main, args)
        assert result.exit_code == 1 and "Traceback" not in result.output, result.output
        assert f"{url}: access refused while" in result.output and "check the credentials" in result.output
        assert "testing-secret" not in result.output and len(result.output.strip().splitlines()) == 1


def test_secret_in_the_url_is_never_shown(bucket: str) -> None:
    url = f"s3://AKIDEXAMPLE:wJalrXUtnFEMIsecret@{bucket}/nojob"
    result = CliRunner().invoke(main, ["analyze", url])
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert "wJalrXUtnFEMIsecret" not in result.output and "AKIDEXAMPLE" not in result.output
    assert "s3://***@" in result.output
    assert remote.shown("https://user:pw@host/x/") == "https://***@host/x"


def test_without_the_remote_extra(sim_job: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "fsspec", None)  # import fsspec then fails
    for args in (["analyze", "s3://bucket/job"], ["ingest", str(sim_job), "-o", "s3://bucket/job"]):
        result = CliRunner().invoke(main, args)
        assert result.exit_code == 1 and "pip install 'paradiag[remote]'" in result.output
        assert "Traceback" not in result.output


@pytest.mark.parametrize(
    "text",
    ["C:\\traces\\job", "C://traces/job", "c:/traces", "runs/x://y", "./s3://x", "job42", "/data/a://b"],
)
def test_paths_are_not_urls(text: str) -> None:
    assert not remote.is_url(text)


def test_urls(tmp_path: Path) -> None:
    assert remote.is_url("s3://bucket/job") and remote.is_url("gcs://b/j") and remote.is_url("file:///tmp/x")
    assert not remote.is_url(Path("s3://bucket/job")) and not remote.is_url(None)


def test_local_folder_with_colon_slashes_is_a_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``runs/x://y`` names the local folder runs/x:/y, not a URL: the CLI parses it as a path."""
    write_job(tmp_path / "runs" / "x:" / "y", ranks=2)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PARADIAG_CACHE_DIR", str(tmp_path / "root"))
    result = CliRunner().invoke(main, ["info", "--json", "runs/x://y"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["source"] == str(tmp_path / "runs" / "x:" / "y")


def test_dask_worker_that_cannot_reach_the_store_is_refused(
    sim_job: Path, bucket: str, s3: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With a cache at a URL the workers need not see the client's folders, but must reach the store: checked
    on every worker before any task is sent, and nothing is committed."""
    distributed = pytest.importorskip("distributed")
    monkeypatch.setattr(remote, "worker_check", lambda url: f"{remote.shown(url)}: access refused (a test)")
    url = f"s3://{bucket}/job"
    with (
        distributed.LocalCluster(
            n_workers=1, processes=False, threads_per_worker=1, dashboard_address=":0"
        ) as cluster,
        pytest.raises(JobError, match=rf"worker .* cannot use the cache: {url}: access refused"),
    ):
        ingest.ingest(sim_job, url, dask=cluster.scheduler_address)
    assert _pointer(s3, url) is None and _entries(s3, url) == []


def test_reader_follows_a_newer_commit(
    sim_job: Path, bucket: str, s3: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reader that read the pointer before a newer ingest committed (and removed the generation it named)
    follows the new pointer instead of failing."""
    url = f"s3://{bucket}/job"
    ingest.ingest(sim_job, url, workers=1)
    old = _pointer(s3, url)
    ingest.ingest(write_job(tmp_path / "other", ranks=2), url, workers=1)
    monkeypatch.setenv("PARADIAG_CACHE_DIR", str(tmp_path / "reader"))
    folder = remote.mirror(remote.connect(url), old)
    assert folder.name == _pointer(s3, url)["generation"].lstrip(".")  # type: ignore[index]
    assert dataset.open_job(str(folder)).source == str(tmp_path / "other")


def test_file_url_and_a_cache_inside_the_source(
    sim_job: Path, local_cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Any fsspec file system serves: file:// here (no server). A URL inside the trace folder is refused as a
    path there is."""
    monkeypatch.setenv("PARADIAG_CACHE_DIR", str(tmp_path / "root"))
    url = f"file://{tmp_path}/store/job"
    job = ingest.ingest(sim_job, url, workers=1)
    assert job.url == url and sorted(p.name for p in (tmp_path / "store" / "job").iterdir()) == sorted(
        [f".{job.cache_dir.name}", remote.POINTER]
    )
    assert_same_cache(tmp_path / "store" / "job" / f".{job.cache_dir.name}", local_cache)
    with pytest.raises(JobError, match="must not be inside the source folder"):
        ingest.ingest(sim_job, f"file://{sim_job}/cache", workers=1)
    assert not (sim_job / "cache").exists()


def test_snapshot_and_the_dashboard_open_a_url(
    sim_job: Path, bucket: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``paradiag snapshot URL`` titles the page by the URL's last part (never a path); the dashboard's served
    job keeps the URL (a Path would collapse its slashes) and opens it."""
    from paradiag.app import jobs
    from paradiag.app.config import Config

    url = f"s3://{bucket}/job42"
    ingest.ingest(sim_job, url, workers=1)
    monkeypatch.setenv("PARADIAG_CACHE_DIR", str(tmp_path / "reader"))
    result = CliRunner().invoke(main, ["snapshot", url, "-o", str(tmp_path / "report.html")])
    assert result.exit_code == 0, result.output
    assert "<title>paradiag: job42</title>" in (tmp_path / "report.html").read_text()
    assert jobs.path_of("served", Config(job=url), "someone") == url
    job = jobs.open_path(url)
    assert job.url == url and job.source == str(sim_job)
    jobs.forget(url)


def test_pool_still_forks_after_talking_to_the_store(bucket: str) -> None:
    """An ingest to a URL reaches the store (fsspec's I/O threads start) before its pool starts: the workers are
    still forked, sharing the client's imports, rather than started by a fork server."""
    code = (
        "import sys; from paradiag import pool, remote; s = remote.connect(sys.argv[1]); remote.read_pointer(s, required=False);"
        " s.fs.ls(s.path.split('/')[0]); print(pool.pool_context().get_start_method())"
    )
    run = subprocess.run(
        [sys.executable, "-c", code, f"s3://{bucket}/job"],
        capture_output=True,
        text=True,
        timeout=120,
        env=os.environ,
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["fork"]


def test_overlapping_ingests_leave_the_last_commit_alone(
    sim_job: Path, bucket: str, s3: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ingest B commits while ingest A is still uploading: A's commit then replaces B's (the last commit wins),
    and removes B's generation rather than leaving it behind."""
    url = f"s3://{bucket}/job"
    ingest.ingest(sim_job, url, workers=1)
    real, nested = remote.Writer.commit, []

    def commit(self: remote.Writer, *args: Any) -> None:
        if not nested:
            nested.append(self.generation)
            ingest.ingest(write_job(tmp_path / "b", ranks=2), url, workers=1)
            assert _pointer(s3, url)["source"] == str(tmp_path / "b")  # type: ignore[index]
        real(self, *args)

    monkeypatch.setattr(remote.Writer, "commit", commit)
    job = ingest.ingest(sim_job, url, workers=1)
    pointer = _pointer(s3, url)
    assert pointer is not None and pointer["source"] == str(sim_job) and pointer["generation"] == nested[0]
    assert _entries(s3, url) == sorted([pointer["generation"], remote.POINTER])
    assert [p.name for p in job.cache_dir.parent.iterdir()] == [job.cache_dir.name]


def test_rank_whose_upload_fails_twice_is_a_problem_and_leaves_no_object(
    sim_job: Path, bucket: str, s3: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One rank's upload dies half-way twice (its events are up, the rest is not): the rank is a problem, as for
    a local storage error, and the commit removes its partial objects: the generation holds the cache's files only."""
    name = sorted(p.name for p in sim_job.glob("*.pt.trace.json"))[1]  # source 1 (sources are sorted by path)
    real, calls = remote.put_files, []

    def put_files(upload: remote.Upload, folder: Path, files: Any) -> list[str]:
        files = list(files)
        if any("part-00001." in f for f in files):
            calls.append(name)
            real(upload, folder, files[:1])
            raise OSError("connection reset while uploading (a test)")
        return real(upload, folder, files)

    monkeypatch.setattr(remote, "put_files", put_files)
    url = f"s3://{bucket}/job"
    job = ingest.ingest(sim_job, url, workers=1)
    assert calls == [name, name] and [(p.source, p.severity) for p in job.problems] == [(name, "error")]
    assert "connection reset" in job.problems[0].message and len(job.rank_ids) == 3
    prefix = f"{bucket}/job/{_pointer(s3, url)['generation']}"  # type: ignore[index]
    there = sorted(p[len(prefix) + 1 :] for p in s3.find(prefix))
    assert there == sorted(str(p.relative_to(job.cache_dir)) for p in job.cache_dir.rglob("*") if p.is_file())


@pytest.mark.parametrize("at_url", [False, True], ids=["folder", "url"])
def test_a_cache_opens_by_one_rule_in_a_folder_and_at_a_url(
    bucket: str, s3: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, at_url: bool
) -> None:
    """paradiag.place: a cache folder and a cache at a URL answer alike. Current: opened, not parsed; its source
    changed: ingested again into the same place; its source gone: opened as it is, and refresh is refused by
    name (a URL's was silently opened as it was)."""
    monkeypatch.setenv("PARADIAG_CACHE_DIR", str(tmp_path / "root"))
    source = write_job(tmp_path / "src", ranks=2)
    where = f"s3://{bucket}/rule" if at_url else str(tmp_path / "cache")
    first = dataset.open_job(source, where, workers=1)
    again = dataset.open_job(where)
    assert again.content_hash == first.content_hash and again.cache_dir == first.cache_dir
    write_job(source, ranks=3)  # the source changes: the cache opened by its place is built again there
    changed = dataset.open_job(where, workers=1)
    assert changed.rank_ids == [0, 1, 2] and changed.content_hash != first.content_hash
    assert (changed.url is not None) is at_url
    shutil.rmtree(source)
    assert dataset.open_job(where).rank_ids == [0, 1, 2]
    with pytest.raises(JobError, match=r"cannot be parsed again: its source .* is no folder"):
        dataset.open_job(where, refresh=True)
