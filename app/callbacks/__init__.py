"""Callbacks, one module per area. Each module's functions are plain (tests call them); ``register`` wires them."""

from __future__ import annotations

from dash import Dash


def register(app: Dash) -> None:
    from paradiag.app.callbacks import (
        compare,
        details,
        header,
        overview,
        pipeline,
        selection,
        timeline,
        upload,
    )

    for module in (selection, header, overview, timeline, details, pipeline, compare, upload):
        module.register(app)
