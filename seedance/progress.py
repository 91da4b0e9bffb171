"""Progress on stderr for long work: a tqdm bar for the main loop and one line per later phase (checking, writing),
so a long run never sits silent. ``enabled=None`` means "when stderr is a terminal". stdout is untouched, so a
command's ``--json`` output stays one object. Used by the library (sweeps, the paper suite) and the CLI alike."""

from __future__ import annotations

import sys
import time
from typing import Any


def say(text: str) -> None:
    """One line on stderr, flushed."""
    print(text, file=sys.stderr, flush=True)


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
            say(f"{self.command}: {text} ...")
        self._phase = (text, time.perf_counter())

    def done(self) -> None:
        self._close()

    def _close(self) -> None:
        if self._phase is not None and self.enabled:
            text, start = self._phase
            say(f"{self.command}: {text}: done in {time.perf_counter() - start:.2f} s")
        self._phase = None
