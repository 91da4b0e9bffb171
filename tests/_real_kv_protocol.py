"""Test-only protocol for the real backend: a primary-backup key-value store obeying the node contract.

Node 0 is the primary for ever: it applies each client operation, appends it to its durable log
(``PersistLog`` — durable before the ``Reply`` that follows it, contract.py), and replies. Backups answer
"not-leader" with a hint and keep a durable count of the replication messages they received, so ``Persist``,
``PersistLog``, ``Send``, ``SetTimer``, ``Reply``, ``Annotate`` and ``on_recover`` all run for real. It is linearizable
under crash-restart because the primary's state is exactly its durable log. Not a mock: a small real protocol.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from seedance.models.protocols.contract import (
    Annotate, ClientRequest, CollectiveDone, DurableState, Operation, Outcome, Persist, PersistLog, ProtocolSpec,
    Reply, Send, SetTimer, StartCollective,
)


@dataclass(frozen=True, kw_only=True, slots=True)
class Replicate:
    index: int
    key: str | None
    value: Any


@dataclass(frozen=True, kw_only=True, slots=True)
class Heartbeat:
    applied: int


class KVNode:
    def __init__(self, node_id: int, num_nodes: int, rng: np.random.Generator, config: dict) -> None:
        self.node_id, self.num_nodes, self.rng = node_id, num_nodes, rng
        self.heartbeat_s = float(config.get("heartbeat_s", 0.05))
        self.log: list[list[Any]] = []
        self.kv: dict[str, Any] = {}
        self.replicated = 0
        self.recovered_from: int | None = None
        self.collectives = bool(config.get("collectives", False))
        self.crash_on_start = config.get("crash_on_start")

    def _boot(self) -> list:
        out: list = [SetTimer(name="heartbeat", delay_s=self.heartbeat_s)] if self.node_id == 0 else []
        if self.collectives:  # a real allreduce over every node; then one that the last node never joins
            out.append(StartCollective(collective_id="sum", op="allreduce", group=tuple(range(self.num_nodes)),
                                       payload=np.array([float(self.node_id + 1), 1.0]), nominal_size_bytes=16,
                                       timeout_s=120.0))
        return out

    def on_start(self, now: float) -> list:
        if self.crash_on_start == self.node_id:
            raise RuntimeError(f"planted failure on node {self.node_id}")
        return self._boot()

    def on_recover(self, durable: DurableState, now: float) -> list:
        self.log = [list(e) for e in durable.logs.get("ops", [])]
        for key, value in self.log:
            self.kv[key] = value
        self.replicated = int(durable.values.get("replicated", 0))
        self.recovered_from = len(self.log)
        return [Annotate(name="recovered", attrs={"entries": len(self.log), "replicated": self.replicated})] + self._boot()

    def on_timer(self, name: Any, now: float) -> list:
        peers = [Send(dst=d, message=Heartbeat(applied=len(self.log)), size_bytes=16)
                 for d in range(1, self.num_nodes)]
        return peers + [SetTimer(name="heartbeat", delay_s=self.heartbeat_s)]

    def on_message(self, src: int, message: Any, now: float) -> list:
        if isinstance(message, Replicate):
            self.replicated += 1
            return [Persist(key="replicated", value=self.replicated)]
        return []

    def on_client_request(self, request: ClientRequest, now: float) -> list:
        def reply(outcome: Outcome, value: Any = None, error: str | None = None) -> Reply:
            return Reply(client_id=request.client_id, request_id=request.request_id, outcome=outcome, value=value,
                         error=error, leader_hint=0)

        if self.node_id != 0:
            return [reply(Outcome.FAIL, error="not-leader")]
        key = request.key
        if request.op == Operation.READ:
            return [reply(Outcome.OK, self.kv.get(key))]
        if request.op == Operation.CAS:
            expected, new = request.value
            if self.kv.get(key) != expected:
                return [reply(Outcome.FAIL, error="cas-mismatch")]
        else:
            new = request.value
        self.kv[key] = new
        start = len(self.log)
        self.log.append([key, new])
        sends = [Send(dst=d, message=Replicate(index=start, key=key, value=new), size_bytes=32)
                 for d in range(1, self.num_nodes)]
        return [PersistLog(key="ops", start=start, entries=((key, new),))] + sends + [reply(Outcome.OK)]

    def on_collective_done(self, done: CollectiveDone, now: float) -> list:
        out: list = [Annotate(name="collective-done", attrs={"ok": done.ok, "error": done.error})]
        if done.collective_id == "sum":
            out.append(Persist(key="sum", value=[done.ok, None if done.result is None else done.result.tolist()]))
            if self.node_id != self.num_nodes - 1:
                out.append(StartCollective(collective_id="lonely", op="allreduce", group=tuple(range(self.num_nodes)),
                                           payload=np.zeros(2), nominal_size_bytes=16, timeout_s=2.0))
        elif done.collective_id == "lonely":
            out.append(Persist(key="lonely", value=[done.ok, done.error]))
        return out


SPEC = ProtocolSpec(name="test-kv", factory=KVNode, message_types=(Replicate, Heartbeat),
                    description="test-only primary-backup kv")
