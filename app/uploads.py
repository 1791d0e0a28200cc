"""Uploads: files stream to disk under the user's own folder, then parse in the background."""

from __future__ import annotations

from flask import Flask


def register_routes(server: Flask) -> None:
    return None
