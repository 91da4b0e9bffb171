"""Echo: the smallest protocol that exercises every part of the node contract (runtime tests and benchmarks).

Rules:

* Ping-pong: at start (and after recovery) each node sends ``pings`` :class:`Ping` messages of ``ping_bytes`` to its
  successor ``(i + 1) % n``; a node answers every Ping with a :class:`Pong` to its sender, and every Pong with the
  next Ping — so ``pings × n`` message chains bounce forever (the simulator's messages-per-second benchmark).
* A periodic timer ``"tick"`` every ``tick_s`` seconds counts ticks (0 disables it): the clock-skew fault changes
  how many ticks a node counts.
* A single-copy key-value store at node ``leader`` (default 0): the other nodes answer ``not-leader`` with the
  hint. The leader persists a write (``Persist`` of the key) *before* replying, and rebuilds its store from durable
  state on recovery, so the store is linearizable under crashes, partitions and pauses (Herlihy & Wing 1990) — a
  baseline for the checker. It is not available while the leader is down.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from seedance.models.protocols.contract import (
    ClientRequest, CollectiveDone, DurableState, Effects, Operation, Outcome, Persist, ProtocolSpec, Reply, Send,
    SetTimer,
)

_KEY_PREFIX = "kv/"


@dataclass(frozen=True, kw_only=True, slots=True)
class Ping:
    seq: int


@dataclass(frozen=True, kw_only=True, slots=True)
class Pong:
    seq: int


class EchoNode:
    """One echo node; see the module docstring."""

    def __init__(self, node_id: int, num_nodes: int, rng: np.random.Generator, config: Mapping[str, Any]) -> None:
        self.node_id = node_id
        self.num_nodes = num_nodes
        self.rng = rng
        self.pings = int(config.get("pings", 1))
        self.ping_bytes = int(config.get("ping_bytes", 64))
        self.tick_s = float(config.get("tick_s", 0.01))
        self.leader = int(config.get("leader", 0))
        self.store: dict[str | None, Any] = {}
        self.ticks = 0
        self.echoes = 0
        self.recovered = False

    # ------------------------------------------------------------------------------------------------ lifecycle
    def _boot(self) -> Effects:
        effects: Effects = []
        if self.num_nodes > 1:
            successor = (self.node_id + 1) % self.num_nodes
            effects.extend(Send(dst=successor, message=Ping(seq=k), size_bytes=self.ping_bytes)
                           for k in range(self.pings))
        if self.tick_s > 0:
            effects.append(SetTimer(name="tick", delay_s=self.tick_s))
        return effects

    def on_start(self, now: float) -> Effects:
        return self._boot()

    def on_recover(self, durable: DurableState, now: float) -> Effects:
        self.recovered = True
        for name, value in durable.values.items():
            if name.startswith(_KEY_PREFIX):
                key = name[len(_KEY_PREFIX):]
                self.store[key if key != "" else None] = value
        return self._boot()

    # --------------------------------------------------------------------------------------------------- inputs
    def on_message(self, src: int, message: Any, now: float) -> Effects:
        self.echoes += 1
        if type(message) is Ping:
            return [Send(dst=src, message=Pong(seq=message.seq), size_bytes=self.ping_bytes)]
        return [Send(dst=src, message=Ping(seq=message.seq + 1), size_bytes=self.ping_bytes)]

    def on_timer(self, name: Any, now: float) -> Effects:
        self.ticks += 1
        return [SetTimer(name="tick", delay_s=self.tick_s)]

    def on_client_request(self, request: ClientRequest, now: float) -> Effects:
        reply = dict(client_id=request.client_id, request_id=request.request_id)
        if self.node_id != self.leader:
            return [Reply(**reply, outcome=Outcome.FAIL, error="not-leader", leader_hint=self.leader)]
        key = request.key
        durable_key = _KEY_PREFIX + (key if key is not None else "")
        if request.op is Operation.READ:
            return [Reply(**reply, outcome=Outcome.OK, value=self.store.get(key))]
        if request.op is Operation.WRITE:
            self.store[key] = request.value
            return [Persist(key=durable_key, value=request.value), Reply(**reply, outcome=Outcome.OK)]
        expected, new = request.value
        if self.store.get(key) != expected:
            return [Reply(**reply, outcome=Outcome.FAIL, error="cas-mismatch")]
        self.store[key] = new
        return [Persist(key=durable_key, value=new), Reply(**reply, outcome=Outcome.OK)]

    def on_collective_done(self, done: CollectiveDone, now: float) -> Effects:
        return []


def _factory(node_id: int, num_nodes: int, rng: np.random.Generator, config: Mapping[str, Any]) -> EchoNode:
    return EchoNode(node_id, num_nodes, rng, config)


SPEC = ProtocolSpec(
    name="echo",
    factory=_factory,
    message_types=(Ping, Pong),
    description="ping-pong between neighbours, a ticking timer, and a single-copy KV store at node 0",
    default_config={"pings": 1, "ping_bytes": 64, "tick_s": 0.01, "leader": 0},
)
