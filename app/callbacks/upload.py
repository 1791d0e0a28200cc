"""Upload progress on the start page."""

from __future__ import annotations

from dash import Dash


def register(app: Dash) -> None:
    return None
