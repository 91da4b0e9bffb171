"""Seedance validate-and-commit for training state (the seed's chapters 1, 3 and 4).

:class:`~seedance.models.protocols.commit.node.CommitNode` trains a small model data-parallel on each rank's device
buffers, validates every ``commit_every`` steps that all replicas hold the same parameters (digests after the
device-to-host copy, exchanged by an allgather), commits atomically only on unanimous agreement at one epoch, and
otherwise rolls back and resynchronises from the agreeing majority by a full broadcast. Membership by heartbeats
and phi-accrual failure detection (:mod:`seedance.models.phi`). The seed's failure scenarios F1–F8 are seeded
injections with ``buggy`` / ``fixed`` variants (:mod:`.scenarios`).

The invariant monitor (:class:`CommitMonitor`), run by ``sim run`` after every input:

* a commit's vote covers its whole view and every row is identical (epoch, step, view and digest) — nothing is
  committed that not every live member of the view agreed on;
* replicas are identical at every commit: two commits of the same step (by any ranks, at any time) have the same
  true parameter digest (computed from the parameters themselves, not the voted statistics).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from seedance.models.protocols.commit.config import CommitConfig
from seedance.models.protocols.commit.messages import Heartbeat, Verdict
from seedance.models.protocols.commit.node import CommitNode
from seedance.models.protocols.commit.scenarios import SCENARIOS, VARIANTS
from seedance.models.protocols.contract import ProtocolSpec
from seedance.models.protocols.monitoring import NodeMonitor, progress


class CommitMonitor(NodeMonitor):
    """See the package docstring. ``observe_node(node)`` examines the commits the node made since it was last
    observed (``observe(live_nodes)``: each of them); the breaches first seen now."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: dict[Any, tuple[Any, int]] = {}  # node id -> (node, commits already checked, of commits_total)
        self.by_step: dict[int, tuple[tuple[int, int], int]] = {}  # step -> (true digest, first node)

    @property
    def breaches(self) -> list[str]:
        return self.violations

    def observe_node(self, node: Any) -> list[str]:
        held = self.seen.get(node.node_id)  # after every input of every rank: nothing new is the common case
        if held is not None and held[0] is node and held[1] == getattr(node, "commits_total", None):
            return []
        return super().observe_node(node)

    def _observe(self, node: Any) -> list[str]:
        if not hasattr(node, "commits"):
            return []
        found: list[str] = []
        done = progress(self.seen, node.node_id, node)
        total = getattr(node, "commits_total", len(node.commits))  # the node keeps its latest commits only
        new = total - done
        if new <= 0:
            return found
        for record in node.commits[-new:]:
            rows = record["rows"]
            view = record["view"]
            if len(rows) != len(view):
                found.append(f"node {node.node_id} committed step {record['step']} with {len(rows)} votes for "
                             f"view {tuple(view)}")
            digests = np.asarray(rows)[:, 2:4]
            if len(digests) and not (digests == digests[0]).all():  # O(view) in C, one compare (no sort)
                voted = {tuple(r) for r in np.unique(digests, axis=0).tolist()}
                found.append(f"node {node.node_id} committed step {record['step']} (epoch {record['epoch']}) on "
                             f"disagreeing digests {sorted(voted)}")
            true = tuple(record["true"])
            first = self.by_step.get(record["step"])
            if first is None:
                self.by_step[record["step"]] = (true, node.node_id)
            elif first[0] != true:
                found.append(f"replicas differ at commit of step {record['step']}: node {node.node_id} holds "
                             f"{true[0] & 0xffffffff:08x}, node {first[1]} {first[0][0] & 0xffffffff:08x}")
        self.seen[node.node_id] = (node, total)
        return found

    def forget(self, node_id: Any) -> None:
        self.seen.pop(node_id, None)


def _factory(node_id: int, num_nodes: int, rng: Any, config: Any) -> CommitNode:
    return CommitNode(node_id, num_nodes, rng, config)


SPEC = ProtocolSpec(
    name="commit", factory=_factory, message_types=(Heartbeat, Verdict),
    description="validate-and-commit for data-parallel training state (digests, atomic checkpoints, rollback, "
                "phi-accrual membership); scenarios F1-F8 buggy/fixed",
    default_config={}, operations=(), checker=None, monitor=CommitMonitor, routing="any",
    summarize="seedance.history.training:run_summary")

__all__ = ["SCENARIOS", "SPEC", "VARIANTS", "CommitConfig", "CommitMonitor", "CommitNode", "Heartbeat", "Verdict"]
