"""Fuzzing the parsers: damaged copies of small well-formed traces (tests/fuzzing.py) never raise anything but
paradiag's documented errors, never give an "internal error", and never cost the intact rank beside them.

Bounded to about 25 s here: 150 cases in a fixed, derandomized sequence, plus the cases that once failed;
``benchmarks/fuzz.py`` runs thousands and prints the counts. A failure names the seed and the case number:
``run_case(seed, number, folder)`` replays it.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import TRACES
from tests.fuzzing import SEEDS_OF, Seed, ascend_seeds, kineto_seeds, run_case

CASE_NUMBERS = st.integers(min_value=0, max_value=2**32 - 1)
SETTINGS = {
    "deadline": None,
    "database": None,
    "derandomize": True,
    "suppress_health_check": [HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
}
# Cases that once failed (each fixed): replayed first, every run.
REGRESSIONS = {
    "kineto:helper": [126, 148, 538],
    "ascend:text": [5, 7, 10, 29, 56, 64, 251, 276],
    "ascend:db": [8, 32, 48, 138, 2000231],
    "ascend:msprof": [1000012, 1000035, 1000045, 1000196, 1000213, 3000027],
}
KINETO = {s.name: s for s in kineto_seeds()}


@pytest.fixture(scope="module")
def ascend(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Seed]:
    npu = TRACES / "npu"
    return {s.name: s for s in ascend_seeds(npu if npu.is_dir() else None, tmp_path_factory.mktemp("seeds"))}


def _seed(seeds: dict[str, Seed], name: str, work: Path) -> Seed:
    if name not in seeds:
        pytest.skip(f"seed {name} is not available here")
    for number in REGRESSIONS.get(name, []):
        run_case(seeds[name], number, work)
    return seeds[name]


@pytest.mark.parametrize("name", ["kineto:helper", "kineto:sample"])
def test_kineto_parser_survives_mutations(tmp_path: Path, name: str) -> None:
    seed = _seed(KINETO, name, tmp_path / "case")

    @settings(max_examples=60, **SETTINGS)  # type: ignore[arg-type]
    @given(CASE_NUMBERS)
    def case(number: int) -> None:
        run_case(seed, number, tmp_path / "case")

    case()


def test_every_registered_reader_is_fuzzed(ascend: dict[str, Seed]) -> None:
    """Each reader discover.parsers() registers has its seeds, and those that need no shared trace are built."""
    from paradiag import discover

    assert set(SEEDS_OF) == {m.__name__ for m in discover.parsers()}
    built = set(KINETO) | set(ascend)
    needs_shared = {"ascend:db", "ascend:mindspore_db"}
    assert {name for names in SEEDS_OF.values() for name in names} - needs_shared <= built


@pytest.mark.parametrize("name", sorted(n for names in SEEDS_OF.values() for n in names if n.startswith("ascend:")))
def test_ascend_parsers_survive_mutations(tmp_path: Path, name: str, ascend: dict[str, Seed]) -> None:
    seed = _seed(ascend, name, tmp_path / "case")

    @settings(max_examples=15, **SETTINGS)  # type: ignore[arg-type]
    @given(CASE_NUMBERS)
    def case(number: int) -> None:
        run_case(seed, number, tmp_path / "case")

    case()
