"""The execution-flow graph: per stage, the operators in execution order, cut into nodes at communication
operators, with repeated runs of nodes (the model's layers) collapsed into one block, and the pipeline passes of
one direction (the micro-batches, from the analysis' passes) collapsed into one block of passes.

The passes are what repeats in a pipelined step, and they do not repeat exactly (the first micro-batch waits for
its input differently, the last stage's passes hold the LM head, 1F1B interleaves forward and backward passes), so
exact repeat detection on the whole sequence leaves hundreds of nodes. Grouping by pass needs no exact repeat: a
stage shows what runs before its first pass, one block per direction (and model chunk) holding its passes, each
pass a block of its collapsed layers, and what runs after its last pass (the optimizer).

Built from the trace: the operator instances of a step common to every device of the stage (the Marey bands), so
each node's time is known on every device and its imbalance is max / median over them. Where the job's folder held
MindSpore ``parallel_strategy_{rank}.json`` files (read at ingest into the cache: ``paradiag.side_inputs``), their operators are matched
to the nodes' operators (by full name, else by operator type in execution order) and the nodes carry the shard
strategy of what they hold.
"""

from __future__ import annotations

import re
from typing import Any, NotRequired, TypedDict

import numpy as np

from paradiag.app import store
from paradiag.app.data import common
from paradiag.app.data.common import origin_ns
from paradiag.app.data.findings import findings_of
from paradiag.app.data.marey import p2p_pairs, step_bands
from paradiag.app.data.mesh import mesh_of
from paradiag.app.data.shapes import FlowData, FlowNode, FlowStage, P2PPair
from paradiag.app.figures.common import short_name
from paradiag.job import Job

MAX_PERIOD = 48  # nodes in a repeated unit (a micro-batch pass of a few layers with TP collectives)
COMPUTING = ("compute", "memory", "block")
NESTING = 3  # levels of blocks within blocks
VISIBLE = 40  # nodes a stage's row opens with at most (readable in a 1600 px wide window)
_NUMBERED = re.compile(r"[_\d]+$")  # hcom_send__951_4_1 and hcom_send__951_5_1 are the same operator
TYPE_WINDOW = 32  # how far ahead in the strategy's op list a match by type may look
MAX_STRATEGY_LINES = 4  # strategies listed per node
_OP_SUFFIX = re.compile(r"-op\d+.*$")  # Default/conv1-Conv2d/Conv2D-op2 -> Conv2D
_VERSION = re.compile(r"v\d+$")  # MatMulV2, LayerNormV4 -> matmul, layernorm

# A node while the graph is built: FlowNode's figures, less its span (its first start and last end, ns, instead),
# with its signature (what makes two nodes repeats of each other) and its pipeline pass ("pass" is a keyword).
_Node = TypedDict(
    "_Node",
    {
        "kind": str,
        "signature": tuple[Any, ...],
        "label": str,
        "operators": list[str],
        "time_ms": float,
        "imbalance": float,
        "slowest_rank": int,
        "repeat": int,
        "lo": int,
        "hi": int,
        "pass": NotRequired[str],
        "contains": NotRequired[list[str]],
        "members": NotRequired[list["_Node"]],
        "strategy": NotRequired[list[str]],
        "sharded": NotRequired[bool],
    },
)


def flow_data(job: Job, step: int, expand: bool = False) -> FlowData:
    """Per stage, the nodes (or collapsed blocks, each holding its ``members``) in execution order, and the
    stage the top finding is about; computed once per job, step and expansion."""
    return store.memo("flow", job, [step, expand], lambda: _flow_data(job, step, expand))


def flow_view(job: Job, step: int, opened: list[str] | None = None, expand_all: bool = False) -> FlowData:
    """What the figure draws: the collapsed graph with the ``opened`` blocks (keys "stage:index") replaced by
    their nodes, or every block open."""
    data = flow_data(job, step, expand_all)
    keys = set(opened or [])
    return {**data, "stages": [{**st, "nodes": _opened(st["nodes"], keys)} for st in data["stages"]]}


