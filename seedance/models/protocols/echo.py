"""Echo: the smallest protocol that exercises every part of the node contract (runtime tests and benchmarks).

Rules:

* Ping-pong chains (the simulator's messages-per-second benchmark): each node starts ``pings`` chains to its
  successor ``(i + 1) % n``. A node answers every :class:`Ping` with a :class:`Pong` of the same chain and sequence
  number; the chain's origin answers the Pong it awaits with the next Ping, so each chain bounces forever. A
  duplicated or stale Pong (not the awaited sequence number) is ignored, so duplication never multiplies chains.
* A periodic timer ``"tick"`` every ``tick_s`` seconds (0 disables it) counts ticks (the clock-skew fault changes
  how many a node counts), sends a heartbeat Ping (chain -1) to every peer, and restarts any of its chains that
  made no progress since the previous tick (a lost message kills a chain until then).
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
    chain: int
    seq: int


@dataclass(frozen=True, kw_only=True, slots=True)
class Pong:
    chain: int
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
        self.awaited = [0] * self.pings  # sequence number each of my chains waits for
        self.seen_at_tick = [-1] * self.pings
        self.ticks = 0
        self.echoes = 0
        self.recovered = False

    # ------------------------------------------------------------------------------------------------ lifecycle
    def _boot(self) -> Effects:
        effects: Effects = []
        if self.num_nodes > 1:
            successor = (self.node_id + 1) % self.num_nodes
            effects.extend(Send(dst=successor, message=Ping(chain=k, seq=0), size_bytes=self.ping_bytes)
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
            return [Send(dst=src, message=Pong(chain=message.chain, seq=message.seq), size_bytes=self.ping_bytes)]
        chain = message.chain
        if chain < 0 or chain >= self.pings or message.seq != self.awaited[chain]:
            return []  # a heartbeat's answer, or a duplicated / stale Pong
        self.awaited[chain] += 1
        return [Send(dst=src, message=Ping(chain=chain, seq=self.awaited[chain]), size_bytes=self.ping_bytes)]

    def on_timer(self, name: Any, now: float) -> Effects:
        self.ticks += 1
        effects: Effects = [SetTimer(name="tick", delay_s=self.tick_s)]
        effects.extend(Send(dst=peer, message=Ping(chain=-1, seq=self.ticks), size_bytes=self.ping_bytes)
                       for peer in range(self.num_nodes) if peer != self.node_id)
        successor = (self.node_id + 1) % self.num_nodes
        for chain in range(self.pings):
            if self.awaited[chain] == self.seen_at_tick[chain] and self.num_nodes > 1:  # stalled: restart it
                self.awaited[chain] += 1
                effects.append(Send(dst=successor, message=Ping(chain=chain, seq=self.awaited[chain]),
                                    size_bytes=self.ping_bytes))
            self.seen_at_tick[chain] = self.awaited[chain]
        return effects

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
    description="ping-pong chains between neighbours, heartbeats on a ticking timer, a single-copy KV at node 0",
    default_config={"pings": 0, "ping_bytes": 64, "tick_s": 0.01, "leader": 0},
)
