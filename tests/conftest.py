"""Shared fixtures: where the real traces are, a private cache folder per test, the two-host job and its local
cache (a module of its own each, as the Dask and remote-cache tests compare their caches with it); and which tests
are slow.

``make unit`` (``pytest --unit``) runs the tests marked none of ``slow``, ``browser``, ``real`` and ``peer``
(UNIT_MARKERS), in under a minute; ``make test`` runs them all: those under coverage, then the others
(``pytest --not-unit``). A test is a unit test unless marked: in its file (``pytestmark`` or a
decorator) or here, by file (SLOW_FILES), by a module fixture that makes something big (SLOW_FIXTURES: every
test that uses it) or by function, every parametrization (SLOW_TESTS). A unit run lists the
unmarked tests that took longer than UNIT_BUDGET_S (a note, never a failure: timings are the benchmarks' business),
and the names here that no longer match a test."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
TRACES = SHARED / "traces"
REFERENCE = SHARED / "reference"


def shared_path(*parts: str) -> Path:
    """A path under ../shared/traces; the test is skipped (with the reason) when it is absent."""
    path = TRACES.joinpath(*parts)
    if not path.exists():
        pytest.skip(
            f"real traces not available: {path} is absent (they live in ../shared/traces beside the repo)"
        )
    return path


@pytest.fixture(autouse=True)
def private_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test gets its own cache root, so no test reads another's cache (or the user's)."""
    root = tmp_path_factory.mktemp("cache")
    monkeypatch.setenv("PARADIAG_CACHE_DIR", str(root))
    return root


