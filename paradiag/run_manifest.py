"""The run manifest ``paradiag_run.json`` that paradiag.torch writes beside the traces (format ``paradiag.torch/1``).

It states what the traces leave to guessing: the world size, every process group with its GLOBAL members (a
rank's ``pg_config`` lists only its own groups), the DeviceMesh (dim names, shape, ranks) and when the run
started. It is read strictly: any field of the wrong type or out of range makes the whole manifest a warning
naming the file, and the job is then read as if it had none. It is data only: no path in it is followed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from paradiag.parsers.base import MAX_RANK, Group

NAME = "paradiag_run.json"
FORMAT = "paradiag.torch/1"
MAX_BYTES = 64 * 1024 * 1024  # 1024 ranks' groups are a few MB
MAX_GROUPS = 1 << 20
# DeviceMesh dim names -> the ranks table's axes. The data-like dims (FSDP's shard and replicate dims, context
# parallel: the model is the same on all their ranks) fold into dp, in their mesh order.
AXIS_OF_DIM = {"dp": "dp", "dp_replicate": "dp", "dp_shard": "dp", "cp": "dp", "dp_shard_cp": "dp", "dp_cp": "dp",
               "tp": "tp", "pp": "pp", "ep": "ep"}  # fmt: skip


class _Mesh(msgspec.Struct):
    dim_names: list[str]
    shape: list[int]
    ranks: Any


class _Group(msgspec.Struct):
    name: str
    ranks: list[int]
    desc: str | None = None


class _Manifest(msgspec.Struct):
    format: str
    world_size: int
    groups: list[_Group] = []
    mesh: _Mesh | None = None
    backend: str | None = None
    device_type: str | None = None
    torch_version: str | None = None
    started_ns: int | None = None
    schedule: dict[str, int] | None = None


class ManifestError(Exception):
    """A run manifest that cannot be used; the message says why."""


@dataclass
class RunManifest:
    """A valid run manifest."""

    world_size: int
    groups: list[Group] = field(
        default_factory=list
    )  # global members; the id is the group's name, made unique
    coords: dict[int, dict[str, int]] = field(
        default_factory=dict
    )  # rank -> axis -> coordinate (from the mesh)
    dim_names: list[str] = field(default_factory=list)
    started_ns: int | None = None
    backend: str | None = None
    device_type: str | None = None
    torch_version: str | None = None

    def describe(self) -> dict[str, Any]:
        """What the cache's manifest keeps of it."""
        return {"world_size": self.world_size, "mesh": self.dim_names or None, "groups": len(self.groups),
                "started_ns": self.started_ns, "backend": self.backend, "torch_version": self.torch_version}  # fmt: skip


def read(root: Path) -> tuple[RunManifest | None, str | None]:
    """The run manifest at the root of the trace folder ``root``: (manifest, None), (None, why it is not used) or
    (None, None) when there is none."""
    path = root / NAME
    if not root.is_dir() or not path.is_file():
        return None, None
    try:
        if path.stat().st_size > MAX_BYTES:
            return None, f"larger than {MAX_BYTES >> 20} MB"
        data = path.read_bytes()
    except OSError as exc:
        return None, f"cannot be read ({exc.strerror or exc})"
    try:
        return parse(data), None
    except ManifestError as exc:
        return None, str(exc)


