"""``ground_truth.json``: the layout, schedule, model and every injected fault of a simulated job.

Schema ``paradiag.ground_truth/1`` (documented in docs/simulator.md). paradiag's trace discovery skips this file.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from paradiag.analysis import kinds
from paradiag.simulator.faults import Fault
from paradiag.simulator.job import Job

SCHEMA = "paradiag.ground_truth/1"
FILE_NAME = "ground_truth.json"
STAGE_IMBALANCE = (
    1.15  # the heaviest stage's compute against the mean that paradiag reports (docs/analysis.md)
)


def _fault(job: Job, fault: Fault) -> dict[str, Any]:
    """The fault as injected, plus what it resolves to in this job (ranks, layers, offsets)."""
    out = fault.to_json()
    mesh = job.mesh
    if fault.kind == "stage_imbalance":
        heavy = max(range(len(job.stage_layers)), key=lambda s: job.stage_layers[s])
        ranks = [r for r in range(mesh.world) if mesh.stage(r) == heavy]
        out = {"kind": fault.kind, "layers": list(job.stage_layers), "stage": heavy, "ranks": ranks}
    elif fault.kind == "clock_skew":
        out["ranks"] = [r for r in range(mesh.world) if mesh.node(r) in fault.params["nodes"]]
        out["offset_us"] = float(fault.params["ms"]) * 1e3
    elif fault.kind == "expert_imbalance":
        out["ranks"] = [r for r in range(mesh.world) if mesh.ep_index(r) == int(fault.params["ep_rank"])]
    elif fault.kind == "slow_link":
        out["link"] = {
            "ranks" if fault.params.get("ranks") else "nodes": fault.params.get("ranks")
            or fault.params["nodes"]
        }
        if fault.params.get("nodes"):
            out["ranks"] = [r for r in range(mesh.world) if mesh.node(r) in fault.params["nodes"]]
    return out


def inherent(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """What the job does without any fault that a diagnosis should still report: a pipeline stage computing
    STAGE_IMBALANCE x the mean (the last stage also runs the LM head and the loss, the first the embedding).
    A stage's compute is its least loaded rank's median step of pass compute (optimizer excluded, as paradiag
    counts it), so that an injected slow rank does not count. Read from the document itself, so that it also
    applies to ground truths written before it was recorded (with their compute_us)."""
    stage_of, compute = doc["layout"]["stages"], doc.get("pass_compute_us") or doc.get("compute_us", {})
    pp = doc["layout"]["pp"]
    if pp < 2 or any(f["kind"] == "stage_imbalance" for f in doc["faults"]) or not compute:
        return []
    ranks_of = [[r for r, s in enumerate(stage_of) if s == stage] for stage in range(pp)]
    per_stage = [min(sorted(compute[str(r)])[len(compute[str(r)]) // 2] for r in ranks) for ranks in ranks_of]
    mean = sum(per_stage) / len(per_stage)
    heavy = max(range(pp), key=lambda s: per_stage[s])
    # Within the job's jitter of the threshold a finding may or may not be made: either is right.
    if not mean or per_stage[heavy] < STAGE_IMBALANCE * (1 - float(doc.get("jitter") or 0.0)) * mean:
        return []
    cause = "the LM head and the loss" if heavy == pp - 1 else "the embedding" if heavy == 0 else "its layers"
    return [
        {
            "kind": "stage_imbalance",
            "stage": heavy,
            "ranks": ranks_of[heavy],
            "imbalance": round(per_stage[heavy] / mean, 3),
            "cause": cause,
        }
    ]


def build(
    job: Job,
    files: dict[int, str],
    timings: dict[str, dict[int, list[float]]],
    torch2: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The ground truth document; ``timings`` holds per-rank, per-step figures (host step span, busy compute);
    ``torch2`` (the torch2 shape only) each rank's file per window (``windows``) and an older run's (``stale_files``)."""
    cfg, mesh = job.cfg, job.mesh
    model: dict[str, Any] = {"kind": cfg.model}
    if cfg.model == "llm":
        model.update(
            layers=cfg.layers,
            hidden=cfg.hidden,
            heads=cfg.heads,
            seq_len=cfg.seq_len,
            micro_batch_size=cfg.micro_batch_size,
            vocab=cfg.vocab,
            experts=cfg.num_experts,
            moe_every=cfg.moe_every if cfg.num_experts else None,
            moe_layers=[layer for layer in range(cfg.layers) if job.is_moe(layer)],
        )
    else:
        model.update(image_batch=cfg.image_batch)
    layout = {
        "dp": cfg.dp,
        "tp": cfg.tp,
        "pp": cfg.pp,
        "ep": cfg.ep,
        "world_size": mesh.world,
        "nodes": mesh.nodes,
        "devices_per_node": mesh.devices_per_node,
        "rank_order": "tp-dp-pp",
        "stages": [mesh.stage(r) for r in range(mesh.world)],
        "coords": [
            dict(zip(("pp", "dp", "tp"), mesh.coords(r), strict=True)) | {"ep": mesh.ep_index(r)}
            for r in range(mesh.world)
        ],
        "node_of_rank": [mesh.node(r) for r in range(mesh.world)],
        "layers_per_stage": job.stage_layers if cfg.model == "llm" else None,
        "groups": [
            {"name": g.name, "role": g.role, "description": g.description, "ranks": list(g.ranks)}
            for g in mesh.groups
        ],
    }
    doc = {
        "schema": SCHEMA,
        "generator": "paradiag.simulator",
        "seed": cfg.seed,
        "format": cfg.format,
        "p2p_peer": cfg.p2p_peer,
        "device": {
            "key": job.spec.key,
            **{
                k: v
                for k, v in asdict(job.spec).items()
                if k in ("name", "kind", "peak_tflops", "hbm_gbps", "intra_gbps", "inter_gbps")
            },
        },
        "model": model,
        "layout": layout,
        "schedule": {
            "kind": cfg.schedule if cfg.pp > 1 else "none",
            "microbatches": cfg.num_microbatches,
            "virtual_stages": cfg.virtual_stages,
            "steps": [s for window in cfg.profiled_steps for s in window],
        },
        "jitter": cfg.jitter,
        "faults": [_fault(job, f) for f in cfg.faults],
        "files": {str(r): files[r] for r in sorted(files)},
        **{
            name: {str(r): [round(v, 3) for v in values[r]] for r in sorted(values)}
            for name, values in timings.items()
        },
    }
    if torch2 is not None:
        names = mesh.torch2_names(cfg.dp_dim)
        layout["groups"] = [
            {
                "name": names[g.index][0],
                "role": g.role,
                "description": names[g.index][1],
                "ranks": list(g.ranks),
            }
            for g in mesh.groups
        ]
        layout["mesh"] = mesh.device_mesh(cfg.dp_dim)
        per_rank = torch2["windows"]
        doc["shape"] = {
            "kind": "torch2",
            "backend": "gloo" if job.spec.kind == "cpu" else "nccl",
            "device_kind": job.spec.kind,
            "dp_mode": cfg.dp_mode,
            "dp_dim": cfg.dp_dim,
            "trace_names": cfg.trace_names,
            "manifest": cfg.manifest,
            "collective_args": cfg.collective_args and job.spec.kind != "cpu",
        }
        doc["windows"] = [
            {"window": w, "steps": steps, "files": {str(r): per_rank[r][w] for r in sorted(per_rank)}}
            for w, steps in enumerate(cfg.profiled_steps)
        ]
        doc["stale_files"] = torch2["stale_files"]
    doc["inherent"] = inherent(doc)
    return doc