def _opened(nodes: list[FlowNode], keys: set[str], within: str | None = None) -> list[FlowNode]:
    out: list[FlowNode] = []
    for n in nodes:
        if n.get("key") in keys:
            out += _opened(n.get("members", []), keys, n.get("key"))
        else:
            drawn = n.copy()
            drawn.pop("members", None)
            if within:
                drawn["within"] = within
            out.append(drawn)
    return out


def _finish(node: _Node, key: str, t0: int) -> FlowNode:
    """A node as drawn: its span in ms since the job origin; a block's key (stage:index, then .index per nesting
    level)."""
    out: FlowNode = {
        "kind": node["kind"],
        "label": node["label"],
        "operators": node["operators"],
        "time_ms": node["time_ms"],
        "imbalance": node["imbalance"],
        "slowest_rank": node["slowest_rank"],
        "repeat": node["repeat"],
        "span_ms": [round((node["lo"] - t0) / 1e6, 6), round((node["hi"] - t0) / 1e6, 6)],
    }
    if "contains" in node:
        out["contains"] = node["contains"]
    if "strategy" in node:
        out["strategy"] = node["strategy"]
    if "sharded" in node:
        out["sharded"] = node["sharded"]
    if node["kind"] == "block":
        out["key"] = key
        out["members"] = [_finish(m, f"{key}.{j}", t0) for j, m in enumerate(node.get("members", []))]
    return out


def flow_p2p(job: Job, step: int) -> list[P2PPair]:
    """The step's send/recv pairs the graph draws: those of each stage's first device (its devices send alike)."""
    mesh = mesh_of(job)
    return p2p_pairs(job, step, [mesh.ranks_of_stage(s)[0] for s in mesh.stages])


def _culprit_stage(job: Job) -> int | None:
    """The stage of what the top finding is about (its stage, else its first rank's)."""
    found = findings_of(job)
    if not found:
        return None
    top = found[0]
    if top.get("stage") is not None:
        return int(top["stage"])
    return mesh_of(job).stage.get(int(top["ranks"][0])) if top.get("ranks") else None


def _flow_data(job: Job, step: int, expand: bool) -> FlowData:
    bands = step_bands(job, step)
    mesh = mesh_of(job)
    t0 = origin_ns(job)
    strategy = common.strategy(job)
    rows = []
    matched = 0
    for st in bands["stages"]:
        nodes = _segments(st)
        if strategy["files"]:
            matched += _annotate(nodes, _stage_strategy(strategy, st["stage"], st["ranks"]))
        rows.append(nodes if expand else _by_pass(nodes))
    stages: list[FlowStage] = []
    for st, blocks in zip(bands["stages"], rows if expand else _open_passes(rows), strict=True):
        drawn = [_finish(b, f"{st['stage']}:{i}", t0) for i, b in enumerate(blocks)]
        ranks = st.get(
            "all_ranks", st["ranks"]
        )  # a node's times are over the devices read (marey.read_ranks)
        stages.append(
            {
                "stage": st["stage"],
                "ranks": ranks,
                "tp": len({mesh.tp[r] for r in ranks}),
                "dp": len({mesh.dp[r] for r in ranks}),
                "nodes": drawn,
            }
        )
    out: FlowData = {"step": step, "stages": stages, "culprit_stage": _culprit_stage(job)}
    if strategy["files"] or strategy["problems"]:
        out["strategy"] = {"files": strategy["files"], "problems": strategy["problems"], "matched": matched}
    return out


def _stage_strategy(strategy: dict[str, Any], stage: int, ranks: list[int]) -> list[dict[str, Any]]:
    """The op rows for a stage: those of the first of its ranks that has a file, else of a file for that stage."""
    ops: dict[int, list[dict[str, Any]]] = strategy["ops"]
    for r in ranks:
        if r in ops:
            return ops[r]
    for r, s in sorted(strategy["stage_of"].items()):
        if s == stage:
            return ops[r]
    return []


