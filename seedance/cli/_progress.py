"""Progress on stderr for long commands: a tqdm bar for the main loop and one line per later phase (checking,
writing), so a long run never sits silent. On by default when stderr is a terminal; ``--progress`` forces it on
(logs, CI), ``--no-progress`` off. stdout is untouched, so ``--json`` output stays one object."""

from __future__ import annotations

import sys
import time
from typing import Any

import click

progress_option = click.option(
    "--progress/--no-progress", "show_progress", default=None,
    help="Progress on stderr (bar, then each phase: checking, writing). Default: when stderr is a terminal.")


class Progress:
    def __init__(self, enabled: bool | None, command: str) -> None:
        self.enabled = sys.stderr.isatty() if enabled is None else enabled
        self.command = command
        self._phase: tuple[str, float] | None = None

    def bar(self, total: float, *, unit: str, desc: str, fmt: str | None = None) -> Any:
        """A tqdm bar on stderr, or None when progress is off."""
        if not self.enabled:
            return None
        from tqdm import tqdm

        kwargs = {"bar_format": fmt} if fmt else {}
        return tqdm(total=total, unit=unit, desc=desc, file=sys.stderr, dynamic_ncols=True, **kwargs)

    def phase(self, text: str) -> None:
        """Close the previous phase (with its duration) and announce the next one."""
        self._close()
        if self.enabled:
            click.echo(f"{self.command}: {text} ...", err=True)
        self._phase = (text, time.perf_counter())

    def done(self) -> None:
        self._close()

    def _close(self) -> None:
        if self._phase is not None and self.enabled:
            text, start = self._phase
            click.echo(f"{self.command}: {text}: done in {time.perf_counter() - start:.2f} s", err=True)
        self._phase = None
