"""How a compute culprit is classified (analysis.findings.far_slower): an operator hotspot, told by ratios, against
a slower device or a rank (stage) with more work of every kind."""

from __future__ import annotations

from paradiag.analysis.findings import HOTSPOT_REST, HOTSPOT_REST_HOST, far_slower


def _split(own: dict[int, float], peer: dict[int, float]) -> tuple[dict[int, float], dict[int, float]]:
    return {n: own[n] - peer[n] for n in own}, own


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


def test_on_cpu_ranks_only_dispatcher_operators_can_be_hot() -> None:
    """A dispatch mode's glue (PythonDispatchMode, absent on the peers) carries most of a slowed rank's extra time."""
    names = ["aten::mm", "aten::addmm", "PythonDispatchMode"]
    peer = {0: 6.0, 1: 4.0, 2: 0.0}
    own = {0: 7.0, 1: 4.3, 2: 7.0}
    excess, own = _split(own, peer)
    assert far_slower(excess, own, HOTSPOT_REST_HOST) == [2]  # by ratios alone the glue is hot ...
    assert far_slower(excess, own, HOTSPOT_REST_HOST, names) == []  # ... but it is no operator
