"""The streamed Kineto decode gives the same tables wherever the text is cut: slices are decoded in place (the bytes
around a slice become its brackets), names are dictionary-encoded per chunk, and the chunks are merged at the end."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pyarrow as pa
import pytest

from paradiag.parsers import json_stream, kineto, kineto_decode
from tests.conftest import shared_path


def _plain(table: pa.Table) -> pa.Table:
    """The table with dictionary columns decoded: equal values, whatever the dictionaries' order."""
    return pa.table(
        {
            f.name: table.column(f.name).cast(f.type.value_type)
            if pa.types.is_dictionary(f.type)
            else table.column(f.name)
            for f in table.schema
        }
    )


def _same(a: kineto.ParsedRank, b: kineto.ParsedRank) -> None:
    assert _plain(a.events).equals(_plain(b.events))
    assert a.steps.equals(b.steps)
    assert (a.rank, a.device, a.world_size, a.warnings) == (b.rank, b.device, b.world_size, b.warnings)
    assert a.groups == b.groups


def test_small_slices_and_blocks_give_the_same_tables(monkeypatch: pytest.MonkeyPatch) -> None:
    """A real trace with collectives (record_param_comms on the host, kernels matched by External id across slices)."""
    path = shared_path("gpu", "hta_nccl_2rank_job") / "nccl_data.json.gz"
    whole = kineto.parse(path)
    monkeypatch.setattr(
        json_stream, "SLICE", 16_000
    )  # a few dozen events a slice: thousands of cuts and decodes
    monkeypatch.setattr(
        json_stream, "BLOCK", 40_000
    )  # the decoded text is dropped from the front every few slices
    cut = kineto.parse(path)
    _same(whole, cut)
    assert cut.events.num_rows > 20_000
    assert cut.events.column("collective").null_count < cut.events.num_rows


def test_pretty_printed_trace_reads_like_the_compact_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Real profilers indent their JSON: whitespace and newlines sit around every cut."""
    doc = json.loads(
        gzip.decompress(
            (shared_path("gpu", "hta_sampled_128rank_job") / "sampled_rank-0.json.gz").read_bytes()
        )
    )
    compact, pretty = tmp_path / "compact" / "rank0.json", tmp_path / "pretty" / "rank0.json"
    for path, text in (
        (compact, json.dumps(doc, separators=(",", ":"))),
        (pretty, json.dumps(doc, indent=4)),
    ):
        path.parent.mkdir()
        path.write_text(text)
    monkeypatch.setattr(json_stream, "SLICE", 8000)
    monkeypatch.setattr(json_stream, "BLOCK", 20_000)
    _same(kineto.parse(compact), kineto.parse(pretty))


def test_a_bad_value_in_a_late_slice_is_read_leniently(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The lenient decoder reads the same in-place slice; the rest of the file is untouched by the retry."""
    events = [
        {"ph": "X", "cat": "cpu_op", "name": f"op{i}", "pid": 1, "tid": 1, "ts": 10 * i, "dur": 5}
        for i in range(200)
    ]
    events[150]["args"] = {"correlation": "7"}  # a string where a number is expected
    path = tmp_path / "rank0.json"
    path.write_text(json.dumps({"traceEvents": events, "distributedInfo": {"rank": 0}}))
    monkeypatch.setattr(json_stream, "SLICE", 400)
    monkeypatch.setattr(json_stream, "BLOCK", 900)
    parsed = kineto.parse(path)
    assert parsed.events.num_rows == 200
    assert parsed.events.column("name").cast(pa.string()).to_pylist() == [f"op{i}" for i in range(200)]
    assert parsed.events.column("correlation").to_pylist()[150] == 7
    assert any("read leniently" in w for w in parsed.warnings)


def test_events_of_an_unknown_phase_or_none_are_skipped_without_a_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Slices are first decoded with the Chrome trace format's phases spelled out (the others' fields are skipped
    unread); a slice with a phase outside them, or an event without one, is decoded again the general way: the
    same complete events, and nothing is reported as read leniently."""
    events = [
        {"ph": "X", "cat": "cpu_op", "name": f"op{i}", "pid": 1, "tid": 1, "ts": 10 * i, "dur": 5}
        for i in range(200)
    ]
    flows = [
        {"ph": "f", "id": i, "pid": 1, "tid": 1, "ts": 10 * i, "cat": "ac2g", "name": "ac2g", "bp": "e"}
        for i in range(0, 200, 3)
    ]
    odd = [{"ph": "Z", "name": "a phase no format defines", "ts": 5}, {"name": "no phase", "ts": 7, "dur": 1}]
    plain, mixed = tmp_path / "plain" / "rank0.json", tmp_path / "mixed" / "rank0.json"
    for path, items in ((plain, events), (mixed, [*events[:100], *flows, *odd, *events[100:]])):
        path.parent.mkdir()
        path.write_text(json.dumps({"traceEvents": items, "distributedInfo": {"rank": 0}}))
    monkeypatch.setattr(json_stream, "SLICE", 2000)
    monkeypatch.setattr(json_stream, "BLOCK", 5000)
    parsed = kineto.parse(mixed)
    _same(kineto.parse(plain), parsed)
    assert parsed.events.num_rows == 200
    assert parsed.warnings == []


def test_a_phase_on_every_slice_that_the_first_decoder_does_not_know(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A trace whose every slice holds a phase outside the Chrome trace format's: the general decoder reads it like
    the same trace without them, and the first decoder is given up after a few slices instead of failing on all."""
    monkeypatch.setattr(json_stream, "SLICE", 2000)
    monkeypatch.setattr(json_stream, "BLOCK", 5000)
    tried: list[int] = []
    first = kineto_decode.EVENTS_DECODERS[0]

    class Counting:
        def decode(self, text: memoryview) -> object:
            tried.append(1)
            return first.decode(text)

    monkeypatch.setattr(kineto, "EVENTS_DECODERS", (Counting(), *kineto_decode.EVENTS_DECODERS[1:]))
    events = [
        {"ph": "X", "cat": "cpu_op", "name": f"op{i}", "pid": 1, "tid": 1, "ts": 10 * i, "dur": 5}
        for i in range(300)
    ]
    odd = [{"ph": "Q", "name": "a new profiler's phase", "ts": 10 * i} for i in range(300)]
    plain, mixed = tmp_path / "plain" / "rank0.json", tmp_path / "mixed" / "rank0.json"
    for path, items in (
        (plain, events),
        (mixed, [e for pair in zip(events, odd, strict=True) for e in pair]),
    ):
        path.parent.mkdir()
        path.write_text(json.dumps({"traceEvents": items, "distributedInfo": {"rank": 0}}))
    parsed = kineto.parse(mixed)
    assert len(tried) == json_stream.MAX_MISSES  # then the general decoder alone
    _same(kineto.parse(plain), parsed)
    assert parsed.warnings == []
