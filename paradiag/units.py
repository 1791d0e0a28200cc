"""How durations read in text output (CLI, static pages, the dashboard's panels)."""

from __future__ import annotations


def ms(ns: float | None) -> str:
    """Nanoseconds as milliseconds with two decimals; '-' when unknown."""
    return "-" if ns is None else f"{ns / 1e6:.2f}"