@pytest.fixture(scope="module")
def sim_job(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.helpers import two_host_job

    return two_host_job(tmp_path_factory.mktemp("sim") / "job")


@pytest.fixture(scope="module")
def local_cache(sim_job: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from paradiag import ingest

    cache = tmp_path_factory.mktemp("local") / "cache"
    ingest.ingest(sim_job, cache, workers=1)
    return cache


# The markers a unit run (make unit) deselects.
UNIT_MARKERS = ("slow", "browser", "real", "peer")
UNIT_BUDGET_S = (
    1.5  # a test longer than this (setup, call and teardown, on a busy 2-core machine) is marked slow
)

# Whole files marked slow: what each one's tests need.
SLOW_FILES = {
    "test_fuzz_parsers.py": "mutates every parser's input hundreds of times",
    "test_remote_cache.py": "an S3 server (moto) on loopback and ingests into it",
    "test_dask.py": "local Dask clusters",
    "test_app_warm.py": "warms every view of a job",
    "test_core_install.py": "a fresh interpreter per command",
}
# Module fixtures that open or build something big: every test that uses one is slow.
SLOW_FIXTURES = {
    "test_focus.py": ["jobs"],  # every bundled sample
    "test_app_timeline_folds.py": ["served"],  # a simulated job served by an app
    "test_export_perfetto.py": ["exported"],  # a job exported to Perfetto
}
# Single test functions (every parametrization) marked slow: each ingests bundled samples or simulated jobs large
# enough for its fault, or runs a parse pool (above UNIT_BUDGET_S when measured).
SLOW_TESTS = {
    "test_alignment.py": ["test_recovers_the_simulators_clock_skew_across_nodes"],
    "test_analysis_report.py": [
        "test_sample_report_matches_schema",
        "test_schema_rejects_an_unknown_finding_kind",
    ],
    "test_analysis_units.py": ["test_send_recv_peers_inferred_without_rank"],
    "test_app_callbacks.py": [
        "test_opening_a_job_opens_on_its_top_finding",
        "test_picking_a_baseline_compares_and_names_the_culprit",
        "test_the_first_screen_follows_the_fault_of_any_job",
    ],
    "test_app_compare_reach.py": ["test_paradiag_compare_refuses_a_mismatch_with_exit_2_and_says_why"],
    "test_app_critical_path_views.py": [
        "test_a_zoomed_window_shows_the_path_in_more_detail",
        "test_the_path_runs_along_the_slow_ranks_row",
        "test_the_snapshot_draws_the_path_and_says_so",
    ],
    "test_app_flow_collapse.py": [
        "test_each_direction_of_a_pipeline_is_one_block_of_its_passes",
        "test_more_layers_lengthen_a_pass_not_the_row",
        "test_samples_open_within_the_visible_budget",
    ],
    "test_app_pipeline_views.py": [
        "test_a_large_stage_reads_the_devices_that_can_differ_and_draws_the_others_with_their_row",
        "test_flow_blocks_open_one_at_a_time",
        "test_marey_bars_answer_the_mouse_and_a_click_outlines_one_instance",
        "test_marey_folds_alike_devices_and_opens_one_stage_at_a_time",
        "test_marey_marks_the_slow_rank_of_gpu_llm_slow_rank",
        "test_matrix_aggregates_above_its_size_and_opens_a_block",
    ],
    "test_app_signin_throttle.py": ["test_many_names_from_one_address_lock_that_address_out"],
    "test_app_store.py": ["test_every_aggregate_of_the_pages_round_trips"],
    "test_app_timeline_folds.py": [
        "test_a_click_on_a_folded_row_opens_it_and_the_state_survives_a_step_change",
        "test_alike_ranks_fold_and_the_culprit_stays_single",
    ],
    "test_app_views2.py": ["test_zoomed_out_timeline_merges_waits_to_screen_resolution_too"],
    "test_bad_input.py": [
        "test_bad_values_become_a_named_problem",
        "test_killed_ingest_takes_its_workers_along_and_the_next_ingest_cleans_up",
        "test_long_names_are_refused",
        "test_unreadable_files_and_folders_are_named_and_skipped",
    ],
    "test_critical_path.py": [
        "test_analyze_prints_the_path_of_each_step",
        "test_host_stall_is_host_time_on_the_stalled_rank",
        "test_report_has_the_path_per_step",
        "test_slow_device_puts_the_path_on_the_culprit",
        "test_slow_link_is_communication_on_its_ranks",
    ],
    "test_diagnosis.py": [
        "test_a_diagnosis_from_another_analysis_version_is_computed_again",
        "test_cache_without_its_source_gives_the_same_report_snapshot_and_views",
        "test_the_maps_frames_are_not_uploaded_to_a_cache_at_a_url",
        "test_rank_step_figures_carry_stage_z_scores",
        "test_the_reduce_at_ingest_reads_the_maps_frames_which_are_the_events_frames",
        "test_the_report_reads_the_stored_diagnosis_and_no_event",
    ],
    "test_export_perfetto.py": ["test_export_reads_back_aligned_with_every_event"],
    "test_focus.py": ["test_a_job_without_findings_says_so"],
    "test_ingest_failures.py": [
        "test_a_rank_failing_twice_is_a_problem_naming_its_file",
        "test_a_rank_whose_worker_fails_once_is_parsed_again",
    ],
    "test_kineto_stream.py": ["test_pretty_printed_trace_reads_like_the_compact_one"],
    "test_safepath.py": ["test_any_text_is_refused_or_resolves_inside"],
    "test_simulator_samples.py": ["test_sample_parses_and_is_small"],
    "test_simulator_torch2.py": [
        "test_gpu_job_is_shaped_as_nccl_records_it",
        "test_gpu_traces_have_the_structure_of_a_real_nccl_trace",
        "test_cpu_traces_have_the_structure_of_real_gloo_traces",  # reads a real gloo job where one lies
    ],
    "test_snapshot.py": [
        "test_compare_names_the_injected_culprit_as_top_change",
        "test_fault_free_sample_passes",
    ],
    "test_typed_shapes.py": [
        "test_the_report_is_its_typeddict",
        "test_the_comparison_is_its_typeddict_compared_or_refused",
        "test_the_heatmap_and_step_chart_data_are_their_typeddicts",
        "test_the_timeline_data_are_their_typeddicts_single_ranks_folds_and_the_path",
    ],
    "test_whatif.py": [
        "test_a_factor_scales_the_culprit",
        "test_edits_leave_the_graph_as_the_traces_have_it",
        "test_finding_what_if_predicts_the_fault_free_run",
        "test_host_stall_in_a_gpipe_pipeline",
        "test_replay_without_edits_gives_back_the_traces",
        "test_slow_tensor_parallel_link_in_an_interleaved_pipeline",
        "test_tokens_spread_evenly_predict_the_balanced_experts",
        "test_whatif_command",
        "test_whole_layers_moved_predict_the_run_of_that_split",
    ],
}

_durations: defaultdict[str, float] = defaultdict(float)
_unmarked: set[str] = set()
_stale: list[str] = []


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--unit",
        action="store_true",
        help="only the fast tests: those marked none of " + ", ".join(UNIT_MARKERS),
    )
    parser.addoption(
        "--not-unit", action="store_true", help="only the others (with --unit's run: the whole suite)"
    )


@pytest.hookimpl(tryfirst=True)  # before -m deselects by the markers added here
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    named = {(file, name) for file, names in SLOW_TESTS.items() for name in names}
    fixtures = {(file, name) for file, names in SLOW_FIXTURES.items() for name in names}
    seen_files, seen = set(), set()
    for item in items:
        file = item.path.name
        name = getattr(item, "originalname", item.name)
        used = {(file, f) for f in getattr(item, "fixturenames", ())} & fixtures
        if file in SLOW_FILES:
            seen_files.add(file)
            item.add_marker(pytest.mark.slow)
        elif (file, name) in named or used:
            seen |= {(file, name)} & named | used
            item.add_marker(pytest.mark.slow)
        if not any(item.get_closest_marker(m) for m in UNIT_MARKERS):
            _unmarked.add(item.nodeid)
    # A name here that matches no collected test (renamed, removed) is stale: said at the end of the run. Only
    # when the run collected that file at all (a run of one file says nothing about the others).
    collected = {item.path.name for item in items}
    _stale.extend(f"{f} (SLOW_FILES)" for f in SLOW_FILES if f in collected and f not in seen_files)
    _stale.extend(
        f"{f}::{n} (SLOW_TESTS or SLOW_FIXTURES)"
        for f, n in sorted((named | fixtures) - seen)
        if f in collected
    )
    for option, wanted in (("unit", True), ("not_unit", False)):
        if config.getoption(option):
            dropped = [item for item in items if (item.nodeid in _unmarked) != wanted]
            if dropped:
                config.hook.pytest_deselected(items=dropped)
                items[:] = [item for item in items if (item.nodeid in _unmarked) == wanted]


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    _durations[report.nodeid] += report.duration


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    slow = sorted(
        ((t, n) for n, t in _durations.items() if n in _unmarked and t > UNIT_BUDGET_S), reverse=True
    )
    if slow:
        terminalreporter.write_sep(
            "-", f"unit tests over {UNIT_BUDGET_S} s: mark them slow (tests/conftest.py SLOW_TESTS)"
        )
        for t, n in slow:
            terminalreporter.write_line(f"{t:6.2f} s {n}")
    if _stale:
        terminalreporter.write_sep("-", "tests/conftest.py names tests that do not exist")
        for n in _stale:
            terminalreporter.write_line(n)
