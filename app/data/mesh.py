"""Each rank's place in the parallel mesh: pipeline stage, data-parallel and tensor-parallel index.

From the ranks table when the trace says (Ascend metadata), else from the group descriptions Megatron-style jobs
record (``PIPELINE_MODEL_PARALLEL_GROUP`` ...), else from who sends to whom first (p2p chains), else one stage.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc

from paradiag.dataset import Job

_AXES = {"pp": ("PIPELINE", "pp"), "dp": ("DATA_PARALLEL", "dp"), "tp": ("TENSOR", "tp")}


@dataclass
class Mesh:
    """Ranks in display order (stage, then DP, then TP) with their coordinates."""

    ranks: list[int]
    stage: dict[int, int]
    dp: dict[int, int]
    tp: dict[int, int]
    found_by: str
    tp_groups: list[list[int]] = field(default_factory=list)

    @property
    def stages(self) -> list[int]:
        return sorted(set(self.stage.values()))

    def ranks_of_stage(self, stage: int) -> list[int]:
        return [r for r in self.ranks if self.stage[r] == stage]

    def as_dict(self) -> dict[str, object]:
        return {"ranks": self.ranks, "stage": self.stage, "dp": self.dp, "tp": self.tp, "found_by": self.found_by}


def mesh_of(job: Job) -> Mesh:
    ranks = job.rank_ids
    coords, found_by = _from_metadata(job), "metadata"
    if coords is None:
        coords, found_by = _from_groups(job, ranks), "group names"
    if coords is None:
        coords, found_by = _from_p2p(job, ranks), "p2p order"
    order = sorted(ranks, key=lambda r: (coords["pp"].get(r, 0), coords["dp"].get(r, 0), coords["tp"].get(r, 0), r))
    return Mesh(
        ranks=order,
        stage={r: coords["pp"].get(r, 0) for r in ranks},
        dp={r: coords["dp"].get(r, 0) for r in ranks},
        tp={r: coords["tp"].get(r, 0) for r in ranks},
        found_by=found_by,
        tp_groups=_groups_named(job, "TENSOR"),
    )


def _from_metadata(job: Job) -> dict[str, dict[int, int]] | None:
    table = job.ranks
    if all(table.column(a).null_count == table.num_rows for a in ("pp", "dp", "tp")):
        return None
    rows = table.select(["rank", "pp", "dp", "tp"]).to_pylist()
    return {a: {r["rank"]: r[a] or 0 for r in rows} for a in ("pp", "dp", "tp")}


def _groups_named(job: Job, word: str) -> list[list[int]]:
    out = []
    for g in job.groups.to_pylist():
        description = (g["description"] or "").upper()
        if word in description and g["ranks"] and len(g["ranks"]) > 1:
            out.append(sorted(g["ranks"]))
    return out


def _from_groups(job: Job, ranks: list[int]) -> dict[str, dict[int, int]] | None:
    coords: dict[str, dict[int, int]] = {}
    for axis, (word, _) in _AXES.items():
        coords[axis] = {r: i for g in _groups_named(job, word) for i, r in enumerate(g)}
    if not any(coords.values()):
        return None
    return coords


def _from_p2p(job: Job, ranks: list[int]) -> dict[str, dict[int, int]]:
    """Stage 0 holds the ranks whose first p2p message is a send; stages follow the first message of each pair."""
    events = job.events(columns=["rank", "collective", "peer", "step", "start_ns"])
    p2p = events.filter(pc.is_in(events.column("collective").cast(pa.string()), pa.array(["send", "recv"])))
    if p2p.num_rows == 0:
        return {"pp": {}, "dp": {}, "tp": {}}
    first_step = pc.min(p2p.column("step")).as_py()
    rows = p2p.filter(pc.equal(p2p.column("step"), first_step)).sort_by("start_ns").to_pylist()
    first_kind: dict[int, str] = {}
    forward: dict[int, set[int]] = {}
    seen: set[tuple[int, int]] = set()
    for row in rows:
        rank, peer = row["rank"], row["peer"]
        first_kind.setdefault(rank, row["collective"])
        if peer is None or (rank, peer) in seen:
            continue
        seen.add((rank, peer))
        if row["collective"] == "send":
            forward.setdefault(rank, set()).add(peer)
    stage = {r: 0 for r in ranks if first_kind.get(r) == "send"}
    queue = deque(stage)
    while queue:
        rank = queue.popleft()
        for nxt in forward.get(rank, ()):
            if nxt not in stage:
                stage[nxt] = stage[rank] + 1
                queue.append(nxt)
    return {"pp": stage, "dp": {}, "tp": {}}