def op_type_key(name: str) -> str:
    """An operator's type from its trace or graph name, comparable across the two: MindSpore full names
    (``Default/conv1-Conv2d/Conv2D-op2``), CANN kernel names (``aclnnMm_MatMulCommon_MatMulV2``), HCCL tasks
    (``hcom_allReduce__951_0_1``) and graph op types (``AllReduce``, ``MatMulV2``) -> ``conv2d``, ``matmul``,
    ``allreduce``."""
    base = _OP_SUFFIX.sub("", name.rsplit("/", 1)[-1])
    low = base.lower()
    if low.startswith("hcom_"):
        word = low[5:].split("_", 1)[0]
        return "receive" if word in ("recv", "receive") else word
    parts = [p for p in base.split("_") if p]
    low = (parts[-1] if parts else base).lower()
    return _VERSION.sub("", low.removesuffix("aicore"))


def _annotate(nodes: list[_Node], rows: list[dict[str, Any]]) -> int:
    """Give each node the strategy rows its operators match (by full name, else the next row of the same type
    within :data:`TYPE_WINDOW` rows in execution order); returns how many operator instances matched."""
    useful = [r for r in rows if r["strategy"] is not None or r["is_communication"]]
    if not useful:
        return 0
    by_name: dict[str, dict[str, Any]] = {}
    for r in useful:
        if r["op"]:
            by_name.setdefault(r["op"], r)
            by_name.setdefault(r["op"].rsplit("/", 1)[-1], r)
    keys = [op_type_key(r["op_type"] or "") for r in useful]
    pointer = 0
    matched = 0
    for node in nodes:
        found: list[dict[str, Any]] = []
        for name in node["operators"]:
            row = by_name.get(name) or by_name.get(name.rsplit("/", 1)[-1])
            if row is None:
                key = op_type_key(name)
                for j in range(pointer, min(len(useful), pointer + TYPE_WINDOW)):
                    if keys[j] == key:
                        row, pointer = useful[j], j + 1
                        break
            if row is not None:
                found.append(row)
                matched += 1
        if found:
            node["strategy"] = _strategy_lines(found)
            node["sharded"] = any(r["sharded"] for r in found)
    return matched


def _strategy_lines(rows: list[dict[str, Any]]) -> list[str]:
    """``Conv2D [[2,1,1,1],[1,1,1,1]]``, ``AllReduce group 4-5-6-7``, ``Send → 4``: distinct, at most a few."""
    lines: dict[str, None] = {}
    for r in rows:
        text = r["op_type"] or r["op"] or "?"
        if r["strategy"] is not None:
            text += f" {r['strategy']}"
        if r["parallel_group"]:
            text += f" group {r['parallel_group']}"
        if r["peer"] is not None:
            text += f" {'→' if (r['op_type'] or '').lower() == 'send' else '←'} {r['peer']}"
        lines[text] = None
    return list(lines)[:MAX_STRATEGY_LINES] + (
        [f"… {len(lines) - MAX_STRATEGY_LINES} more"] if len(lines) > MAX_STRATEGY_LINES else []
    )


def _segments(st: dict[str, Any]) -> list[_Node]:
    """Runs of compute bands end at each communication band and where the pipeline pass changes (the last
    stage's forward pass runs straight into its backward one); every communication band is a node of its own.
    Each node's time per device is summed over its bands at once (runs are contiguous bands)."""
    n = len(st["category"])
    if not n or not st["start"].shape[1]:
        return []
    passes = st.get("pass") or [""] * n
    runs: list[tuple[int, int, str]] = []  # first band, end, kind
    first: int | None = None
    for i, cat in enumerate(st["category"]):
        computing = cat in ("compute", "memory")
        if first is not None and (not computing or passes[i] != passes[first]):
            runs.append((first, i, "compute"))
            first = None
        if computing:
            first = i if first is None else first
        else:
            runs.append((i, i + 1, cat))
    if first is not None:
        runs.append((first, n, "compute"))
    at = np.array([r[0] for r in runs], dtype=np.int64)
    dur = st["end"] - st["start"]
    per_rank = np.add.reduceat(dur, at, axis=0)  # nodes x devices
    figures = {
        "median": np.median(per_rank, axis=1).tolist(),
        "max": per_rank.max(axis=1).tolist(),
        "slowest": np.asarray(st["ranks"])[per_rank.argmax(axis=1)].tolist(),
        "lo": np.minimum.reduceat(st["start"].min(axis=1), at).tolist(),
        "hi": np.maximum.reduceat(st["end"].max(axis=1), at).tolist(),
    }
    mean_dur = dur.mean(axis=1).tolist()
    plain: dict[str, str] = {}  # name -> without its numbering, once per name
    return [
        _node(st, a, b, kind, {k: v[j] for k, v in figures.items()}, mean_dur, plain, passes[a])
        for j, (a, b, kind) in enumerate(runs)
    ]


