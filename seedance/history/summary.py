"""A protocol's own summary keys, for both runtimes (``ProtocolSpec.summarize``: "module:function")."""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from typing import Any

from seedance.history.replica_log import ReplicaLog


def protocol_summary(spec: Any, history: Sequence[Any], replicas: Sequence[Any], nodes: int) -> dict[str, Any]:
    """``function(history, replica_events, nodes)`` named by ``spec.summarize``; ``{}`` when it names none."""
    target = getattr(spec, "summarize", None)
    if not target:
        return {}
    module, _, name = target.partition(":")
    # a ReplicaLog (a simulated run's, spilled to disk) is handed over as it is: the summaries read it in passes
    kept = replicas if isinstance(replicas, ReplicaLog) else list(replicas)
    return dict(getattr(importlib.import_module(module), name)(list(history), kept, nodes))
