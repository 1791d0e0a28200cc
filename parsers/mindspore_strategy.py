"""MindSpore's parallel strategy file ``parallel_strategy_{rank}.json``: the operators of one rank's compiled graph
with how each input is split across devices (semi-/auto-parallel), its communication group, and for Send/Receive
the peer rank.

Layout (raw MindSpore output, as read by MindInsight's parallel-strategy analyser)::

    {"config": {"rankId": 0, "stageId": 0, "parallelType": "auto_parallel", "stageDevices": [...]},
     "graph": {"node": [{"name": "2", "opType": "Conv2D", "scope": "Default/conv1-Conv2d",
                         "fullName": "Default/conv1-Conv2d/Conv2D-op2", "input": [...],
                         "attribute": [{"name": "gen_strategy", "value": {"dtype": "DT_TUPLE", "values": [...]}},
                                       ...]}, ...]}}

Attribute values are MindSpore IR values (``intVal``, ``strVal``, ``boolVal``, ``floatVal``, nested ``values``).
The shard strategy is the first of ``in_strategy``, ``strategy``, ``gen_strategy`` present: one split vector per
input, e.g. ``[[2,1,1,1],[1,1,1,1]]`` (batch split two ways, the weight whole). Not a per-rank timeline: the
dashboard reads it beside the trace to annotate the execution-flow graph; :mod:`paradiag.discover` does not.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pyarrow as pa

from paradiag.parsers.base import TraceError

STRATEGY_ATTRS = ("in_strategy", "strategy", "gen_strategy")
COMMUNICATION_OPS = frozenset(
    t.lower()
    for t in (
        "AllReduce",
        "AllGather",
        "ReduceScatter",
        "AllToAll",
        "AlltoAll",
        "AllToAllv",
        "AlltoAllV",
        "NeighborExchange",
        "NeighborExchangeV2",
        "Broadcast",
        "Reduce",
        "Send",
        "Receive",
        "BatchISendIRecv",
        "CollectiveScatter",
        "CollectiveGather",
        "Barrier",
    )
)
FILE_PATTERN = "parallel_strategy_*.json"
_RANK_IN_NAME = re.compile(r"parallel_strategy_(\d+)\.json$")

SCHEMA = pa.schema(
    [
        pa.field("rank", pa.int32()),
        pa.field("stage", pa.int32()),
        pa.field("node", pa.string()),  # the node's id in the graph ("2")
        pa.field("op", pa.string()),  # fullName, "Default/conv1-Conv2d/Conv2D-op2"
        pa.field("op_type", pa.string()),
        pa.field("scope", pa.string()),
        pa.field("strategy", pa.string()),  # "[[2,1,1,1],[1,1,1,1]]", null when the op has none
        pa.field("splits", pa.list_(pa.list_(pa.int64()))),  # the same, as split counts per input dimension
        pa.field(
            "strategy_attr", pa.string()
        ),  # which attribute held it (in_strategy, strategy, gen_strategy)
        pa.field("sharded", pa.bool_(), nullable=False),  # some input dimension is split more than once
        pa.field("parallel_group", pa.string()),  # communication group of a communication op
        pa.field("group_ranks", pa.string()),  # "0,1,2,3" when the file lists them
        pa.field("instance_type", pa.string()),  # Redistribution, GradientAggregation, ... when given
        pa.field("is_communication", pa.bool_(), nullable=False),
        pa.field("peer", pa.int32()),  # Send: dest_rank, Receive: src_rank
    ]
)


def rank_of_name(path: str | Path) -> int | None:
    match = _RANK_IN_NAME.search(Path(path).name)
    return int(match.group(1)) if match else None


def read_parallel_strategy(path: str | Path) -> pa.Table:
    """One row per op node of ``path`` (see :data:`SCHEMA`); raises :class:`TraceError` naming the file when it
    cannot be read or is not a parallel strategy file. Missing fields are nulls."""
    path = Path(path)
    try:
        doc = json.loads(path.read_bytes())
    except OSError as exc:
        raise TraceError(path, f"cannot read the parallel strategy file: {exc.strerror or exc}") from exc
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise TraceError(
            path, f"not valid JSON ({exc}); expected a MindSpore parallel_strategy_{{rank}}.json"
        ) from exc
    if not isinstance(doc, dict) or not ("graph" in doc or "config" in doc):
        raise TraceError(path, "not a MindSpore parallel strategy file: no 'config' or 'graph' object")
    config: dict[str, Any] = doc["config"] if isinstance(doc.get("config"), dict) else {}
    rank = _int(config.get("rankId"))
    if rank is None:
        rank = rank_of_name(path)
    stage = _int(config.get("stageId"))
    graph: dict[str, Any] = doc["graph"] if isinstance(doc.get("graph"), dict) else {}
    nodes: list[Any] = graph["node"] if isinstance(graph.get("node"), list) else []
    rows = [_row(n, rank, stage) for n in nodes if isinstance(n, dict)]
    table = pa.Table.from_pylist(rows, schema=SCHEMA)
    meta = {"source": str(path), "parallel_type": str(config.get("parallelType") or "")}
    return table.replace_schema_metadata(meta)


def _row(node: dict[str, Any], rank: int | None, stage: int | None) -> dict[str, Any]:
    attrs = _attributes(node.get("attribute"))
    op_type = _str(node.get("opType") or node.get("type"))
    splits, source = None, None
    for name in STRATEGY_ATTRS:
        if name in attrs:
            splits, source = _splits(attrs[name]), name
            if splits is not None:
                break
    if splits is None and isinstance(node.get("parallel_shard"), str):  # MindInsight's processed form
        splits, source = _splits(_parse_list(node["parallel_shard"])), "parallel_shard"
    comm = (op_type or "").lower() in COMMUNICATION_OPS
    group = node.get("parallel_group")
    if group is None and comm and isinstance(attrs.get("group"), str):  # Conv2D's "group" is an int, not this
        group = attrs["group"]
    ranks = attrs.get("group_rank_ids", attrs.get("rank_list", node.get("parallel_group_rank")))
    peer_key = (
        "dest_rank"
        if (op_type or "").lower() == "send"
        else "src_rank"
        if (op_type or "").lower() == "receive"
        else None
    )
    peer = _int(attrs.get(peer_key, node.get(peer_key))) if peer_key else None
    return {
        "rank": rank,
        "stage": stage,
        "node": _str(node.get("name")),
        "op": _str(node.get("fullName")) or _str(node.get("name")),
        "op_type": op_type,
        "scope": _str(node.get("scope")),
        "strategy": format_splits(splits) if splits is not None else None,
        "splits": splits,
        "strategy_attr": source if splits is not None else None,
        "sharded": any(s > 1 for dims in splits or [] for s in dims),
        "parallel_group": _str(group),
        "group_ranks": ",".join(str(r) for r in ranks) if isinstance(ranks, list) else _str(ranks),
        "instance_type": _str(node.get("instance_type") or node.get("instanceType")) or None,
        "is_communication": comm,
        "peer": peer,
    }


def format_splits(splits: list[list[int]]) -> str:
    """``[[2,1,1,1],[1,1,1,1]]``: one split vector per input."""
    return "[" + ",".join("[" + ",".join(str(s) for s in dims) + "]" for dims in splits) + "]"


def _attributes(raw: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if isinstance(raw, list):
        for a in raw:
            if isinstance(a, dict) and isinstance(a.get("name"), str):
                out[a["name"]] = _value(a.get("value"))
    return out


def _value(v: Any) -> Any:
    """A MindSpore IR attribute value as plain Python (nested tuples/lists as lists)."""
    if not isinstance(v, dict):
        return v
    if "values" in v:
        return [_value(x) for x in v["values"]] if isinstance(v["values"], list) else None
    for key, conv in (
        ("intVal", _int),
        ("strVal", str),
        ("boolVal", bool),
        ("floatVal", float),
        ("doubleVal", float),
    ):
        if key in v:
            try:
                return conv(v[key])
            except (TypeError, ValueError):
                return None
    return None


def _splits(value: Any) -> list[list[int]] | None:
    """A strategy value as split vectors, or None when it is not a list of lists of integers."""
    if not isinstance(value, list):
        return None
    out = []
    for dims in value:
        if not isinstance(dims, list) or not all(
            isinstance(d, int) and not isinstance(d, bool) for d in dims
        ):
            return None
        out.append([int(d) for d in dims])
    return out


def _parse_list(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return None


def _int(v: Any) -> int | None:
    if isinstance(v, bool):
        return None
    try:
        return int(v)
    except (TypeError, ValueError):
        return None


def _str(v: Any) -> str | None:
    return None if v is None else str(v)
