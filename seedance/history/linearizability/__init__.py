"""Linearizability checking for register, cas-register and key-value histories.

``check(events, model, timeout_s)`` returns a :class:`CheckResult`. The pieces: :mod:`.operations` (events to
operations, per key, with the indeterminate-operation rules), :mod:`.wgl` (the Wing & Gong / Lowe search, which can
also list every way a window of operations ends), :mod:`.windows` (one key checked in windows cut where no
operation is open, carrying each possible end across a cut: memory bounded by the window, not the history),
:mod:`.checker` (models, partitioning by key, verdict; ``check_keys`` streams one key at a time and windows the long
ones, ``check_streamed`` reads a whole history twice and windows every key side by side), :mod:`.oracle` (a
brute-force reference for tests).
"""

from seedance.history.linearizability.checker import (
    MODEL_NAMES, CheckResult, Model, check, check_keys, check_streamed,
)

__all__ = ["MODEL_NAMES", "CheckResult", "Model", "check", "check_keys", "check_streamed"]
