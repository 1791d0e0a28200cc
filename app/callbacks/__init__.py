"""Callbacks: the selection reducer, the page shell (header, start page, upload), then each view's own
(``paradiag.app.views``). Each module's functions are plain (tests call them); ``register`` wires them."""

from __future__ import annotations

from dash import Dash


def register(app: Dash) -> None:
    from paradiag.app.callbacks import export, header, search, selection, upload
    from paradiag.app.views import VIEWS

    for module in (selection, header, *VIEWS, export, search, upload):
        module.register(app)
