"""Seedance causal sync (field report §2.1–2.3): vector-clock write coordination over a delta-state CRDT pixel grid.

``SPEC`` is what :mod:`seedance.models.protocols.registry` hands a runtime; :mod:`.node` documents the protocol,
:mod:`.invariants` its clock-honesty monitor. Histories are judged by :mod:`seedance.history.causal` (causal
consistency, convergence), which also computes the run summary's causal keys.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from seedance.models.protocols.causal import invariants
from seedance.models.protocols.causal.messages import MESSAGE_TYPES, Ack, Sync
from seedance.models.protocols.causal.node import CausalConfig, CausalNode, key_of
from seedance.models.protocols.contract import ProtocolSpec


def make_node(node_id: int, num_nodes: int, rng: np.random.Generator, config: Mapping[str, Any]) -> CausalNode:
    """The :class:`ProtocolSpec` factory: a fresh replica."""
    return CausalNode(node_id, num_nodes, rng, CausalConfig.from_mapping(config))


SPEC = ProtocolSpec(
    name="causal",
    factory=make_node,
    message_types=MESSAGE_TYPES,
    description="causal consistency by vector clocks over a delta-state CRDT pixel grid (every node serves)",
    default_config=CausalConfig().as_dict(),
    operations=("read", "write"),
    checker=None,  # not linearizable by design; judged by seedance.history.causal (summarize)
    monitor=invariants.Monitor,
    routing="any",
    summarize="seedance.history.causal:run_summary",
)

__all__ = ["SPEC", "Ack", "CausalConfig", "CausalNode", "Sync", "invariants", "key_of", "make_node"]
