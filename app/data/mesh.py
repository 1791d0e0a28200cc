"""Each rank's place in the parallel mesh, from the analysis' parallel layout, in display order
(stage, then DP, then TP)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from paradiag.analysis.frame import job_frame
from paradiag.analysis.layout import layout_from_metadata, parallel_layout
from paradiag.app import store
from paradiag.dataset import Job


@dataclass
class Mesh:
    ranks: list[int]
    stage: dict[int, int]
    dp: dict[int, int]
    tp: dict[int, int]
    found_by: str

    @property
    def stages(self) -> list[int]:
        return sorted(set(self.stage.values()))

    def ranks_of_stage(self, stage: int) -> list[int]:
        return [r for r in self.ranks if self.stage[r] == stage]


def mesh_of(job: Job) -> Mesh:
    data = store.memo("mesh", job.content_hash, 1, lambda: _layout(job))
    coords = {int(r): c for r, c in data["coords"].items()}
    order = sorted(coords, key=lambda r: (coords[r]["pp"], coords[r]["dp"], coords[r]["tp"], r))
    return Mesh(
        ranks=order,
        stage={r: c["pp"] for r, c in coords.items()},
        dp={r: c["dp"] for r, c in coords.items()},
        tp={r: c["tp"] for r, c in coords.items()},
        found_by=data["found_by"],
    )


def _layout(job: Job) -> dict[str, Any]:
    layout = layout_from_metadata(job.ranks, job.groups) or parallel_layout(job.ranks, job.groups, job_frame(job))
    return {"coords": {int(r): dict(c) for r, c in layout.coords.items()}, "found_by": layout.found_by}
