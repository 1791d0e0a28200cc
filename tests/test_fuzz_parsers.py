"""Fuzzing the parsers: damaged copies of small well-formed traces (tests/fuzzing.py) never raise anything but
paradiag's documented errors, never give an "internal error", and never cost the intact rank beside them.

Bounded to about 25 s here: 150 cases in a fixed, derandomized sequence, plus the cases that once failed;
``benchmarks/fuzz.py`` runs thousands and prints the counts. A failure names the seed and the case number:
``run_case(seed, number, folder)`` replays it.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

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
    "ascend:msprof": [1000012, 1000035, 1000045, 1000196, 1000213, 3000027, 2000010],
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


@pytest.mark.parametrize(
    "name", sorted(n for names in SEEDS_OF.values() for n in names if n.startswith("ascend:"))
)
def test_ascend_parsers_survive_mutations(tmp_path: Path, name: str, ascend: dict[str, Seed]) -> None:
    seed = _seed(ascend, name, tmp_path / "case")

    @settings(max_examples=15, **SETTINGS)  # type: ignore[arg-type]
    @given(CASE_NUMBERS)
    def case(number: int) -> None:
        run_case(seed, number, tmp_path / "case")

    case()


def _timeline_cases() -> list[tuple[str, Any]]:
    """Damage to a timeline that once gave an "internal error" (each fixed as a class): cut after a few events
    (valid JSON: a profile stopped early, its HCCL and device events never written) and times beyond any int64."""

    def cut(n: int) -> Any:
        return lambda events: events[:n]

    def extreme(field: str, value: Any) -> Any:
        def edit(events: list[Any]) -> list[Any]:
            for e in events:
                if isinstance(e, dict) and e.get("ph") == "X":
                    e[field] = value
                    break
            return events

        return edit

    cases = [(f"cut to {n} events", cut(n)) for n in (0, 1, 10, 100)]
    return cases + [
        (f"{f} = {v!r}", extreme(f, v))
        for f in ("ts", "dur")
        for v in (1e308, -1e308, "1e308", 10**30, "inf")
    ]


def _rank_pair(kind: str, work: Path) -> list[Path]:
    """Two rank folders of ``kind`` made from the bundled NPU sample (the second one gets damaged)."""
    from tests.fuzzing import REPO
    from tests.helpers import make_prof

    sample = sorted((REPO / "sample_traces" / "npu_slow_link").glob("*_ascend_pt"))[:2]
    if kind == "msprof":
        return [
            make_prof(work, rank, f"PROF_00000{r}_20250109155803704_ABCDEFG{r}")
            for r, rank in enumerate(sample)
        ]
    suffix = "_ascend_ms" if kind == "mindspore" else "_ascend_pt"
    out = [work / rank.name.replace("_ascend_pt", suffix) for rank in sample]
    for src, dst in zip(sample, out, strict=True):
        shutil.copytree(src, dst)
    return out


@pytest.mark.parametrize("kind", ["text", "mindspore", "msprof"])
@pytest.mark.parametrize(("label", "damage"), _timeline_cases(), ids=[c[0] for c in _timeline_cases()])
def test_a_cut_or_out_of_range_timeline_is_a_named_problem(
    tmp_path: Path, kind: str, label: str, damage: Any
) -> None:
    from paradiag import ingest

    job = tmp_path / "job"
    job.mkdir()
    ranks = _rank_pair(kind, job)
    timelines = [
        p for p in ranks[1].rglob("*.json") if p.name == "trace_view.json" or p.name.startswith("msprof_")
    ]
    assert timelines
    for timeline in timelines:
        timeline.write_text(json.dumps(damage(json.loads(timeline.read_text()))))
    parsed = ingest.ingest(job, tmp_path / "cache", workers=1)
    assert not [p for p in parsed.problems if "internal error" in p.message], (
        label,
        [p.message[:300] for p in parsed.problems],
    )
    assert parsed.events().num_rows > 0
