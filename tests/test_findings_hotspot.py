"""How a compute culprit is classified (analysis.findings.far_slower): an operator hotspot, told by ratios, against
a slower device or a rank (stage) with more work of every kind."""

from __future__ import annotations

from typing import Any

import pytest

from paradiag.analysis import findings
from paradiag.analysis.findings import HOTSPOT_REST, HOTSPOT_REST_HOST, far_slower
from paradiag.analysis.frame import device_frame
from tests.helpers import host_events


def _split(own: dict[int, float], peer: dict[int, float]) -> tuple[dict[int, float], dict[int, float]]:
    return {n: own[n] - peer[n] for n in own}, own


def _named(times: dict[str, tuple[float, float]]) -> tuple[list[str], dict[int, float], dict[int, float]]:
    """Names, extra time and own time per name code, from ``times``: name -> (own time, the peers' time)."""
    names = list(times)
    excess, own = _split(
        {i: times[n][0] for i, n in enumerate(names)}, {i: times[n][1] for i, n in enumerate(names)}
    )
    return names, excess, own


PEER = {0: 6.0, 1: 4.0, 2: 0.3, 3: 0.4, 4: 0.05, 5: 1.0}  # mm, addmm, gelu, gelu_backward, fill_, copy_ (ms)


def test_a_hotspot_that_outweighs_the_rest_of_the_work_is_one() -> None:
    """A GELU made 24x as big, with its backward and its gradient's fill: the hot operators are 70 % of the rank's
    time, and the GEMMs beside them run 20 % slower (caches and cores shared with the hot ones on a CPU rank)."""
    own = {0: 7.2, 1: 4.8, 2: 7.0, 3: 9.0, 4: 2.0, 5: 1.1}
    excess, own = _split(own, PEER)
    assert far_slower(excess, own, HOTSPOT_REST_HOST) == [3, 2, 4]
    assert far_slower(excess, own, HOTSPOT_REST) == []  # on a GPU the rest must run within 5 %


def test_a_hotspot_on_a_rank_whose_rest_runs_slower_too_is_one_on_cpu_ranks() -> None:
    """pp2, the hot rank's GELU 24x (gelu and its backward 67-80x the other stage's) while its GEMMs run 1.7x on a
    shared core: the hot operators carry three quarters of its extra time."""
    own = {0: 10.2, 1: 6.8, 2: 24.0, 3: 27.0, 4: 0.05, 5: 1.7}
    excess, own = _split(own, PEER)
    assert far_slower(excess, own, HOTSPOT_REST_HOST) == [3, 2]


def test_a_uniformly_slower_device_or_twice_the_layers_is_no_hotspot() -> None:
    for factor in (1.5, 1.9, 2.1, 3.0):  # every operator slower alike (noise: +-10 % per operator)
        own = {n: t * factor * (1.1 if n % 2 else 0.9) for n, t in PEER.items()}
        excess, own = _split(own, PEER)
        assert far_slower(excess, own, HOTSPOT_REST_HOST) == [], factor


def test_a_slower_rank_whose_many_small_operators_run_far_slower_is_no_hotspot() -> None:
    """A real DDP CPU rank slowed under a dispatch mode with AdamW (foreach) and bf16 autocast
    (``ddp_slow_rank_s50_usual``, us per step, own vs its peers'): its GEMMs 1.8-2.3x, the optimizer's foreach calls
    30-44x (the mode runs them a tensor at a time), transposes and views 8x. Twenty operators run beyond twice its
    typical operator and together carry half its extra time, the largest 8 % of it: a slower rank, not a
    hotspot of ``_foreach_mul_ + _foreach_sqrt + t``. The same rank with a GELU that carries most of its extra time
    (80x its peers') has one."""
    times = {
        "aten::addmm": (3232.7, 1421.0),
        "aten::mm": (2800.8, 1536.1),
        "aten::_foreach_mul_": (808.0, 24.9),
        "aten::_foreach_sqrt": (618.0, 13.9),
        "aten::t": (594.9, 73.4),
        "aten::_foreach_addcdiv_": (515.2, 15.9),
        "aten::_foreach_lerp_": (414.5, 13.4),
        "aten::_foreach_addcmul_": (353.3, 10.7),
        "aten::_foreach_div_": (300.0, 9.5),
        "aten::_foreach_norm": (280.0, 9.0),
        "aten::detach": (260.0, 30.0),
        "aten::view": (240.0, 28.0),
        "aten::as_strided": (220.0, 26.0),
        "aten::_foreach_add_": (200.0, 7.0),
        "aten::gelu": (300.0, 150.0),
        "aten::gelu_backward": (320.0, 160.0),
    }
    names, excess, own = _named(times)
    assert len([n for n in excess if own[n] / (own[n] - excess[n]) >= 4]) >= 10
    assert far_slower(excess, own, HOTSPOT_REST_HOST, names) == []
    gelu = names.index("aten::gelu")
    own[gelu], excess[gelu] = 150.0 * 80, 150.0 * 79
    assert far_slower(excess, own, HOTSPOT_REST_HOST, names)[0] == gelu