def _node(
    st: dict[str, Any],
    a: int,
    b: int,
    kind: str,
    figures: dict[str, Any],
    mean_dur: list[float],
    plain: dict[str, str],
    label: str,
) -> _Node:
    """A node of the bands a..b-1; it is named after the operator holding most of its time (``mean_dur``: each
    band's mean time over the devices). ``figures``: its median and largest time over the devices, the slowest
    device, its first start and last end."""
    names = st["names"][a:b]
    time_of: dict[str, float] = {}
    for name, d in zip(names, mean_dur[a:b], strict=True):
        time_of[name] = time_of.get(name, 0.0) + d
    main = max(time_of, key=time_of.__getitem__)
    median = figures["median"]
    for name in time_of:
        if name not in plain:
            plain[name] = _NUMBERED.sub("", name)
    return {
        "kind": kind,
        "signature": (kind, tuple(plain[n] for n in names)),
        "label": short_name(main, 28) + (f" +{b - a - 1}" if b - a > 1 else ""),
        "operators": names,
        "time_ms": float(median) / 1e6,
        "imbalance": float(figures["max"] / median) if median else 1.0,
        "slowest_rank": int(figures["slowest"]),
        "repeat": 1,
        "lo": int(figures["lo"]),
        "hi": int(figures["hi"]),
        "pass": label,
    }


def _by_pass(nodes: list[_Node]) -> list[_Node]:
    """What runs before the first pass, a block per direction (and model chunk) of the passes, what runs after
    the last pass; each part with its repeats collapsed. Nodes outside every pass between two passes (the
    pipeline's sends and receives) go with the pass before them. Without passes (no pipeline), repeats only."""
    labelled = [i for i, n in enumerate(nodes) if n["pass"]]
    if not labelled:
        return _collapse_nested(nodes)
    first, last = labelled[0], labelled[-1]
    passes: list[tuple[str, list[_Node]]] = []
    for n in nodes[first : last + 1]:
        if n["pass"] and (not passes or passes[-1][0] != n["pass"]):
            passes.append((n["pass"], []))
        passes[-1][1].append(n)
    by_key: dict[str, list[_Node]] = {}
    for label, members in passes:
        by_key.setdefault(_direction(label), []).append(_pass_block(label, _collapse_nested(members)))
    groups = [_passes_block(key, blocks) if len(blocks) > 1 else blocks[0] for key, blocks in by_key.items()]
    return _collapse_nested(nodes[:first]) + groups + _collapse_nested(nodes[last + 1 :])


def _open_passes(rows: list[list[_Node]]) -> list[list[_Node]]:
    """The stages' rows with their blocks of passes opened (a pipeline: its micro-batches), or where each
    direction is one pass (no pipeline) that pass (its layers), when every row stays within VISIBLE nodes (all
    stages alike, so that their rows compare)."""
    pipelined = any(n["signature"][0] == "passes" for row in rows for n in row)
    level = "passes" if pipelined else "pass"
    opened = [[m for n in row for m in (n["members"] if n["signature"][0] == level else [n])] for row in rows]
    return opened if max(map(len, opened), default=0) <= VISIBLE else rows