def write(
    job: Job,
    out: Path,
    files: dict[int, str],
    timings: dict[str, dict[int, list[float]]],
    torch2: dict[str, Any] | None = None,
) -> Path:
    path = out / FILE_NAME
    path.write_text(json.dumps(build(job, files, timings, torch2), indent=1) + "\n")
    return path


def read(path: Path) -> dict[str, Any]:
    """Load a ground truth (a job folder or the file itself)."""
    path = path / FILE_NAME if path.is_dir() else path
    data: dict[str, Any] = json.loads(path.read_text())
    if data.get("schema") != SCHEMA:
        raise ValueError(f"{path}: not a paradiag ground truth (schema {data.get('schema')!r})")
    return data


def matches(finding: dict[str, Any], entry: dict[str, Any]) -> bool:
    """Whether a paradiag finding names this fault or inherent condition: the kind the fault produces
    (``paradiag.analysis.kinds``) and the culprit it blames (a stage: its stage; a link: its rank pair; the ranks
    otherwise)."""
    kind = kinds.produced_by(entry["kind"])
    if finding["kind"] != kind:
        return False
    culprit, blames = finding["culprit"], kinds.KINDS[kind].blames
    if blames == "stage":
        return bool(culprit.get("stage") == entry["stage"])
    if blames == "link":
        return sorted(culprit.get("link", {}).get("ranks", [])) == sorted(entry["link"]["ranks"])
    return sorted(culprit.get("ranks", [])) == sorted(entry["ranks"])


@dataclass
class Score:
    """A diagnosis against its ground truth: ``top`` the first finding that is not an inherent condition (its
    kind, or ``none``), ``right`` whether it names the injected fault (or, without one, that there is none),
    ``false_kinds`` the kinds found that neither a fault nor an inherent condition explains."""

    top: str
    right: bool
    false_kinds: list[str]


def score(findings: list[dict[str, Any]], truth: dict[str, Any]) -> Score:
    inherent_ = truth["inherent"] if "inherent" in truth else inherent(truth)
    rest = [f for f in findings if not any(matches(f, e) for e in inherent_)]
    faults = truth["faults"]
    top = rest[0] if rest else None
    right = (top is not None and any(matches(top, f) for f in faults)) if faults else top is None
    known = {e["kind"] for e in [*faults, *inherent_]}
    return Score(top["kind"] if top else "none", right, sorted({f["kind"] for f in findings} - known))


def confusion_table(rows: list[tuple[str, str]]) -> str:
    """Injected kind (``none`` for a fault-free job) against the top finding's kind, counted."""
    counts: dict[tuple[str, str], int] = {}
    for key in rows:
        counts[key] = counts.get(key, 0) + 1
    columns = sorted({c for _, c in counts})
    names = sorted({r for r, _ in counts})
    width = max(len(c) for c in [*columns, *names, "injected \\ top"]) + 1
    lines = ["injected \\ top".ljust(width) + "".join(c.rjust(width) for c in columns)]
    for r in names:
        lines.append(r.ljust(width) + "".join(str(counts.get((r, c)) or ".").rjust(width) for c in columns))
    return "\n".join(lines)
