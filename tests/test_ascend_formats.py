"""CANN msprof ``PROF_*`` and MindSpore ``*_ascend_ms`` folders. No real samples of either are shared: the
folders are made from a real torch_npu rank (format notes: ../shared/formats/ascend.md sections 2 and 3)."""

from __future__ import annotations

import shutil
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from paradiag import schema
from paradiag.parsers import ascend, mindspore, msprof
from tests.helpers import make_prof

NPU = Path(__file__).resolve().parents[1].parent / "shared" / "traces" / "npu"
RANK = NPU / "msinsight_alexnet_dp8_text_level1" / "rank0_ascend_pt"

pytestmark = [
    pytest.mark.real,
    pytest.mark.skipif(not NPU.is_dir(), reason=f"shared NPU traces not found at {NPU}"),
]


def test_msprof_folder(tmp_path: Path) -> None:
    prof = make_prof(tmp_path, RANK)
    assert msprof.detect(prof) and not ascend.detect(prof) and not mindspore.detect(prof)
    parsed = msprof.parse(prof, tmp_path)
    assert parsed.format == "msprof" and parsed.source == prof.name and parsed.rank is None
    kinds = Counter(parsed.events.column("kind").cast(pa.string()).to_pylist())
    assert kinds[schema.COMPUTE] == 187 and kinds[schema.COMMUNICATION] == 4
    assert kinds[schema.ANNOTATION] == 4  # no ProfilerStep: the step comes from step_trace
    assert parsed.steps.column("step").to_pylist() == [50]
    compute = parsed.events.filter(pc.equal(parsed.events.column("kind").cast(pa.string()), "compute"))
    assert set(compute.column("step").to_pylist()) == {50}
    assert (
        parsed.extra["kernels"].num_rows == 191
        and parsed.extra["kernels"].column("block_dim").null_count == 0
    )
    assert parsed.extra["comm_tasks"].num_rows == 296
    assert any("rank assigned" in w for w in parsed.warnings)


def test_prof_folder_inside_a_torch_npu_rank_is_not_a_source(tmp_path: Path) -> None:
    rank = tmp_path / "host_1_20250101000000000_ascend_pt"
    rank.mkdir()
    assert not msprof.detect(make_prof(rank, RANK))


def test_mindspore_folder_reads_like_torch_npu(tmp_path: Path) -> None:
    folder = tmp_path / "worker_77_20250101000000000_ascend_ms"
    shutil.copytree(RANK, folder)
    assert mindspore.detect(folder) and not ascend.detect(folder)
    parsed = mindspore.parse(folder, tmp_path)
    reference = ascend.parse(RANK, RANK.parent)
    assert parsed.format == "mindspore_ascend_text" and parsed.host == "worker"
    assert parsed.events.num_rows == reference.events.num_rows
    assert parsed.events.column("start_ns").equals(reference.events.column("start_ns"))


def test_a_rank_folder_is_a_one_rank_job(tmp_path: Path) -> None:
    import paradiag

    job = paradiag.open(RANK, cache_dir=tmp_path / "cache")
    assert job.rank_ids == [0]
    assert job.ranks.column("format").to_pylist() == ["ascend_text"]
    assert job.ranks.column("world_size").to_pylist() == [8]


def test_old_layouts_are_named_in_one_line(tmp_path: Path) -> None:
    """CANN <= 6.3 PROF_*/device_*/data and MindSpore <= 2.2 profiler/ folders: one line each, not one per file."""
    import paradiag
    from paradiag.cache import JobError

    prof = tmp_path / "cann" / "PROF_000001_20230101000000000_ABCDEFGH" / "device_0"
    (prof / "data").mkdir(parents=True)
    (prof / "timeline").mkdir()
    for i in range(40):
        (prof / "timeline" / f"task_time_{i}.json").write_text('{"not": "kineto"}')
    legacy = tmp_path / "mindspore" / "profiler"
    legacy.mkdir(parents=True)
    for rank in range(8):
        (legacy / f"ascend_timeline_display_{rank}.json").write_text("[]")
        (legacy / f"flops_summary_{rank}.json").write_text("{}")
        (legacy / f"step_trace_raw_{rank}_detail_time.csv").write_text("step_num,start_point\n")
    for folder, says in (
        (tmp_path / "cann", "CANN <= 6.3"),
        (tmp_path / "mindspore", "MindSpore <= 2.2"),
        (legacy, "MindSpore <= 2.2"),
    ):
        with pytest.raises(JobError) as raised:
            paradiag.open(folder, cache_dir=tmp_path / f"cache-{folder.name}")
        message = str(raised.value)
        assert says in message and "not read" in message
        assert message.count("error:") == 1 and len(message) < 400 and "PyTorch" not in message
