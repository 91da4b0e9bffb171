"""A harness shared by the causal protocol's tests: replicas driven directly (no runtime) under random writes and
deliveries, every effect recorded as text, so a short-cut can be compared with the path it stands for."""

from __future__ import annotations

import numpy as np
import pytest

from seedance.models.crdt import PixelGrid
from seedance.models.protocols.causal.node import CausalConfig, CausalNode
from seedance.models.protocols.contract import ClientRequest, Operation, Send


def run_replicas(n: int, writes: int, seed: int, monkeypatch: pytest.MonkeyPatch, *, one_step: bool = True,
                 steps_to: bool = True) -> list[str]:
    """Every effect of ``n`` replicas under random writes and deliveries (in order, in any order, duplicated), their
    sync ticks, and their grids at the end, as text. ``one_step=False``: without the one-step delivery
    (``PixelGrid.join_next``); ``steps_to=False``: without ``PixelGrid.steps_to``'s short-cut."""
    if not one_step:
        monkeypatch.setattr(PixelGrid, "join_next", lambda self, delta, node, mine: None)
    if not steps_to:
        monkeypatch.setattr(PixelGrid, "steps_to", lambda self, clock, node, before: False)
    rng = np.random.default_rng(seed)
    nodes = [CausalNode(i, n, np.random.default_rng(i), CausalConfig(width=4, height=4)) for i in range(n)]
    out: list[str] = []
    flight: list[tuple[int, Send]] = []
    for node in nodes:
        node.on_start(0.0)
    for k in range(writes):
        w = int(rng.integers(n))
        effects = nodes[w].on_client_request(ClientRequest(client_id=1, request_id=k, op=Operation.WRITE,
                                                           key=f"k{int(rng.integers(16))}", value=k), k * 0.001)
        flight += [(w, e) for e in effects if type(e) is Send]
        out += [repr(e) for e in effects if type(e) is not Send]
        orderly = rng.random() < 0.7  # all in flight, in order (the one-step delivery's case), or some in any order
        for _ in range(len(flight) if orderly else int(rng.integers(0, len(flight) + 1))):
            src, send = flight.pop(0 if orderly else int(rng.integers(len(flight))))
            if rng.random() < 0.1:
                flight.append((src, send))  # delivered again later (a duplicate)
            effects = nodes[send.dst].on_message(src, send.message, k * 0.001)
            flight += [(send.dst, e) for e in effects if type(e) is Send]
            out += [repr(e) for e in effects if type(e) is not Send] + [f"{src}->{send.dst} {send.size_bytes}"]
        if k % 7 == 6:
            for node in nodes:
                out += [repr(e) for e in node.on_timer("sync", k * 0.001) if type(e) is not Send]
    monkeypatch.undo()
    grids = [(node.grid.clock.tolist(), node.grid._records.tolist(), node.grid.written_count) for node in nodes]
    return out + [repr(g) for g in grids]
