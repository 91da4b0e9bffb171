"""Errors a user can cause, split from bugs.

Every error a user can trigger (a malformed spec, topology, size, history file or network frame) is a
:class:`SeedanceError`. It names the offending ``field`` and says what would be valid, so the CLI can print it as one
line and exit with status 2. Anything else escaping is a bug and keeps its traceback.
"""

from __future__ import annotations


class SeedanceError(Exception):
    """Base class of errors caused by input. ``str(err)`` is one line: ``<field>: <problem>; <what is valid>``."""

    def __init__(self, field: str, problem: str, valid: str | None = None) -> None:
        self.field = field
        self.problem = problem
        self.valid = valid
        message = f"{field}: {problem}" if field else problem
        if valid:
            message += f"; {valid}"
        super().__init__(" ".join(message.splitlines()))  # every line break (\r, \x85, \u2028 too): one line


class SpecError(SeedanceError, ValueError):
    """A specification (topology, experiment, CLI argument) is malformed."""


class HistoryError(SeedanceError, ValueError):
    """A history file is malformed; ``field`` names the line (``line 17``)."""


class FrameError(SeedanceError, ValueError):
    """A network frame was rejected (bad HMAC, replay, oversize, garbage). The peer misbehaved, not us."""
