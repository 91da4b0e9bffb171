"""EPaxos (Moraru, Andersen & Kaminsky, SOSP 2013) with the recovery fix of Sutra (IPL 2020) as a sans-I/O node over
the key-value store: leaderless, any replica serves clients (``routing="any"``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from seedance.models.protocols.contract import ProtocolSpec
from seedance.models.protocols.epaxos import invariants
from seedance.models.protocols.epaxos.config import EPaxosConfig
from seedance.models.protocols.epaxos.messages import MESSAGE_TYPES
from seedance.models.protocols.epaxos.node import EPaxosNode


def make_node(node_id: int, num_nodes: int, rng: np.random.Generator, config: Mapping[str, Any]) -> EPaxosNode:
    """The :class:`ProtocolSpec` factory: a fresh EPaxos replica."""
    return EPaxosNode(node_id, num_nodes, rng, EPaxosConfig.from_mapping(config))


SPEC = ProtocolSpec(
    name="epaxos",
    factory=make_node,
    message_types=MESSAGE_TYPES,
    description="Egalitarian Paxos (fast/slow path, dependency-graph execution, explicit prepare with separate "
                "promised and voted ballots) over a key-value store",
    default_config=EPaxosConfig().as_dict(),
    operations=("read", "write", "cas"),
    checker="kv",
    monitor=invariants.Monitor,
    routing="any",
)

__all__ = ["SPEC", "EPaxosConfig", "EPaxosNode", "invariants", "make_node"]
