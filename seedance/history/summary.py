"""A protocol's own summary keys, for both runtimes (``ProtocolSpec.summarize``: "module:function")."""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from typing import Any


def protocol_summary(spec: Any, history: Sequence[Any], replicas: Sequence[Any], nodes: int) -> dict[str, Any]:
    """``function(history, replica_events, nodes)`` named by ``spec.summarize``; ``{}`` when it names none."""
    target = getattr(spec, "summarize", None)
    if not target:
        return {}
    module, _, name = target.partition(":")
    return dict(getattr(importlib.import_module(module), name)(list(history), list(replicas), nodes))
