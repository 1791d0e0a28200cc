"""Profile a torch.distributed training loop the way paradiag reads it best.

    import paradiag.torch
    with paradiag.torch.profile("traces/", mesh=mesh) as prof:   # mesh: the job's DeviceMesh, if it has one
        for batch in loader:
            train_step(batch)
            prof.step()

Every rank writes one file per profiling window, ``<dir>/rank{R}.window{W}.pt.trace.json`` (W: the profiler cycle,
0, 1, ...), holding what ``torch.profiler`` writes; rank 0 also writes ``<dir>/paradiag_run.json``, the run manifest
(format ``paradiag.torch/1``): world size, backend, device type, torch version, the profiling schedule, the
DeviceMesh's dim names, shape and ranks, and every process group of the job with its GLOBAL member ranks (gathered
from all ranks once, before profiling starts). The analysis reads the layout from it instead of guessing.

torch is not a dependency of paradiag: this module imports it when a profile is made, in the training job's
environment; ``import paradiag`` never imports it. ``profile`` must be entered on every rank (it gathers the
process groups with one collective on the default group when ``torch.distributed`` is initialised).
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

FORMAT = "paradiag.torch/1"
MANIFEST = "paradiag_run.json"


def trace_name(rank: int, window: int) -> str:
    """The file name of a rank's trace for one profiling window."""
    return f"rank{rank}.window{window}.pt.trace.json"


