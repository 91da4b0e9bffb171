"""A small deterministic driver for causal-node unit tests: real nodes, a message list the test delivers, drops or
reorders, timers fired on request, and durable state kept exactly as a runtime keeps it (PersistRecords / Persist,
every write durable at once). Observations (``Observe``) are recorded as replica events with the harness time."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from seedance.history.events import ReplicaEvent
from seedance.models.protocols.causal import CausalConfig, CausalNode, invariants
from seedance.models.protocols.contract import (
    Annotate, ClientRequest, DurableState, Observe, Operation, Persist, PersistRecords, Reply, Send, SetTimer,
)


class Cluster:
    def __init__(self, n: int = 3, *, node_class: type[CausalNode] = CausalNode,
                 config: Mapping[str, Any] | None = None) -> None:
        self.n = n
        self.node_class = node_class
        self.config = CausalConfig.from_mapping({"width": 4, "height": 4, **(config or {})})
        self.now = 0.0
        self.values: dict[int, dict[str, Any]] = {i: {} for i in range(n)}
        self.records: dict[int, dict[str, dict[str, Any]]] = {i: {} for i in range(n)}
        self.queue: list[tuple[int, int, Any]] = []
        self.replies: list[tuple[int, Reply]] = []
        self.observed: list[ReplicaEvent] = []
        self.annotations: list[tuple[int, Annotate]] = []
        self.nodes: dict[int, CausalNode] = {}
        self.request_id = 0
        self.order_errors: list[str] = []
        for i in range(n):
            self.nodes[i] = node_class(i, n, np.random.default_rng(i), self.config)
            self._run(i, self.nodes[i].on_start(self.now))

    def _run(self, i: int, effects: list) -> None:
        durable_pending = False
        for e in effects:
            if isinstance(e, PersistRecords):
                table = self.records[i].setdefault(e.table, {})
                table.update(e.put)
                for k in e.delete:
                    table.pop(k, None)
                durable_pending = True
            elif isinstance(e, Persist):
                self.values[i][e.key] = e.value
            elif isinstance(e, Send):
                self.queue.append((i, e.dst, e.message))
            elif isinstance(e, Reply):
                if e.outcome.value == "ok" and not durable_pending and self._needs_durable(e):
                    self.order_errors.append(f"node {i} replied before persisting")
                self.replies.append((i, e))
            elif isinstance(e, Observe):
                self.observed.append(ReplicaEvent(node=i, f=e.what, key=e.key, value=e.value, time=self.now))
            elif isinstance(e, Annotate):
                self.annotations.append((i, e))
            elif isinstance(e, SetTimer):
                pass

    @staticmethod
    def _needs_durable(reply: Reply) -> bool:
        return reply.value is None  # a write's ok (reads carry a value and persist nothing)

    # ---------------------------------------------------------------------------------------------- clients
    def request(self, node: int, op: str, key: str, value: Any = None, context: Any = None) -> Reply:
        self.request_id += 1
        req = ClientRequest(client_id=0, request_id=self.request_id, op=Operation(op), key=key, value=value,
                            context=context)
        before = len(self.replies)
        self._run(node, self.nodes[node].on_client_request(req, self.now))
        assert len(self.replies) == before + 1, "exactly one reply per request"
        return self.replies[-1][1]

    # --------------------------------------------------------------------------------------------- messages
    def deliver(self, k: int = 0) -> tuple[int, int, Any]:
        src, dst, msg = self.queue.pop(k)
        if dst in self.nodes:
            self._run(dst, self.nodes[dst].on_message(src, msg, self.now))
        return src, dst, msg

    def deliver_all(self, limit: int = 10_000) -> None:
        for _ in range(limit):
            if not self.queue:
                return
            self.deliver(0)
        raise AssertionError("messages never stop")

    def drop(self, predicate) -> int:
        before = len(self.queue)
        self.queue = [m for m in self.queue if not predicate(*m)]
        return before - len(self.queue)

    def tick(self, name: str = "sync") -> None:
        self.now += 0.01
        for i, node in self.nodes.items():
            self._run(i, node.on_timer(name, self.now))

    def settle(self, rounds: int = 20) -> None:
        for _ in range(rounds):
            self.deliver_all()
            self.tick()
        self.deliver_all()

    # ----------------------------------------------------------------------------------------------- faults
    def crash(self, i: int) -> None:
        del self.nodes[i]
        self.queue = [m for m in self.queue if m[1] != i]

    def recover(self, i: int) -> None:
        node = self.node_class(i, self.n, np.random.default_rng(100 + i), self.config)
        self.nodes[i] = node
        durable = DurableState(values=dict(self.values[i]), records={k: dict(v) for k, v in self.records[i].items()})
        self._run(i, node.on_recover(durable, self.now))

    def breaches(self) -> list[str]:
        return invariants.check(list(self.nodes.values()))
