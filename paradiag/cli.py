"""The ``paradiag`` command line.

Subcommands live next to what they drive and are imported only when used, so ``paradiag --help`` stays fast and
each area (simulator, app, snapshot) owns its command.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from typing import Any

import click

from paradiag import __version__

# name -> "module:attribute" of a click command; imported on first use.
COMMANDS: dict[str, str] = {
    "info": "paradiag.commands:info",
    "ingest": "paradiag.commands:ingest",
    "analyze": "paradiag.commands:analyze",
    "whatif": "paradiag.commands:whatif",
    "simulate": "paradiag.simulator.cli:simulate",
    "serve": "paradiag.app.cli:serve",
    "snapshot": "paradiag.snapshot:snapshot",
    "compare": "paradiag.snapshot:compare",
    "export": "paradiag.export:export",
}

# name -> (the extra it needs, the modules of that extra it imports): without them the command says what to install
# (the core install, `pip install paradiag`, holds the CLI, the snapshot and the Python API; the dashboard is
# `paradiag[web]`).
EXTRAS: dict[str, tuple[str, tuple[str, ...]]] = {
    "serve": ("web", ("dash", "flask", "flask_login")),
}
EXIT_MISSING_EXTRA = 2  # as a usage error: nothing was run


def _needs_extra(name: str, extra: str, missing: list[str]) -> click.Command:
    """A stand-in for command ``name`` when the modules of its extra are missing: it names what to install."""

    def refuse() -> None:
        click.echo(
            f"error: paradiag {name} needs paradiag's {extra} extra ({', '.join(missing)} not installed):"
            f" pip install 'paradiag[{extra}]'",
            err=True,
        )
        sys.exit(EXIT_MISSING_EXTRA)

    return click.Command(
        name,
        callback=refuse,
        help=f"Needs paradiag's {extra} extra, which is not installed: pip install 'paradiag[{extra}]'.",
        short_help=f"(needs pip install 'paradiag[{extra}]')",
        context_settings={"ignore_unknown_options": True, "allow_extra_args": True},
    )


class LazyGroup(click.Group):
    """A click group whose subcommands are imported when invoked; those not built yet are not listed."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return [name for name in COMMANDS if self._load(name) is not None]

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        return self._load(cmd_name)

    @staticmethod
    def _load(name: str) -> click.Command | None:
        target = COMMANDS.get(name)
        if target is None:
            return None
        if name in EXTRAS:
            extra, modules = EXTRAS[name]
            missing = [m for m in modules if importlib.util.find_spec(m) is None]
            if missing:
                return _needs_extra(name, extra, missing)
        module_name, attribute = target.split(":")
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name and module_name.startswith(exc.name):
                return None  # that area is not part of this build
            raise
        command: Any = getattr(module, attribute, None)
        return command if isinstance(command, click.Command) else None


@click.group(
    cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110}
)
@click.version_option(__version__, prog_name="paradiag")
def main() -> None:
    """Diagnose the parallel performance of distributed DNN training jobs from per-device timeline traces
    (PyTorch profiler / Kineto JSON from GPU jobs, Ascend profiler output from NPU jobs)."""
