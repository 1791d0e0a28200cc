from __future__ import annotations

import numpy as np
import pyarrow as pa

from paradiag import schema
from paradiag.analysis.breakdown import breakdown_of, device_work
from paradiag.intervals import covered_within, longest_gap_within, merge, union_length


def arr(*values: int) -> np.ndarray:
    return np.array(values, dtype=np.int64)


def test_longest_gap_within_is_the_longest_uncovered_stretch_of_each_window() -> None:
    start, end = arr(0, 10, 12, 40), arr(5, 20, 15, 41)  # covered: [0, 5), [10, 20), [40, 41)
    lo, hi = arr(0, 2, 18, 21, 45), arr(50, 12, 45, 30, 60)
    # [0, 50): holes 5-10, 20-40, 41-50; [2, 12): 5-10; [18, 45): 20-40; [21, 30): all of it; [45, 60): all of it
    assert longest_gap_within(start, end, lo, hi).tolist() == [20, 5, 20, 9, 15]
    assert longest_gap_within(arr(), arr(), arr(3), arr(7)).tolist() == [4]


def test_merge_joins_overlapping_and_touching() -> None:
    s, e = merge(arr(5, 0, 2, 20, 10), arr(8, 3, 4, 30, 12))
    assert s.tolist() == [0, 5, 10, 20]
    assert e.tolist() == [4, 8, 12, 30]
    assert union_length(arr(0, 3), arr(3, 5)) == 5
    assert union_length(arr(), arr()) == 0


def test_covered_within_windows() -> None:
    start, end = arr(0, 10, 15), arr(5, 20, 30)
    got = covered_within(start, end, arr(0, 3, 12, 40), arr(10, 12, 25, 50))
    assert got.tolist() == [5, 4, 13, 0]


def test_breakdown_partitions_the_window() -> None:
    events = schema.build(
        schema.EVENTS,
        {
            "rank": [0] * 5,
            "device": [0, 0, 0, 0, -1],
            "track": [7, 20, 7, 7, 1],
            "kind": ["compute", "communication", "memory", "compute", "host"],
            "category": ["kernel", "kernel", "gpu_memcpy", "kernel", "cpu_op"],
            "name": ["gemm", "nccl", "copy", "gemm", "aten::mm"],
            "start_ns": [0, 50, 100, 130, 0],
            "dur_ns": [60, 70, 20, 20, 1000],
            "step": [1] * 5,
            "correlation": [-1] * 5,
            "external_id": [-1] * 5,
        },
    )
    b = breakdown_of(device_work(events))
    assert b is not None
    assert b.window_ns == 150
    assert b.compute_ns == 80
    assert (b.comm_ns, b.comm_overlapped_ns, b.comm_exposed_ns) == (70, 10, 60)
    assert b.memory_exposed_ns == 0  # hidden under communication
    assert b.idle_ns == 150 - 140
    assert b.overlap_ratio == 10 / 70
    assert isinstance(events.column("kind").type, pa.DictionaryType)
