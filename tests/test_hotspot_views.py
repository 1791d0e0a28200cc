"""An operator hotspot shown in its own terms (issue 23): the heatmap's and Marey's reason names the hot operator and
how many times its peers' time it runs, and the device detail lists the operators that stand out from the peers'
first, marked, its durations opening on the hottest (the rank's largest operators are communication kernels, which
once hid it fifth in the list, behind a distribution of ncclDevKernel_SendRecv)."""

from __future__ import annotations

from pathlib import Path

import paradiag
from paradiag.analysis.focus import focus_of
from paradiag.app.data.detail import detail_data
from paradiag.app.figures.detail import operators_figure
from paradiag.simulator import SimConfig, parse_fault, simulate


def test_a_hotspot_is_named_by_its_operator_in_the_reasons_and_first_in_the_detail(tmp_path: Path) -> None:
    fault = parse_fault("operator_hotspot:ranks=5,operator=flash_attention,factor=4")
    folder = simulate(
        SimConfig(output=tmp_path / "hot", dp=4, tp=2, layers=4, steps=2, seed=3, faults=(fault,))
    )
    job = paradiag.open(folder, cache_dir=tmp_path / "cache")
    f = focus_of(job.diagnosis())
    assert (f.kind, f.ranks) == ("operator_hotspot", [5])
    reason = f.reasons[5]
    assert reason.startswith("flash_") and reason.endswith("x") and 3.0 < float(reason.split()[-1][:-1]) < 5.0
    data = detail_data(job, 5, f.step if f.step is not None else 0)
    first = data["operators"][:2]
    assert all(o["standout"] and "flash_" in o["name"] for o in first)
    assert not any(o["standout"] for o in data["operators"][2:])
    assert data["operator"] == first[0]["name"]  # the durations open on the hottest
    labels = list(operators_figure(data).data[0].y)
    assert labels[-1].startswith("▲ flash_") and labels[-1].endswith(
        "x"
    )  # the top row, marked with its ratio