def _direction(label: str) -> str:
    """ "F3" -> "forward", "B3 c1" -> "backward chunk 1"."""
    _, _, chunk = label.partition(" c")
    return ("forward" if label[0] == "F" else "backward") + (f" chunk {chunk}" if chunk else "")


def _pass_block(label: str, members: list[_Node]) -> _Node:
    """One pass: a block of its (collapsed) nodes."""
    mb = label[1:].partition(" c")[0]
    signature = ("pass", _direction(label), tuple(m["signature"] for m in members))
    return _group(members, f"{_direction(label)} micro-batch {mb}", 1, signature)


def _passes_block(key: str, blocks: list[_Node]) -> _Node:
    """The passes of one direction: a block whose members are its passes, alike neighbours collapsed (into a block
    named after the micro-batches it holds)."""
    members = _collapse(blocks)
    for m in members:
        if m["signature"][0] == "block":
            m["label"] = (
                f"{key} micro-batches {m['members'][0]['label'].rsplit(' ', 1)[1]}–{m['members'][-1]['label'].rsplit(' ', 1)[1]}"
            )
    return _group(members, f"{key} ×{len(blocks)} micro-batches", len(blocks), ("passes", key, len(blocks)))


def _collapse(nodes: list[_Node]) -> list[_Node]:
    """Consecutive repeats of the same run of node signatures become one block ``×n``."""
    out: list[_Node] = []
    i = 0
    while i < len(nodes):
        period, repeats = _best_period(nodes, i)
        if repeats < 2:
            out.append(nodes[i])
            i += 1
            continue
        members = nodes[i : i + period * repeats]
        out.append(_block(members, period, repeats))
        i += period * repeats
    return out


def _collapse_nested(nodes: list[_Node]) -> list[_Node]:
    """Repeats collapsed, then repeats of what that left (a micro-batch's pass holding a block of layers), up to
    NESTING levels."""
    for _ in range(NESTING):
        out = _collapse(nodes)
        if len(out) == len(nodes):
            break
        nodes = out
    return nodes


def _best_period(nodes: list[_Node], i: int) -> tuple[int, int]:
    best = (1, 1)
    for p in range(1, min(MAX_PERIOD, (len(nodes) - i) // 2) + 1):
        unit = [n["signature"] for n in nodes[i : i + p]]
        k = 1
        while [n["signature"] for n in nodes[i + k * p : i + (k + 1) * p]] == unit:
            k += 1
        if k >= 2 and k * p > best[0] * best[1]:
            best = (p, k)
    return best


def _block(members: list[_Node], period: int, repeats: int) -> _Node:
    """A run of repeats."""
    return _group(
        members,
        f"{period} nodes ×{repeats}",
        repeats,
        ("block", tuple(m["signature"] for m in members[:period]), repeats),
    )


def _group(members: list[_Node], label: str, repeats: int, signature: tuple[Any, ...]) -> _Node:
    """A block holding ``members``; its imbalance is its worst computing member's (a communication node's spread
    over the devices is mostly some waiting for the others)."""
    kinds = {m["kind"] for m in members}
    computing = [m for m in members if m["kind"] in COMPUTING] or members
    worst = max(computing, key=lambda m: m["imbalance"])
    block: _Node = {
        "kind": "block",
        "signature": signature,
        "label": label,
        "operators": list(dict.fromkeys(op for m in members for op in m["operators"])),
        "time_ms": sum(m["time_ms"] for m in members),
        "imbalance": worst["imbalance"],
        "slowest_rank": worst["slowest_rank"],
        "repeat": repeats,
        "contains": sorted(kinds),
        "members": members,
        "lo": min(m["lo"] for m in members),
        "hi": max(m["hi"] for m in members),
    }
    lines = list(
        dict.fromkeys(line for m in members for line in m.get("strategy", []) if not line.startswith("…"))
    )
    if lines:
        more = [f"… {len(lines) - MAX_STRATEGY_LINES} more"] if len(lines) > MAX_STRATEGY_LINES else []
        block["strategy"] = lines[:MAX_STRATEGY_LINES] + more
        block["sharded"] = any(m.get("sharded", False) for m in members)
    return block
