"""Marey's graph, one view unit: ``live`` (its panel, the selection fields it reads, its callbacks: Dash) and
``static`` (the snapshot's render and the rules it shares with the live view: no Dash); the names of both read from
here too (``paradiag.app.views.name_of``)."""

from typing import Any

from paradiag.app.views import name_of


def __getattr__(name: str) -> Any:
    return name_of(__name__, name)