def test_a_rank_slower_in_every_operator_whose_ratios_scatter_is_no_hotspot() -> None:
    """A real dp2 x tp4 CPU rank slowed in every operator (``mesh_dp_tp_slow_rank_s14``, ms per step, own vs its
    peers'): its GEMMs 1.35-2.0x, its other operators scattered 2.2-4x on a shared host, DTensor's wrappers
    1.1-1.4x. Its slowest few, set aside, leave a rest near its peers' pace, but they run less than twice its
    typical operator (the weighted median ratio, 2.0): a slower rank, not a hotspot of ``t + view + ...``."""
    times = {
        "aten::mm": (1.124, 0.561),
        "aten::t": (0.619, 0.233),
        "aten::addmm": (0.579, 0.428),
        "aten::view": (0.415, 0.104),
        "_FromTorchTensor": (0.393, 0.349),
        "aten::gelu_backward": (0.36, 0.151),
        "aten::mse_loss_backward": (0.347, 0.134),
        "_ToTorchTensorBackward": (0.33, 0.232),
        "NestedRedistribute": (0.266, 0.242),
        "aten::sum": (0.249, 0.095),
        "aten::gelu": (0.238, 0.109),
        "aten::detach": (0.213, 0.09),
        "aten::div_": (0.179, 0.049),
        "aten::mse_loss": (0.149, 0.123),
        "aten::add_": (0.148, 0.046),
        "aten::ones_like": (0.117, 0.002),
        "aten::randn": (0.104, 0.002),
        "aten::normal_": (0.082, 0.082),
        "aten::slice": (0.064, 0.008),
    }
    names, excess, own = _named(times)
    assert far_slower(excess, own, HOTSPOT_REST_HOST, names) == []
    # The same rank with a GELU 24x its peers' has a hotspot all the same.
    gelu = names.index("aten::gelu")
    own[gelu], excess[gelu] = 2.6, 2.6 - times["aten::gelu"][1]
    assert far_slower(excess, own, HOTSPOT_REST_HOST, names)[0] == gelu


def test_on_cpu_ranks_only_dispatcher_operators_can_be_hot() -> None:
    """A dispatch mode's glue (PythonDispatchMode, absent on the peers) carries most of a slowed rank's extra time."""
    names = ["aten::mm", "aten::addmm", "PythonDispatchMode"]
    peer = {0: 6.0, 1: 4.0, 2: 0.0}
    own = {0: 7.0, 1: 4.3, 2: 7.0}
    excess, own = _split(own, peer)
    assert far_slower(excess, own, HOTSPOT_REST_HOST) == [2]  # by ratios alone the glue is hot ...
    assert far_slower(excess, own, HOTSPOT_REST_HOST, names) == []  # ... but it is no operator


def test_a_cpu_rank_below_the_hosts_noise_band_is_a_hotspot_only_where_a_few_operators_carry_it() -> None:
    """4 CPU ranks, 3 steps of one GEMM (40 ms) and one GELU (1.5 ms) each. A GELU 5x as long on rank 2 (a
    simulated 256-rank CPU job's flash attention 3x on one rank: compute 1.16x its peers', the step 3.8 % longer)
    is an operator hotspot, though its compute is within the 1.2x that CPU ranks sharing a host's cores vary by.
    The same 1.145x spread over every operator (a rank on a busier core) is not a finding."""
    ms = 1_000_000
    host = frozenset(range(4))

    def job(
        gemm: dict[int, float], gelu: dict[int, float]
    ) -> tuple[Any, dict[tuple[int, int], dict[str, int]]]:
        rows, figures = [], {}
        for r in range(4):
            for s in range(3):
                t0 = s * 100 * ms
                a, b = int(gemm.get(r, 40.0) * ms), int(gelu.get(r, 1.5) * ms)
                rows += [
                    {"name": "aten::mm", "start_ns": t0, "dur_ns": a, "rank": r, "step": s, "external_id": 2 * s + 1},
                    {"name": "aten::gelu", "start_ns": t0 + a, "dur_ns": b, "rank": r, "step": s, "external_id": 2 * s + 2},
                ]  # fmt: skip
                figures[(r, s)] = {"compute_ns": a + b, "launch_delay_ns": 0, "step_ns": 100 * ms}
        return device_frame(host_events(rows)), figures

    frame, figures = job({}, {2: 7.5})
    found = findings.rank_findings(frame, figures, [[0, 1, 2, 3]], {}, {}, 100 * ms, host)
    assert [(f.kind, f.culprit.ranks) for f in found] == [("operator_hotspot", [2])]
    assert "gelu" in (found[0].culprit.operator or "")
    frame, figures = job({2: 40.0 * 1.145}, {2: 1.5 * 1.145})
    assert findings.rank_findings(frame, figures, [[0, 1, 2, 3]], {}, {}, 100 * ms, host) == []
    # The hot rank also held in its autograd frames, far beyond its compute's excess (a real DDP job on a busy
    # host: 0.05, 5.8 and 41 ms in AccumulateGrad against its peers' 0.03): both are reported. Frames held far
    # beyond a rank's compute once meant its compute ran cold after them, slower alike in every operator; a GELU
    # 10x as long is no cold cache. The hold costs its typical step (5.8 ms, the median), not its mean with the
    # scheduler's 41 ms in it (15.6 ms, above the hotspot's 13.5): the hotspot comes first.
    frame, figures = job({}, {2: 15.0})
    for (r, s), fig in figures.items():
        fig["hooks_ns"] = int((0.05, 5.8, 41.0)[s] * ms) if r == 2 else int(0.03 * ms)
    found = findings.rank_findings(frame, figures, [[0, 1, 2, 3]], {}, {}, 100 * ms, host)
    assert [f.kind for f in findings.ranked(found)] == ["operator_hotspot", "host_stall"]
    assert next(f for f in found if f.kind == "host_stall").impact_pct == pytest.approx(5.77, abs=0.01)
