"""Raft (Ongaro & Ousterhout 2014) as a sans-I/O node driving the replicated key-value store.

``SPEC`` is what :mod:`seedance.models.protocols.registry` hands a runtime; :mod:`.invariants` holds the safety
checks (``invariants.check(nodes)``) a simulator or test campaign calls.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from seedance.models.protocols.contract import ProtocolSpec
from seedance.models.protocols.raft import invariants
from seedance.models.protocols.raft.config import RaftConfig
from seedance.models.protocols.raft.messages import MESSAGE_TYPES
from seedance.models.protocols.raft.node import RaftNode, Role


def make_node(node_id: int, num_nodes: int, rng: np.random.Generator, config: Mapping[str, Any]) -> RaftNode:
    """The :class:`ProtocolSpec` factory: a fresh Raft server."""
    return RaftNode(node_id, num_nodes, rng, RaftConfig.from_mapping(config))


SPEC = ProtocolSpec(
    name="raft",
    factory=make_node,
    message_types=MESSAGE_TYPES,
    description="Raft consensus (leader election, log replication, ReadIndex reads) over a key-value store",
    default_config=RaftConfig().as_dict(),
    operations=("read", "write", "cas"),
    checker="kv",
    monitor=invariants.Monitor,
    routing="leader-hint",
)

__all__ = ["SPEC", "RaftConfig", "RaftNode", "Role", "invariants", "make_node"]
