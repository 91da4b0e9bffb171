"""Linearizability checking for register, cas-register and key-value histories.

``check(events, model, timeout_s)`` returns a :class:`CheckResult`. The pieces: :mod:`.operations` (events to
operations, per key, with the indeterminate-operation rules), :mod:`.wgl` (the Wing & Gong / Lowe search),
:mod:`.checker` (models, partitioning by key, verdict), :mod:`.oracle` (a brute-force reference for tests).
"""

from seedance.history.linearizability.checker import (
    MODEL_NAMES, CheckResult, Model, check, check_keys, check_streamed,
)

__all__ = ["MODEL_NAMES", "CheckResult", "Model", "check", "check_keys", "check_streamed"]
