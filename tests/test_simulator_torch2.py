"""``--shape torch2``: the simulator writes what a real PyTorch 2.x job records (issue 22).

CPU/gloo and GPU/NCCL jobs with DeviceMesh group names, c10d host ops (gloo and older NCCL without record_param_comms; NCCL
with it, as PyTorch >= 2.2 records it), group-local
send/recv peers, gloo runloop threads, several profiler windows, an older rerun and the run manifest; and the same
keys, categories, arg names and thread names as real traces: the gloo ones made by real torch.distributed jobs
(``$PARADIAG_REAL_TRACES``, default ``../realtraces`` beside the repo) and the NCCL one in ../shared/traces.
"""

from __future__ import annotations

import json
import os
import re
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from paradiag.simulator import SimConfig, groundtruth, parse_fault, simulate
from paradiag.simulator.cli import simulate as simulate_cli
from tests.conftest import REPO, shared_path

MODEL: dict[str, Any] = {
    "layers": 4,
    "hidden": 256,
    "heads": 16,
    "seq_len": 128,
    "vocab": 1024,
    "steps": 2,
    "microbatches": 2,
}
REAL_TRACES = Path(os.environ.get("PARADIAG_REAL_TRACES") or REPO.parent / "realtraces")
GLOO_NAMES = {
    "gloo:all_reduce",
    "gloo:all_gather",
    "gloo:broadcast",
    "gloo:send",
    "gloo:recv",
    "gloo:all_to_all",
}


