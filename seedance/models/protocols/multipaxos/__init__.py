"""Multi-Paxos (Lamport 2001; van Renesse & Altinbuken 2015) as a sans-I/O node over the key-value store:
a stable leader, phase 1 once per leadership for all slots, pipelined phase 2, recovery of accepted values."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from seedance.models.protocols.contract import ProtocolSpec
from seedance.models.protocols.multipaxos import invariants
from seedance.models.protocols.multipaxos.config import MultiPaxosConfig
from seedance.models.protocols.multipaxos.messages import MESSAGE_TYPES
from seedance.models.protocols.multipaxos.node import MultiPaxosNode, Role


def make_node(node_id: int, num_nodes: int, rng: np.random.Generator, config: Mapping[str, Any]) -> MultiPaxosNode:
    """The :class:`ProtocolSpec` factory: a fresh Multi-Paxos replica."""
    return MultiPaxosNode(node_id, num_nodes, rng, MultiPaxosConfig.from_mapping(config))


SPEC = ProtocolSpec(
    name="multipaxos",
    factory=make_node,
    message_types=MESSAGE_TYPES,
    description="Multi-Paxos (stable leader, phase 1 once per leadership, pipelined phase 2) over a key-value store",
    default_config=MultiPaxosConfig().as_dict(),
    operations=("read", "write", "cas"),
    checker="kv",
    monitor=invariants.Monitor,
    routing="leader-hint",
)

__all__ = ["SPEC", "MultiPaxosConfig", "MultiPaxosNode", "Role", "invariants", "make_node"]
