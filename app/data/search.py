"""Free-text search of a step's events by name (any event the traces hold: kernels, copies, host operators,
annotations), for the timeline's search box."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from paradiag.app.data.common import origin_ns, read_events, step_span
from paradiag.app.data.shapes import SearchResult
from paradiag.job import Job

MAX_MATCHES = 12  # events listed (the shown ranks' first, then the others', earliest first)
MAX_NAMES = 8  # distinct names matched, most frequent first
MAX_QUERY = 200


def search_events(job: Job, step: int, text: str, first: list[int] | None = None) -> SearchResult:
    """The events of ``step`` whose name holds ``text`` (case ignored): how many, the names matched (with their
    count and total time), and up to MAX_MATCHES of them (``first``'s ranks before the others'), each with its
    rank, kind, start (ms since the job's first step) and duration (µs)."""
    text = text.strip()[:MAX_QUERY]
    out: SearchResult = {"text": text, "step": step, "count": 0, "names": [], "matches": []}
    if not text:
        return out
    lo, hi = step_span(job, step)
    events = read_events(job, start_ns=lo, end_ns=hi, columns=["rank", "kind", "name", "start_ns", "dur_ns"])
    if not events.num_rows:
        return out
    found = events.filter(_matching(events.column("name"), text))
    out["count"] = found.num_rows
    if not found.num_rows:
        return out
    by_name = found.group_by("name").aggregate([("dur_ns", "sum"), ("dur_ns", "count")])
    order = np.argsort(-np.asarray(by_name.column("dur_ns_count").to_numpy()), kind="stable")[:MAX_NAMES]
    out["names"] = [
        {
            "name": str(by_name.column("name")[int(i)].as_py()),
            "count": int(by_name.column("dur_ns_count")[int(i)].as_py()),
            "total_ms": by_name.column("dur_ns_sum")[int(i)].as_py() / 1e6,
        }
        for i in order
    ]
    rank, start = found.column("rank").to_numpy(), found.column("start_ns").to_numpy()
    other = ~np.isin(rank, np.asarray(first or [], dtype=rank.dtype))
    pick = np.lexsort((start, other))[:MAX_MATCHES]
    data = found.take(pa.array(pick)).select(["rank", "kind", "name", "start_ns", "dur_ns"]).to_pydict()
    t0 = origin_ns(job)
    out["matches"] = [
        {
            "rank": int(data["rank"][i]),
            "kind": str(data["kind"][i]),
            "name": str(data["name"][i]),
            "start_ms": (data["start_ns"][i] - t0) / 1e6,
            "dur_us": data["dur_ns"][i] / 1e3,
        }
        for i in range(len(pick))
    ]
    return out


def _matching(names: pa.ChunkedArray, text: str) -> pa.ChunkedArray:
    """Which ``names`` hold ``text`` (case ignored). Names are dictionary-encoded: each chunk's distinct names are
    matched once and its rows picked by their index (a step of 256 ranks: 0.04 s, not 0.4 s casting 830k names)."""
    masks = []
    for chunk in names.chunks:
        if pa.types.is_dictionary(chunk.type):
            hit = pc.fill_null(pc.match_substring(chunk.dictionary, text, ignore_case=True), False)
            idx = pa.array(np.flatnonzero(hit.to_numpy(zero_copy_only=False)), type=chunk.indices.type)
            masks.append(pc.fill_null(pc.is_in(chunk.indices, value_set=idx), False))
        else:
            masks.append(
                pc.fill_null(pc.match_substring(chunk.cast(pa.string()), text, ignore_case=True), False)
            )
    return pa.chunked_array(masks, type=pa.bool_())
