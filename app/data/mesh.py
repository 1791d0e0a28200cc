"""Each rank's place in the parallel mesh, from the Diagnosis' parallel layout, in display order
(stage, then DP, then TP)."""

from __future__ import annotations

from dataclasses import dataclass, field

from paradiag.analysis.diagnosis_types import GroupInfo
from paradiag.app.data.common import diagnosis
from paradiag.job import Job


@dataclass
class Mesh:
    ranks: list[int]
    stage: dict[int, int]
    dp: dict[int, int]
    tp: dict[int, int]
    found_by: str
    ep: dict[int, int] = field(default_factory=dict)
    groups: list[GroupInfo] = field(
        default_factory=list
    )  # with the names the traces give them and their roles

    @property
    def stages(self) -> list[int]:
        return sorted(set(self.stage.values()))

    def ranks_of_stage(self, stage: int) -> list[int]:
        return [r for r in self.ranks if self.stage[r] == stage]


def mesh_of(job: Job) -> Mesh:
    d = diagnosis(job)
    coords = d.layout.coords
    order = sorted(coords, key=lambda r: (coords[r]["pp"], coords[r]["dp"], coords[r]["tp"], r))
    return Mesh(
        ranks=order,
        stage={r: c["pp"] for r, c in coords.items()},
        dp={r: c["dp"] for r, c in coords.items()},
        tp={r: c["tp"] for r, c in coords.items()},
        found_by=d.layout.found_by,
        ep={r: c["ep"] for r, c in coords.items()},
        groups=d.groups,
    )
