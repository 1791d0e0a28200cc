"""The job page's views as units (``paradiag.app.views``), read from the Dash callback graph: each view's figures
hang on its own selection stores, nothing but the reducer hears the whole selection, and a gesture reaches the
graphs of the views whose fields it changed and no other."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from paradiag.app import ids
from paradiag.app.selection import Selection, view_store

SAMPLE = "gpu_llm_slow_rank"


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Any:
    from paradiag.app.config import Config
    from paradiag.app.factory import create_app

    root = tmp_path_factory.mktemp("app")
    mp = pytest.MonkeyPatch()
    mp.setenv("PARADIAG_CACHE_DIR", str(root / "cache"))
    yield create_app(Config.from_env(upload_dir=root / "uploads", app_cache_dir=root / "app-cache"))
    mp.undo()


def outputs(key: str) -> set[str]:
    """The component ids a callback writes (``key``: its output, as ``app.callback_map`` names it)."""
    return {part.rsplit(".", 1)[0] for part in key.strip(".").split("...")}


def fed_by(app: Any, component: str, prop: str) -> set[str]:
    """The component ids written by the callbacks that ``component.prop`` triggers (an Input, not a State)."""
    out: set[str] = set()
    for key, spec in app.callback_map.items():
        if {"id": component, "property": prop} in spec["inputs"]:
            out |= outputs(key)
    return out


def test_every_view_is_one_unit() -> None:
    from paradiag import app
    from paradiag.app.views import NAMES, part, static_renders
    from paradiag.app.views.live import VIEW_FIELDS, VIEWS

    # Every view folder is named in the registry (a folder left out would be neither on the page nor in the snapshot).
    folder = Path(app.__file__).parent / "views"
    assert sorted(NAMES) == sorted(p.name for p in folder.iterdir() if (p / "__init__.py").is_file())

    assert [view.__name__ for view in VIEWS] == [f"paradiag.app.views.{name}.live" for name in NAMES]
    for view in VIEWS:
        assert callable(view.panel) and callable(view.register), view.__name__
        assert view.FIELDS and all(
            set(fields) <= set(Selection.__dataclass_fields__) for fields in view.FIELDS.values()
        ), view.__name__
    # The snapshot's half of each unit, in the same order, beside its live half (in the same folder).
    renders = static_renders()
    assert [r.__module__ for r in renders] == [f"paradiag.app.views.{name}.static" for name in NAMES]
    assert all(
        Path(str(part(name, "static").__file__)).parent == Path(str(view.__file__)).parent
        for name, view in zip(NAMES, VIEWS, strict=True)
    )
    assert set(VIEW_FIELDS) == {
        "job",
        "mark",
        "step",
        "timeline",
        "search",
        "marey",
        "detail",
        "comm",
        "comm-link",
        "compare",
        "flow",
    }


def test_the_job_page_places_every_view_in_order_half_width_panels_in_pairs() -> None:
    """The page reads each view's place (``HALF``, ``EXPORTS``): a view added to NAMES is on the page with no
    edit of the layout; the first screen is the overview beside the timeline."""
    from paradiag.app.layouts import job_page

    def graphs(c: Any) -> list[str]:
        return [x.id for x in c._traverse() if type(x).__name__ == "Graph"]

    placed = [
        ("row" if getattr(c, "className", "") == "pd-row" else "whole", graphs(c)) for c in job_page.panels()
    ]
    main = ("heatmap", "timeline", "marey", "detail-graph", "comm-matrix", "compare-ranks", "flow")
    assert [(kind, [g for g in gs if g in main]) for kind, gs in placed] == [
        ("row", ["heatmap", "timeline"]),
        ("whole", ["marey"]),
        ("row", ["detail-graph", "comm-matrix"]),
        ("whole", ["compare-ranks"]),
        ("whole", ["flow"]),
    ]


def test_each_store_feeds_only_its_views_graphs(app: Any) -> None:
    """A view store's change reaches the callbacks of the views that read it; the whole selection reaches none but
    the reducer's own chain (nothing draws from it)."""
    graphs = {
        ids.STEPS,
        ids.HEATMAP,
        ids.TIMELINE,
        ids.MAREY,
        ids.FLOW,
        ids.COMM_MATRIX,
        ids.DETAIL,
        ids.COMPARE_RANKS,
    }
    expected = {
        "job": {ids.HEATMAP, ids.STEPS},
        "mark": {ids.HEATMAP},
        "step": {ids.STEPS},
        "timeline": {ids.TIMELINE},
        "search": set(),
        "marey": {ids.MAREY},
        "flow": {ids.FLOW},
        "detail": {ids.DETAIL},
        "comm": {ids.COMM_MATRIX},
        "comm-link": {ids.COMM_MATRIX},
        "compare": {ids.COMPARE_RANKS},
    }
    for store, drawn in expected.items():
        assert fed_by(app, view_store(store), "data") & graphs == drawn, store
    assert not fed_by(app, ids.SELECTION, "data") & graphs  # read as State where needed, never a trigger
    writers: dict[str, int] = {}
    for key in app.callback_map:
        for part in key.strip(".").split("..."):
            graph, _, prop = part.rpartition(".")
            if prop.split("@")[0] == "figure" and graph in graphs:
                writers[graph] = writers.get(graph, 0) + 1
    assert writers == dict.fromkeys(graphs, 1)  # each graph drawn by its view's callback alone