def _load(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def _threads(trace: dict[str, Any]) -> dict[int, set[str]]:
    names: dict[int, set[str]] = defaultdict(set)
    for e in trace["traceEvents"]:
        if e.get("ph") == "M" and e["name"] == "thread_name":
            names[e["tid"]].add(re.sub(r"^thread \d+ \((.*)\)$", r"\1", e["args"]["name"]))
    return names


def _events(trace: dict[str, Any], name: str | None = None, cat: str | None = None) -> list[dict[str, Any]]:
    return [
        e
        for e in trace["traceEvents"]
        if e.get("ph") == "X" and (name is None or e["name"] == name) and (cat is None or e.get("cat") == cat)
    ]


def _overlaps(trace: dict[str, Any]) -> list[tuple[str, str]]:
    """Pairs of host ops of one thread that overlap without one holding the other (a thread's ops nest in real
    traces: a RecordFunction ends before its caller's does and before the thread's next op begins)."""
    threads: dict[Any, list[tuple[int, int, str]]] = {}
    for e in _events(trace, cat="cpu_op"):
        start = round(e["ts"] * 1000)
        threads.setdefault(e["tid"], []).append((start, start + round(e["dur"] * 1000), e["name"]))
    out = []
    for ops in threads.values():
        held: list[tuple[int, int, str]] = []
        for op in sorted(ops, key=lambda o: (o[0], -o[1])):
            while held and held[-1][1] <= op[0]:
                held.pop()
            if held and op[1] > held[-1][1]:
                out.append((held[-1][2], op[2]))
            held.append(op)
    return out


@pytest.fixture(scope="module")
def cpu_job(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("torch2") / "cpu"
    simulate(
        SimConfig(
            output=out,
            device="cpu",
            shape="torch2",
            dp=2,
            tp=2,
            pp=2,
            windows=2,
            rerun=True,
            manifest=True,
            faults=(parse_fault("slow_device:ranks=5,factor=1.5"),),
            seed=3,
            **MODEL,
        )
    )
    return out


@pytest.fixture(scope="module", params=[True, False], ids=["collective_args", "no_collective_args"])
def gpu_job(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Path:
    """PyTorch >= 2.2 records NCCL work with record_param_comms (its args copied onto the kernel); older versions
    (``collective_args=False``) only the c10d op, the nccl annotation and the kernel."""
    out = tmp_path_factory.mktemp("torch2") / "gpu"
    simulate(
        SimConfig(
            output=out,
            device="h100",
            shape="torch2",
            dp=2,
            tp=2,
            pp=2,
            dp_mode="fsdp",
            dp_dim="dp_shard",
            trace_names="rank",
            seed=4,
            collective_args=request.param,
            **MODEL,
        )
    )
    return out


def _with_args(job: Path) -> bool:
    return any(
        e["name"] == "record_param_comms" for t in _latest(job).values() for e in _events(t, cat="cpu_op")
    )


def _latest(job: Path) -> dict[int, dict[str, Any]]:
    truth = groundtruth.read(job)
    return {int(r): _load(job / f) for r, f in truth["files"].items()}


def test_cpu_job_is_shaped_as_gloo_records_it(cpu_job: Path) -> None:
    truth = groundtruth.read(cpu_job)
    groups = {tuple(g["ranks"]): g for g in truth["layout"]["groups"]}
    for rank, trace in _latest(cpu_job).items():
        info = trace["distributedInfo"]
        assert trace["deviceProperties"] == [] and info["backend"] == "gloo" and info["rank"] == rank
        assert info["pg_count"] == len(truth["layout"]["groups"])
        own = [g for g in truth["layout"]["groups"] if rank in g["ranks"]]
        assert sorted(p["pg_name"] for p in info["pg_config"]) == sorted(
            g["name"] for g in own
        )  # only its own groups
        assert {p["pg_desc"] for p in info["pg_config"]} <= {"default_pg", "mesh_pp", "mesh_dp", "mesh_tp"}
        assert all(
            p["pg_name"].isdigit() and p["backend_config"] == "cpu:gloo,cuda:gloo" for p in info["pg_config"]
        )
        text = json.dumps(trace)
        assert "record_param_comms" not in text and "Collective name" not in text
        main = next(
            e["pid"]
            for e in trace["traceEvents"]
            if e.get("ph") == "X" and e["name"].startswith("ProfilerStep#")
        )
        assert {e["pid"] for e in trace["traceEvents"] if e.get("ph") == "X" and e.get("cat") != "Trace"} == {
            main
        }  # no device rows
        threads = _threads(trace)
        assert threads[main] == {"python3"}
        gloo = [e for e in _events(trace, cat="user_annotation") if e["name"].startswith("gloo:")]
        assert gloo and {e["name"] for e in gloo} <= GLOO_NAMES
        for e in gloo:  # collectives on the group's runloop threads, send/recv on the main thread
            assert ("pt_gloo_runloop" in threads[e["tid"]]) == (
                e["name"] not in ("gloo:send", "gloo:recv")
            ), e
            assert list(e["args"]) == [
                "External id",
                "Record function id",
                "Concrete Inputs",
                "Input type",
                "Input Strides",
                "Input Dims",
                "Ev Idx",
            ]
        # send/recv: the peer is group-local (Concrete Inputs[2]) in the pipeline group, the sequence number autograd's
        stage = truth["layout"]["stages"][rank]
        pp_group = next(g for g in own if g["description"] == "mesh_pp")
        for op in ("c10d::send", "c10d::recv_"):
            for e in _events(trace, op):
                peer = pp_group["ranks"][int(e["args"]["Concrete Inputs"][2])]
                assert (
                    truth["layout"]["stages"][peer] in (stage - 1, stage + 1)
                    and tuple(pp_group["ranks"]) in groups
                )
                assert "Sequence number" in e["args"] and e["args"]["Input type"] == [
                    "TensorList",
                    "",
                    "Scalar",
                    "Scalar",
                ]
        assert _events(trace, "c10d::allreduce_") and all(
            e["dur"] < 1000 for e in _events(trace, "c10d::allreduce_")
        )


def test_gloo_work_lasts_as_long_as_the_slowest_member(cpu_job: Path) -> None:
    """The dp all-reduce of ranks 5 (1.5x slower) and 7 ends together on both; rank 7 waits in it much longer."""
    traces = _latest(cpu_job)
    ends, durs = {}, {}
    for rank in (5, 7):
        reduce = [
            e
            for e in _events(traces[rank], "gloo:all_reduce")
            if e["args"]["Input type"] == ["float"] and e["args"]["Input Dims"][0][0] > 10_000
        ]
        ends[rank] = [e["ts"] + e["dur"] for e in reduce]
        durs[rank] = sum(e["dur"] for e in reduce)
    assert len(ends[5]) == len(ends[7]) == 2
    assert all(abs(a - b) < 1e-2 for a, b in zip(ends[5], ends[7], strict=True))
    assert durs[7] > 1.5 * durs[5]


def test_some_sends_are_recorded_after_their_data_left(cpu_job: Path, tmp_path: Path) -> None:
    """As gloo on a busy host records them: some of a CPU job's sends have their c10d::send run over the transfer
    and their gloo:send begin at its very end (every gloo:send of the real jobs begins inside its c10d::send), so
    the matching receive ends before the send's annotation begins. The parser begins each such send at its
    c10d::send (the host asked for it then): no receive ends before its send began, and the replay gives back
    the traces exactly."""
    import paradiag
    from paradiag.analysis.whatif import job_graph, replay_error

    truth = groundtruth.read(cpu_job)
    trace = _load(cpu_job / truth["files"]["1"])
    enqueues = sorted((e["ts"], e["ts"] + e["dur"]) for e in _events(trace, "c10d::send"))
    sends = _events(trace, "gloo:send")
    inside = [any(a <= g["ts"] <= b for a, b in enqueues) for g in sends]
    assert sends and all(inside)
    long = [b - a for a, b in enqueues if b - a > 100]
    assert 0 < len(long) < len(enqueues), (len(long), len(enqueues))
    assert _overlaps(trace) == []  # a send held over the transfer returns before the thread's next op
    job = paradiag.open(cpu_job, tmp_path / "cache")
    pairs = job.diagnosis().p2p.to_pydict()
    assert not any(r < s for r, s in zip(pairs["recv_end_ns"], pairs["send_start_ns"], strict=True))
    graph, _peers = job_graph(job, job.diagnosis())
    assert replay_error(graph) == (0, 0.0)


def test_windows_rerun_and_manifest(cpu_job: Path) -> None:
    truth = groundtruth.read(cpu_job)
    assert [w["steps"] for w in truth["windows"]] == [[0, 1], [4, 5]]
    assert truth["files"] == truth["windows"][-1]["files"]
    names = sorted(p.name for p in cpu_job.glob("*.pt.trace.json"))
    assert len(names) == 8 * 2 * 2 and len(truth["stale_files"]) == 16
    stamp = {n: int(n.split(".")[1]) for n in names}  # tensorboard_trace_handler: {worker}.{time_ns}
    newest_old = max(stamp[n] for n in truth["stale_files"])
    assert all(stamp[f] > newest_old for w in truth["windows"] for f in w["files"].values())
    for w in truth["windows"]:
        for rank, name in w["files"].items():
            trace = _load(cpu_job / name)
            assert trace["distributedInfo"]["rank"] == int(rank)
            assert [
                e["name"]
                for e in _events(trace, cat="user_annotation")
                if e["name"].startswith("ProfilerStep#")
            ] == [f"ProfilerStep#{s}" for s in w["steps"]]
    old = _load(cpu_job / truth["stale_files"][0])
    assert max(e["ts"] for e in _events(old)) < min(
        e["ts"] for e in _events(_load(cpu_job / truth["files"]["0"]))
    )
    manifest = _load(cpu_job / "paradiag_run.json")
    assert (
        manifest["format"] == "paradiag.torch/1"
        and manifest["backend"] == "gloo"
        and manifest["world_size"] == 8
    )
    assert manifest["mesh"]["dim_names"] == ["pp", "dp", "tp"] and manifest["mesh"]["shape"] == [2, 2, 2]
    assert manifest["mesh"]["ranks"][1][0] == [4, 5]
    assert sorted((g["name"], g["desc"], g["ranks"]) for g in manifest["groups"]) == sorted(
        (g["name"], g["description"], g["ranks"]) for g in truth["layout"]["groups"]
    )
    assert manifest["schedule"]["repeat"] == 2 and manifest["schedule"]["active"] == 2


def test_gpu_job_is_shaped_as_nccl_records_it(gpu_job: Path) -> None:
    truth = groundtruth.read(gpu_job)
    assert all(re.fullmatch(r"rank\d+\.\d+\.pt\.trace\.json", f) for f in truth["files"].values())
    with_args = _with_args(gpu_job)
    for rank, trace in _latest(gpu_job).items():
        info = trace["distributedInfo"]
        assert info["backend"] == "nccl" and {p["pg_desc"] for p in info["pg_config"]} <= {
            "default_pg",
            "mesh_pp",
            "mesh_dp_shard",
            "mesh_tp",
        }
        assert ("Collective name" in json.dumps(trace)) == with_args
        kernels = _events(trace, cat="kernel")
        nccl = [k for k in kernels if k["name"].startswith("ncclDevKernel_")]
        assert {k["name"].split("(")[0] for k in nccl} >= {
            "ncclDevKernel_AllGather_RING_LL128",
            "ncclDevKernel_SendRecv",
        }
        cpu_ops = _events(trace, cat="cpu_op")
        ops = {e["args"]["External id"]: e["name"] for e in cpu_ops}
        c10d = [e for e in cpu_ops if e["name"].startswith("c10d::")]
        if with_args:  # launched by record_param_comms inside the c10d op, which has the group and the sizes
            assert all(ops[k["args"]["External id"]] == "record_param_comms" for k in nccl)
            params = {e["args"]["External id"]: e for e in cpu_ops if e["name"] == "record_param_comms"}
            pgs = {p["pg_name"]: p for p in info["pg_config"]}
            for k in nccl:
                call = params[k["args"]["External id"]]
                pg = pgs[call["args"]["Process Group Name"]]
                assert call["args"]["Process Group Description"] == pg["pg_desc"] and call["args"][
                    "Process Group Ranks"
                ] == str(pg["ranks"])
                assert all(
                    k["args"][key] == call["args"][key]
                    for key in ("Collective name", "In msg nelems", "Process Group Name")
                )
                assert "Rank" not in k["args"]  # the rank fields stay on record_param_comms
                if call["args"]["Collective name"] in ("send", "recv"):
                    assert pg["ranks"][call["args"]["Rank"]] != rank  # the peer's index in the group
                assert any(
                    o["ts"] <= call["ts"] and call["ts"] + call["dur"] <= o["ts"] + o["dur"] for o in c10d
                )
        else:
            assert "record_param_comms" not in json.dumps(trace)
            assert all(
                ops[k["args"]["External id"]].startswith("c10d::") for k in nccl
            )  # each kernel launched by its c10d op
        names = {e["name"] for e in c10d}
        assert names >= {"c10d::_allgather_base_", "c10d::_reduce_scatter_base_", "c10d::send", "c10d::recv_"}
        annotations = {e["name"] for e in _events(trace, cat="gpu_user_annotation")}
        assert "nccl:_reduce_scatter_base" in annotations and any(
            re.fullmatch(r"nccl:(send \d->\d|recv \d<-\d)", a) for a in annotations
        )
        threads = _threads(trace)
        autograd = next(t for t, n in threads.items() if "pt_autograd_0" in n)
        backward = _events(trace, "aten::_flash_attention_backward")
        assert backward and all(e["tid"] == autograd for e in backward)


def test_torch2_options_refused_where_they_mean_nothing(tmp_path: Path) -> None:
    runner = CliRunner()
    for args, message in (
        (["--device", "cpu"], "needs --shape torch2"),
        (["--windows", "2"], "need --shape torch2"),
        (["--shape", "torch2", "--rerun", "--trace-names", "window"], "overwrites the older files"),
        (["--shape", "torch2", "--format", "ascend"], "use --format kineto"),
        (
            ["--shape", "torch2", "--steps", "2", "--windows", "2", "--inject", "host_stall:ranks=0,steps=2"],
            "step 2 is not profiled",
        ),
    ):
        result = runner.invoke(simulate_cli, [*args, "-o", str(tmp_path / "job")])
        assert result.exit_code == 2 and message in result.output, (args, result.output)
        assert not (tmp_path / "job").exists()
    assert "--shape" in runner.invoke(simulate_cli, ["--help"]).output


# ---- the same structure as real traces ----------------------------------------------------------------------------


def _real_gloo() -> list[dict[str, Any]]:
    by_folder: dict[Path, list[Path]] = defaultdict(list)
    for path in sorted(REAL_TRACES.rglob("*.pt.trace.json")) if REAL_TRACES.is_dir() else []:
        by_folder[path.parent].append(path)
    files = [p for paths in by_folder.values() for p in paths[:2]][:40]  # two ranks of each real job
    traces = [t for t in map(_load, files) if t.get("distributedInfo", {}).get("backend") == "gloo"]
    if not traces:
        pytest.skip(
            f"no real gloo trace: {REAL_TRACES} holds none (set PARADIAG_REAL_TRACES to a folder of real torch.distributed CPU traces)"
        )
    return traces


def _shape(traces: list[dict[str, Any]]) -> dict[str, Any]:
    """What a structural comparison looks at: top-level keys, distributedInfo and pg_config keys, event categories,
    arg names per (category, name) of the communication events, thread name kinds."""
    args: dict[tuple[str, str], set[str]] = defaultdict(set)
    cpu_args: set[str] = set()
    for t in traces:
        for e in t["traceEvents"]:
            if e.get("ph") != "X":
                continue
            key = (e.get("cat", ""), re.sub(r" \d+(->|<-)\d+$", "", e["name"]))
            if key[1].startswith(("gloo:", "nccl:", "c10d::", "ProfilerStep#")):
                args[(key[0], "ProfilerStep#" if key[1].startswith("ProfilerStep#") else key[1])] |= set(
                    e.get("args", {})
                )
            elif key[0] == "cpu_op":
                cpu_args |= set(e.get("args", {}))
    return {
        "top": set().union(*(set(t) for t in traces)),
        "dist": set().union(*(set(t["distributedInfo"]) for t in traces)),
        "pg": set().union(*(set(p) for t in traces for p in t["distributedInfo"]["pg_config"])),
        "cats": {
            (e.get("ph"), e.get("cat")) for t in traces for e in t["traceEvents"] if e.get("ph") in ("X", "i")
        },
        "args": args,
        "cpu_args": cpu_args,
        "threads": {n for t in traces for names in _threads(t).values() for n in names},
    }


def test_cpu_traces_have_the_structure_of_real_gloo_traces(cpu_job: Path) -> None:
    real = _shape(_real_gloo())
    sim = _shape(list(_latest(cpu_job).values()))
    assert sim["top"] == real["top"]
    assert sim["dist"] == real["dist"] and sim["pg"] == real["pg"]
    assert sim["cats"] - {("X", "cpu_op"), ("X", "user_annotation"), ("X", "Trace"), ("i", None)} == set()
    assert {c for c in real["cats"] if c[0] == "X"} >= {c for c in sim["cats"] if c[0] == "X"}
    kinds = {
        "pt_gloo_runloop",
        "process",
    }  # threads are gloo's runloops or named after the process (python, python3)
    assert (
        {re.sub(r"^python\d*$", "process", n) for n in sim["threads"]}
        == {re.sub(r"^python\d*$", "process", n) for n in real["threads"]}
        == kinds
    )
    common = set(sim["args"]) & set(real["args"])
    assert any(k[1].startswith("gloo:") for k in common) and any(k[1].startswith("c10d::") for k in common)
    optional = {
        "finished",
        "Sequence number",
        "Fwd thread id",
    }  # a gloo work still running when the profiler stopped
    for (
        key
    ) in common:  # (never in a simulated window); an op called under autograd (DTensor's tensor parallel)
        assert sim["args"][key] <= real["args"][key] and real["args"][key] - sim["args"][key] <= optional, key
    assert sim["cpu_args"] <= real["cpu_args"] | {"Sequence number", "Fwd thread id"}


def test_gpu_traces_have_the_structure_of_a_real_nccl_trace(gpu_job: Path) -> None:
    import gzip

    real_trace = json.loads(
        gzip.decompress(shared_path("gpu", "tracelens_b200", "eager_trace.json.gz").read_bytes())
    )
    sim_traces = list(_latest(gpu_job).values())
    for key in (
        "schemaVersion",
        "deviceProperties",
        "distributedInfo",
        "traceEvents",
        "baseTimeNanoseconds",
        "displayTimeUnit",
        "traceName",
        "trace_id",
    ):
        assert all(key in t for t in sim_traces) and key in real_trace
    assert {p for t in sim_traces for pg in t["distributedInfo"]["pg_config"] for p in pg} == {
        p for pg in real_trace["distributedInfo"]["pg_config"] for p in pg
    }
    real, sim = _shape([real_trace]), _shape(sim_traces)
    assert {c for c in sim["cats"] if c[0] == "X"} - {("X", "Trace")} <= {
        c for c in real["cats"] if c[0] == "X"
    }  # that file has no profiler span
    real_kernel = next(
        e
        for e in real_trace["traceEvents"]
        if e.get("cat") == "kernel" and e["name"].startswith("ncclDevKernel_")
    )
    sim_kernel = next(
        e
        for t in sim_traces
        for e in t["traceEvents"]
        if e.get("cat") == "kernel" and e["name"].startswith("ncclDevKernel_")
    )
    collective_args = {
        "Collective name",
        "In msg nelems",
        "Out msg nelems",
        "Group size",
        "dtype",
        "In split size",
        "Out split size",
        "Process Group Name",
        "Process Group Description",
        "Process Group Ranks",
    }
    if _with_args(gpu_job):
        assert set(sim_kernel["args"]) == set(real_kernel["args"])
        real_call = next(e for e in real_trace["traceEvents"] if e.get("name") == "record_param_comms")
        sim_call = next(e for t in sim_traces for e in _events(t, "record_param_comms"))
        assert set(sim_call["args"]) == set(real_call["args"])
        assert sim_call["args"]["Input type"][3:] == real_call["args"]["Input type"][3:]
    else:
        assert (
            set(sim_kernel["args"]) == set(real_kernel["args"]) - collective_args
        )  # older PyTorch: no collective args
    for key in set(sim["args"]) & set(real["args"]):
        assert sim["args"][key] == real["args"][key], key


def _transfers(schedule: str, pp: int, chunks: int, stage: int, m: int) -> set[str]:
    """The send and receive actions a multi-stage schedule names on ``stage``: a chunk receives activations from
    the chunk before it and gradients from the one after it, and sends them on, where that chunk is on another
    stage."""
    from paradiag.simulator.schedule import chunk_of, holder

    out, last = set(), pp * chunks - 1
    for c in range(chunks):
        g = chunk_of(schedule, pp, stage, c)
        before = g > 0 and holder(schedule, pp, g - 1) != stage
        after = g < last and holder(schedule, pp, g + 1) != stage
        for mb in range(m):
            out |= {f"PP:{g}RECV_F{mb}", f"PP:{g}SEND_B{mb}"} if before else set()
            out |= {f"PP:{g}SEND_F{mb}", f"PP:{g}RECV_B{mb}"} if after else set()
    return out


@pytest.mark.parametrize("device", ["cpu", "h100"])
def test_a_multi_stage_schedule_names_its_actions_and_its_passes_are_numbered_by_them(
    tmp_path: Path, device: str
) -> None:
    """torch.distributed.pipelining's multi-stage schedules (interleaved 1F1B here) name each action on the host:
    `PP:{stage}F{mb}` around a forward's compute, `PP:{stage}B{mb}` around a backward's, `PP:{stage}RECV_F{mb}`
    and `PP:{stage}SEND_B{mb}` (...) around its receives and sends. The simulator writes them
    so on a torch2 interleaved job (CPU: around the operators; GPU: around the launches), and the analysis takes
    each named action for a pass: its model chunk the place of its stage on the rank, its micro-batch the one
    named."""
    import paradiag

    out = tmp_path / device
    pp, chunks = 2, 2
    simulate(
        SimConfig(
            output=out,
            device=device,
            shape="torch2",
            pp=pp,
            schedule="interleaved",
            virtual_stages=chunks,
            seed=5,
            **{**MODEL, "microbatches": 4},
        )
    )
    trace = _latest(out)[1]
    named = {e["name"] for e in _events(trace, cat="user_annotation") if e["name"].startswith("PP:")}
    compute = {f"PP:{s}{d}{m}" for s in (1, 3) for d in "FB" for m in range(4)}
    assert named == compute | _transfers("interleaved", pp, chunks, 1, 4)
    passes = paradiag.open(out).diagnosis().passes.to_pylist()
    mine = [p for p in passes if p["rank"] == 1]
    steps = {p["step"] for p in mine}
    assert len(mine) == len(steps) * 2 * chunks * 4  # a pass per action
    for step in steps:
        seen = {(p["direction"], p["chunk"], p["micro_batch"]) for p in mine if p["step"] == step}
        assert seen == {(d, c, m) for d in ("forward", "backward") for c in range(chunks) for m in range(4)}


@pytest.mark.parametrize(("schedule", "chunks"), [("zb", 1), ("zb", 2), ("zbv", 2)])
def test_zero_bubble_schedules_split_each_backward_and_run_every_pass_once(
    tmp_path: Path, schedule: str, chunks: int
) -> None:
    """A zero-bubble schedule runs each micro-batch's backward as two actions: `I` (the inputs' gradients, which
    the previous stage waits for) and `W` (the weights', put off into the pipeline's bubbles). Every stage runs
    each of its chunks' F, I and W once per micro-batch, an I after its F, a W after its I; the V-shaped schedule
    holds chunks s and 2 pp - 1 - s on stage s (its last stage hands its data on to itself: no send, no receive
    there). The simulated CPU job names each action as torch.distributed.pipelining does and the analysis takes
    each for a pass of its direction."""
    import paradiag
    from paradiag.simulator import schedule as pipeline

    pp, m = 4, 4
    orders = pipeline.zero_bubble(schedule, pp, m, chunks)
    for order in orders:
        assert sorted(order) == sorted((p, mb, c) for p in "FIW" for mb in range(m) for c in range(chunks))
        at = {task: i for i, task in enumerate(order)}
        assert all(
            at[("F", mb, c)] < at[("I", mb, c)] < at[("W", mb, c)] for mb in range(m) for c in range(chunks)
        )
    held = {s: {pipeline.chunk_of(schedule, pp, s, c) for c in range(chunks)} for s in range(pp)}
    if schedule == "zbv":
        assert held == {0: {0, 7}, 1: {1, 6}, 2: {2, 5}, 3: {3, 4}}
    else:
        assert held == {s: {s + pp * c for c in range(chunks)} for s in range(pp)}
    out = tmp_path / f"{schedule}{chunks}"
    simulate(
        SimConfig(
            output=out,
            device="cpu",
            shape="torch2",
            pp=pp,
            schedule=schedule,
            virtual_stages=chunks,
            seed=5,
            **{
                **MODEL,
                "layers": 8,
                "microbatches": m,
                "hidden": 512,
                "seq_len": 512,
            },  # sends as long as a W
        )
    )
    traces = _latest(out)
    for rank, trace in traces.items():
        named = {e["name"] for e in _events(trace, cat="user_annotation") if e["name"].startswith("PP:")}
        compute = {f"PP:{g}{p}{mb}" for g in held[rank] for p in "FIW" for mb in range(m)}
        assert named == compute | _transfers(schedule, pp, chunks, rank, m)
        receives = _events(trace, name="c10d::recv_")
        # Every chunk receives activations unless it is the model's first (or follows on its own stage), and
        # gradients unless it is the model's last (or precedes on its own stage).
        first = [g for g in held[rank] if g > 0 and pipeline.holder(schedule, pp, g - 1) != rank]
        last = [g for g in held[rank] if g < pp * chunks - 1 and pipeline.holder(schedule, pp, g + 1) != rank]
        assert len(receives) == 2 * m * (len(first) + len(last)), rank  # two profiled steps
        assert _overlaps(trace) == [], rank  # no send held over the weight gradients that follow it
    passes = paradiag.open(out).diagnosis().passes.to_pylist()
    for rank in traces:
        mine = [p for p in passes if p["rank"] == rank and p["step"] == 1]
        assert sorted((p["direction"], p["chunk"], p["micro_batch"]) for p in mine) == sorted(
            (d, c, mb) for d in ("forward", "backward", "backward") for c in range(chunks) for mb in range(m)
        )
