"""Planted bugs in the causal protocol, each a subclass overriding one rule; the campaign must catch every one.

* ``blending-merge`` — a merge that is not idempotent: an incoming entry equal to the one held (the same write,
  delivered again by a duplicate or a resend) is *blended* in (its value added) instead of ignored.
* ``eager-delivery`` — delivery that does not wait for an interval's causal predecessors.
* ``stale-coordinator`` — a coordinator that accepts a write (or read) although the client has seen writes it has not
  applied (no vector-clock check).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from seedance.models.protocols.causal import SPEC, CausalConfig, CausalNode


class BlendingMerge(CausalNode):
    def _join(self, delta):
        f = self.grid.f
        if len(delta):
            mine_same = ((f["node"][delta.idx] == delta.node) & (f["seq"][delta.idx] == delta.seq)
                         & (f["version"][delta.idx] == delta.version))
        changed = self.grid.join(delta)
        if len(delta) and mine_same.any():
            again = delta.idx[mine_same]
            # "blend" the re-delivered colour in (the grid's arrays are read-only: its raw overwrite does it)
            self.grid.overwrite(again, value=f["value"][again] + delta.value[mine_same])
            changed = np.union1d(changed, again)
        return changed


class EagerDelivery(CausalNode):
    def _deliverable(self, src, message, provided=None):
        return True


class StaleCoordinator(CausalNode):
    def _admit(self, context):
        return None


MUTANTS = {"blending-merge": BlendingMerge, "eager-delivery": EagerDelivery, "stale-coordinator": StaleCoordinator}


def spec(name: str):
    cls = MUTANTS[name]

    def factory(node_id, num_nodes, rng, config):
        return cls(node_id, num_nodes, rng, CausalConfig.from_mapping(config))

    return dataclasses.replace(SPEC, name=f"causal-{name}", factory=factory)
