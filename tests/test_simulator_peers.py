"""Realism checks against the peers, each run from its own virtual environment: Meta's HTA loads the simulated
Kineto folder and computes its temporal breakdown; msprof-analyze's cluster analysis runs on the simulated
Ascend folders and its per-rank step figures agree with the simulator's own within 1%."""

from __future__ import annotations

import csv
import json
import os
import subprocess
from pathlib import Path

import pytest

from paradiag.simulator import SimConfig, parse_fault, simulate
from paradiag.simulator.groundtruth import read as read_truth

pytestmark = pytest.mark.peer

HTA_PYTHON = Path(os.environ.get("PARADIAG_HTA_PYTHON", "/tmp/venv-hta/bin/python"))
MSPROF = Path(os.environ.get("PARADIAG_MSPROF", "/tmp/venv-msprof/bin/msprof-analyze"))
JOB = {"dp": 2, "tp": 2, "pp": 2, "microbatches": 4, "steps": 2, "layers": 4, "hidden": 1024, "seq_len": 1024}

HTA_SCRIPT = """
import json, sys
from hta.trace_analysis import TraceAnalysis
df = TraceAnalysis(trace_dir=sys.argv[1]).get_temporal_breakdown(visualize=False)
print(json.dumps(df.to_dict(orient="records")))
"""


@pytest.mark.skipif(
    not HTA_PYTHON.is_file(), reason=f"HTA's interpreter {HTA_PYTHON} is absent (set PARADIAG_HTA_PYTHON)"
)
def test_hta_temporal_breakdown(tmp_path: Path) -> None:
    job = simulate(
        SimConfig(
            output=tmp_path / "job", gzip=True, faults=(parse_fault("slow_device:ranks=5,factor=1.5"),), **JOB
        )
    )
    # HTA maps every *.json in the folder to a rank (a file without one becomes rank 0), so it gets the traces only
    traces = tmp_path / "traces"
    traces.mkdir()
    for f in job.glob("rank*.pt.trace.json.gz"):
        (traces / f.name).symlink_to(f)
    done = subprocess.run(
        [str(HTA_PYTHON), "-W", "ignore", "-c", HTA_SCRIPT, str(traces)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    rows = {r["rank"]: r for r in json.loads(done.stdout.strip().splitlines()[-1])}
    assert sorted(rows) == list(range(8))
    for r in rows.values():
        assert r["kernel_time(us)"] > 0 and 0 <= r["idle_time_pctg"] < 50
    # the slow rank computes most; its tensor-parallel peer (rank 4) waits, so spends more time in collectives
    assert rows[5]["compute_time(us)"] > 1.3 * rows[4]["compute_time(us)"]
    assert rows[4]["non_compute_time(us)"] > rows[6]["non_compute_time(us)"]


@pytest.mark.skipif(not MSPROF.is_file(), reason=f"msprof-analyze {MSPROF} is absent (set PARADIAG_MSPROF)")
def test_msprof_cluster_step_trace_agrees(tmp_path: Path) -> None:
    job = simulate(
        SimConfig(
            output=tmp_path / "job",
            device="910b",
            format="ascend",
            faults=(parse_fault("slow_link:ranks=1-5,factor=4"),),
            **JOB,
        )
    )
    out = tmp_path / "msprof"
    done = subprocess.run(
        [str(MSPROF), "cluster", "-d", str(job), "-m", "all", "-o", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "cannot be mapped" not in done.stdout + done.stderr
    with open(out / "cluster_analysis_output" / "cluster_step_trace_time.csv", newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["Type"] == "rank"]
    truth = read_truth(job)
    assert {int(r["Index"]) for r in rows} == set(range(8))
    for r in rows:
        rank, step = int(r["Index"]), int(r["Step"])
        assert float(r["Computing"]) == pytest.approx(truth["compute_us"][str(rank)][step], rel=0.01)
        # the device is busy (compute, communication or a short gap) for the whole host step but its edges
        busy = float(r["Stage"]) + float(r["Bubble"])
        assert busy == pytest.approx(truth["step_time_us"][str(rank)][step] - float(r["Preparing"]), rel=0.01)
        stage, tp = truth["layout"]["coords"][rank]["pp"], truth["layout"]["coords"][rank]["tp"]
        assert (int(r["PP Index"]), int(r["TP Index"])) == (stage, tp)