def _atomic_write(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as out:
            out.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _local_groups(dist: Any) -> list[dict[str, Any]]:
    """This rank's process groups (the default group included): name, description and global member ranks."""
    from torch.distributed import distributed_c10d as c10d

    world = getattr(c10d, "_world", None)
    pgs = list(getattr(world, "pg_map", {}) or {}) if world is not None else []
    if not pgs:
        pgs = [dist.group.WORLD]
    groups = []
    for pg in pgs:
        try:
            ranks = [int(r) for r in dist.get_process_group_ranks(pg)]
        except (RuntimeError, ValueError, KeyError):
            continue
        name = getattr(pg, "group_name", None) or c10d._get_process_group_name(pg)
        desc = getattr(pg, "group_desc", None) or name
        groups.append({"name": str(name), "desc": str(desc), "ranks": ranks})
    return groups


def _mesh_info(mesh: Any) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """A DeviceMesh's dim names, shape and global ranks, and every slice of every dimension as a group (named as
    DeviceMesh names its groups: ``mesh_<dim>``)."""
    ranks = mesh.mesh.tolist()
    shape = [int(s) for s in mesh.mesh.shape]
    names = list(mesh.mesh_dim_names or [f"dim{d}" for d in range(len(shape))])
    groups: list[dict[str, Any]] = []
    for dim, dim_name in enumerate(names):
        slices = mesh.mesh.movedim(dim, -1).reshape(-1, shape[dim]).tolist()
        groups.extend(
            {"name": f"mesh_{dim_name}", "desc": f"mesh_{dim_name}", "ranks": [int(r) for r in s]}
            for s in slices
        )
    return {"dim_names": names, "shape": shape, "ranks": ranks}, groups


def run_manifest(
    mesh: Any = None, schedule: dict[str, int] | None = None, gather: bool = True
) -> dict[str, Any]:
    """The run manifest of this job (the same on every rank). With ``gather`` and torch.distributed initialised,
    every rank's groups are gathered (one all_gather_object on the default group), so groups that rank 0 is no
    member of are listed with their real names too; a DeviceMesh's slices are listed from the mesh itself."""
    import torch
    import torch.distributed as dist

    initialised = dist.is_available() and dist.is_initialized()
    groups: list[dict[str, Any]] = []
    backend = None
    world_size = 1
    if initialised:
        backend = str(dist.get_backend())
        world_size = dist.get_world_size()
        local = _local_groups(dist)
        if gather and world_size > 1:
            every: list[Any] = [None] * world_size
            dist.all_gather_object(every, local)
            groups = [g for per_rank in every for g in (per_rank or [])]
        else:
            groups = local
    mesh_doc = None
    device_type = None
    if mesh is not None:
        mesh_doc, mesh_groups = _mesh_info(mesh)
        device_type = str(mesh.device_type)
        groups.extend(mesh_groups)
    if device_type is None:
        device_type = "cuda" if backend == "nccl" else "cpu"
    unique: dict[tuple[str, tuple[int, ...]], dict[str, Any]] = {}
    for group in groups:
        key = (group["desc"], tuple(group["ranks"]))
        if key not in unique or unique[key]["name"].startswith(
            "mesh_"
        ):  # a real pg name beats the mesh's label
            unique[key] = group
    return {
        "format": FORMAT,
        "torch_version": torch.__version__.split("+")[0],
        "backend": backend,
        "device_type": device_type,
        "world_size": world_size,
        "mesh": mesh_doc,
        "groups": sorted(unique.values(), key=lambda g: (g["desc"], g["ranks"])),
        "schedule": schedule,
        "started_ns": time.time_ns(),
    }


class Profile:
    """A ``torch.profiler.profile`` with a schedule whose every window lands in ``rank{R}.window{W}.pt.trace.json``
    (written to a temporary name and renamed, so a reader never sees half a file). Use as a context manager and call
    ``step()`` once per training step; ``profiler`` is the underlying ``torch.profiler.profile``."""

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        mesh: Any = None,
        wait: int = 1,
        warmup: int = 1,
        active: int = 3,
        repeat: int = 1,
        skip_first: int = 0,
        record_shapes: bool = True,
        gather_groups: bool = True,
        **profiler_options: Any,
    ) -> None:
        if active < 1 or wait < 0 or warmup < 0 or repeat < 0 or skip_first < 0:
            raise ValueError(
                "paradiag.torch.profile: active must be >= 1 and wait, warmup, repeat, skip_first >= 0"
            )
        self.directory = Path(directory)
        self.mesh = mesh
        self.schedule = {
            "wait": wait,
            "warmup": warmup,
            "active": active,
            "repeat": repeat,
            "skip_first": skip_first,
        }
        self.record_shapes = record_shapes
        self.gather_groups = gather_groups
        self.options = profiler_options
        self.window = 0
        self.rank = 0
        self.written: list[Path] = []
        self.profiler: Any = None

    def _on_trace_ready(self, prof: Any) -> None:
        path = self.directory / trace_name(self.rank, self.window)
        fd, tmp = tempfile.mkstemp(dir=self.directory, prefix=f".{path.name}.", suffix=".tmp.json")
        os.close(fd)
        try:
            prof.export_chrome_trace(tmp)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        self.written.append(path)
        self.window += 1

    def __enter__(self) -> Profile:
        import torch.distributed as dist
        from torch.profiler import ProfilerActivity, schedule
        from torch.profiler import profile as torch_profile

        self.directory.mkdir(parents=True, exist_ok=True)
        if dist.is_available() and dist.is_initialized():
            self.rank = dist.get_rank()
        manifest = run_manifest(self.mesh, self.schedule, self.gather_groups)
        if self.rank == 0:
            _atomic_write(self.directory / MANIFEST, json.dumps(manifest, indent=1) + "\n")
        options = dict(self.options)
        if "activities" not in options:
            activities = [ProfilerActivity.CPU]
            import torch

            if torch.cuda.is_available():
                activities.append(ProfilerActivity.CUDA)
            options["activities"] = activities
        self.profiler = torch_profile(
            schedule=schedule(**self.schedule),
            on_trace_ready=self._on_trace_ready,
            record_shapes=self.record_shapes,
            **options,
        )
        self.profiler.__enter__()
        return self

    def step(self) -> None:
        """Mark the end of one training step (``torch.profiler.profile.step``)."""
        self.profiler.step()

    def __exit__(self, *exc: object) -> None:
        self.profiler.__exit__(*exc)


def profile(
    directory: str | os.PathLike[str],
    *,
    mesh: Any = None,
    wait: int = 1,
    warmup: int = 1,
    active: int = 3,
    repeat: int = 1,
    skip_first: int = 0,
    **options: Any,
) -> Profile:
    """Profile ``active`` steps after ``wait`` + ``warmup`` ones, ``repeat`` times (0: until the loop ends), into
    ``directory``; ``mesh`` is the job's DeviceMesh (its layout goes into the run manifest). Other keyword
    arguments go to ``torch.profiler.profile`` (``activities``, ``with_stack``, ``record_shapes`` (default on), ...)."""
    return Profile(
        directory,
        mesh=mesh,
        wait=wait,
        warmup=warmup,
        active=active,
        repeat=repeat,
        skip_first=skip_first,
        **options,
    )


__all__ = ["FORMAT", "MANIFEST", "Profile", "profile", "run_manifest", "trace_name"]