def parse(data: bytes) -> RunManifest:
    """A run manifest from its JSON text; ManifestError says what is wrong."""
    try:
        doc = msgspec.json.decode(data, type=_Manifest)
    except msgspec.ValidationError as exc:
        raise ManifestError(f"not a valid run manifest ({exc})") from None
    except (msgspec.DecodeError, RecursionError) as exc:
        raise ManifestError(f"invalid JSON ({exc})") from None
    if doc.format != FORMAT:
        raise ManifestError(f"format {doc.format[:40]!r} is not {FORMAT!r}")
    world = doc.world_size
    if not 1 <= world <= MAX_RANK:
        raise ManifestError(f"world_size {world} is out of range")
    if len(doc.groups) > MAX_GROUPS:
        raise ManifestError(f"more than {MAX_GROUPS} groups")
    if doc.started_ns is not None and not 0 <= doc.started_ns < 2**62:
        raise ManifestError(f"started_ns {doc.started_ns} is not a valid time")
    manifest = RunManifest(
        world,
        started_ns=doc.started_ns,
        backend=doc.backend,
        device_type=doc.device_type,
        torch_version=doc.torch_version,
    )
    manifest.groups = _groups(doc.groups, world)
    if doc.mesh is not None:
        manifest.dim_names, manifest.coords = _mesh(doc.mesh, world)
    return manifest


def _groups(groups: list[_Group], world: int) -> list[Group]:
    """The groups, each with an id of its own: its name, or, where several groups share one (every slice of a
    mesh dim is ``mesh_dp``), the name and its members (``mesh_dp[0,2]``)."""
    count: dict[str, int] = {}
    for i, g in enumerate(groups):
        if not g.name or len(g.name) > 200:
            raise ManifestError(f"group {i} has no valid name")
        if not g.ranks or len(set(g.ranks)) != len(g.ranks) or not all(0 <= r < world for r in g.ranks):
            raise ManifestError(
                f"group {g.name[:40]!r} has member ranks outside 0..{world - 1} (or none, or repeated)"
            )
        count[g.name] = count.get(g.name, 0) + 1
    found = []
    for g in groups:
        gid = g.name if count[g.name] == 1 else f"{g.name}[{','.join(map(str, g.ranks))}]"
        found.append(Group(gid, list(g.ranks), g.desc or g.name))
    return found


def _mesh(mesh: _Mesh, world: int) -> tuple[list[str], dict[int, dict[str, int]]]:
    """The mesh's dim names and each rank's coordinates on the ranks table's axes (no coordinates when a dim has
    a name paradiag does not know: the groups still say what they can)."""
    names, shape = mesh.dim_names, mesh.shape
    if not names or len(names) != len(shape) or len(set(names)) != len(names):
        raise ManifestError("the mesh's dim_names and shape do not match")
    if not all(isinstance(n, int) and 1 <= n <= world for n in shape) or math.prod(shape) > world:
        raise ManifestError(f"the mesh's shape {shape[:8]} does not fit world_size {world}")
    flat = _flatten(mesh.ranks, shape)
    if len(set(flat)) != len(flat) or not all(0 <= r < world for r in flat):
        raise ManifestError("the mesh's ranks are repeated or outside the world")
    if not all(n in AXIS_OF_DIM for n in names):
        return list(names), {}
    coords: dict[int, dict[str, int]] = {}
    for index, rank in enumerate(flat):
        at, rest = [], index
        for n in reversed(shape):
            at.append(rest % n)
            rest //= n
        at.reverse()
        axes = {"dp": 0, "tp": 0, "pp": 0}
        for name, n, c in zip(names, shape, at, strict=True):
            axis = AXIS_OF_DIM[name]
            axes[axis] = axes.get(axis, 0) * n + c  # folded dims: mixed radix in mesh order
        coords[rank] = axes
    return list(names), coords


def _flatten(ranks: Any, shape: list[int]) -> list[int]:
    """The mesh's nested rank lists, row-major, checked against ``shape``."""
    if not shape:
        if isinstance(ranks, bool) or not isinstance(ranks, int):
            raise ManifestError("the mesh's ranks do not match its shape")
        return [ranks]
    if not isinstance(ranks, list) or len(ranks) != shape[0]:
        raise ManifestError("the mesh's ranks do not match its shape")
    return [r for sub in ranks for r in _flatten(sub, shape[1:])]


def shown(root: Path) -> str:
    return NAME if root.is_dir() else str(root.parent / NAME)
