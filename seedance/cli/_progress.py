"""``--progress/--no-progress`` for long commands; the bar and phase lines themselves are
:class:`seedance.progress.Progress` (a library module: sweeps and the paper suite use it without the CLI)."""

from __future__ import annotations

import click

from seedance.progress import Progress

__all__ = ["Progress", "progress_option"]

progress_option = click.option(
    "--progress/--no-progress", "show_progress", default=None,
    help="Progress on stderr (bar, then each phase: checking, writing). Default: when stderr is a terminal.")
