"""Node randomness from the root seed: the same (seed, node, boot) gives the same stream in every runtime.

A node's generator is ``default_rng(SeedSequence(seed, spawn_key=(NODE_STREAM, node_id, boot)))`` where ``boot``
counts the node's starts (0 for the first, 1 after the first restart, ...). The simulator and the real backend both
call :func:`node_rng`, so a node that draws the same numbers in one draws them in the other. Other consumers of the
root seed (network, workload, nemesis) use other first spawn-key words, so they never share a stream with a node.
"""

from __future__ import annotations

import numpy as np

NODE_STREAM = 0x6E6F6465  # "node"


def node_seed_sequence(seed: int, node_id: int, boot: int) -> np.random.SeedSequence:
    return np.random.SeedSequence(int(seed), spawn_key=(NODE_STREAM, int(node_id), int(boot)))


def node_rng(seed: int, node_id: int, boot: int) -> np.random.Generator:
    """The generator handed to node ``node_id``'s factory on its ``boot``-th start."""
    return np.random.default_rng(node_seed_sequence(seed, node_id, boot))