def test_a_gesture_redraws_the_graphs_whose_fields_it_changed(app: Any) -> None:
    """From a gesture to the graphs it redraws: the stores the reducer writes (``view_updates``), then the graphs
    those stores feed (the callback graph). A redraw of the other views would be wasted."""
    from dash import no_update

    from paradiag.app.callbacks.selection import select, view_updates
    from paradiag.app.views import VIEW_FIELDS

    with app.server.app_context():
        sel = select(None, None, None, f"?job=sample:{SAMPLE}&step=1")

        def redrawn(trigger: Any, value: Any, old: Selection = sel) -> set[str]:
            new = select(trigger, value, old, "")
            stores = {
                name
                for name, v in zip(VIEW_FIELDS, view_updates(old, new), strict=True)
                if v is not no_update
            }
            drawn = set().union(*(fed_by(app, view_store(s), "data") for s in stores)) if stores else set()
            return drawn & {
                ids.STEPS,
                ids.HEATMAP,
                ids.TIMELINE,
                ids.MAREY,
                ids.FLOW,
                ids.COMM_MATRIX,
                ids.DETAIL,
                ids.COMPARE_RANKS,
            }

        zoom = {"xaxis.range[0]": 10.0, "xaxis.range[1]": 12.0}
        assert redrawn((ids.TIMELINE_ZOOM, "data"), zoom) == {
            ids.TIMELINE,
            ids.MAREY,
        }  # the window is theirs alone
        assert redrawn((ids.MAREY_ZOOM, "data"), zoom) == {ids.TIMELINE, ids.MAREY}
        zoomed = sel.but(window=[10.0, 12.0])
        assert redrawn((ids.MAREY_ZOOM, "data"), zoom, zoomed) == set()  # the same window: nothing to redraw
        assert redrawn((ids.MAREY_CLICK, "data"), {"points": [{"customdata": ["gemm", 1, 11.0]}]}) == {
            ids.MAREY,
            ids.FLOW,
            ids.DETAIL,
        }
        assert redrawn((ids.HEATMAP, "clickData"), {"points": [{"x": "1", "y": 5, "customdata": "6"}]}) == {
            ids.HEATMAP,
            ids.TIMELINE,
            ids.DETAIL,
        }  # the same step: the step chart's marker stays
        assert redrawn((ids.HEATMAP, "clickData"), {"points": [{"x": "0", "y": 5, "customdata": "6"}]}) == {
            ids.HEATMAP,
            ids.STEPS,
            ids.TIMELINE,
            ids.MAREY,
            ids.FLOW,
            ids.DETAIL,
        }  # another step: every view of the step
        other = 2 if sel.step != 2 else 0
        assert redrawn((ids.STEPS, "clickData"), {"points": [{"x": other}]}) == {
            ids.HEATMAP,
            ids.STEPS,
            ids.TIMELINE,
            ids.MAREY,
            ids.FLOW,
            ids.DETAIL,
        }
        assert redrawn((ids.BASELINE_PICKER, "value"), "sample:gpu_llm_fault_free") == {ids.COMPARE_RANKS}
