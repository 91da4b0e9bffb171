"""A deterministic in-memory driver for any protocol node (the shape of tests/raft_harness.py, protocol-agnostic).

Not a simulator: no latency, no fabric. Messages wait in a FIFO queue until a test delivers or drops them; timers
fire only when a test fires them; zero-delay timers and durability notices are handed over at once (as the next
input), as both runtimes do when nothing else is due. A crash keeps only what the node persisted (``Persist``
values and ``PersistRecords`` tables). After every input the protocol's invariant monitor (``ProtocolSpec.monitor``)
observes the live nodes; what it reports accumulates in ``violations``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from seedance.models.protocols.contract import (
    Annotate, CancelTimer, ClientRequest, DurableState, Operation, Persist, PersistRecords, ProtocolSpec, Reply, Send,
    SetTimer,
)

Match = Callable[[int, int, Any], bool]


def to(dst: int, kind: type | None = None) -> Match:
    """Messages to ``dst`` (of type ``kind``)."""
    return lambda s, d, m: d == dst and (kind is None or type(m) is kind)


def between(src: int, dst: int, kind: type | None = None) -> Match:
    return lambda s, d, m: s == src and d == dst and (kind is None or type(m) is kind)


class Driver:
    def __init__(self, spec: ProtocolSpec, num_nodes: int, *, config: dict | None = None, seed: int = 0) -> None:
        self.spec = spec
        self.num_nodes = num_nodes
        self.config = {**spec.default_config, **(config or {})}
        self.seed = seed
        self.now = 0.0
        self.nodes: dict[int, Any] = {}
        self.incarnation = dict.fromkeys(range(num_nodes), 0)
        self.values: dict[int, dict[str, Any]] = {i: {} for i in range(num_nodes)}
        self.records: dict[int, dict[str, dict[str, Any]]] = {i: {} for i in range(num_nodes)}
        self.queue: list[tuple[int, int, Any]] = []
        self.timers: dict[int, dict[Any, float]] = {i: {} for i in range(num_nodes)}
        self.replies: list[tuple[int, Reply]] = []
        self.monitor = spec.monitor() if spec.monitor is not None else None
        self.violations: list[str] = []
        self.log: list[str] = []  # what happened, for failure messages
        self.eager = True  # fire zero-delay timers at once (False: they wait, e.g. to batch several requests)

    # ---------------------------------------------------------------------------------------------- lifecycle
    def _make(self, node_id: int) -> Any:
        rng = np.random.default_rng([self.seed, node_id, self.incarnation[node_id]])
        return self.spec.factory(node_id, self.num_nodes, rng, self.config)

    def start(self) -> Driver:
        for i in range(self.num_nodes):
            self.nodes[i] = self._make(i)
            self._run(i, "start", lambda node: node.on_start(self.now))
        return self

    def crash(self, node_id: int) -> None:
        self.nodes.pop(node_id)
        self.timers[node_id].clear()
        self.queue = [m for m in self.queue if m[1] != node_id]
        self.log.append(f"crash {node_id}")

    def recover(self, node_id: int) -> Any:
        self.incarnation[node_id] += 1
        self.nodes[node_id] = node = self._make(node_id)
        durable = DurableState(values=dict(self.values[node_id]),
                               records={t: dict(r) for t, r in self.records[node_id].items()})
        self._run(node_id, "recover", lambda n: n.on_recover(durable, self.now))
        return node

    # ---------------------------------------------------------------------------------------------- messages
    def deliver(self, where: Match | None = None) -> bool:
        for k, (src, dst, message) in enumerate(self.queue):
            if where is None or where(src, dst, message):
                del self.queue[k]
                if dst in self.nodes:
                    self._run(dst, f"{type(message).__name__} from {src}",
                              lambda node: node.on_message(src, message, self.now))
                return True
        return False

    def deliver_all(self, where: Match | None = None, max_steps: int = 100_000) -> int:
        steps = 0
        while steps < max_steps and self.deliver(where):
            steps += 1
        return steps

    def drop(self, where: Match | None = None) -> int:
        before = len(self.queue)
        self.queue = [m for m in self.queue if where is not None and not where(*m)]
        return before - len(self.queue)

    # ------------------------------------------------------------------------------------------------ inputs
    def fire(self, node_id: int, name: Any) -> None:
        deadline = self.timers[node_id].pop(name)
        self.now = max(self.now, deadline)
        self._run(node_id, f"timer {name}", lambda node: node.on_timer(name, self.now))

    def request(self, node_id: int, op: str, key: Any = None, value: Any = None, *, client_id: int = 1,
                request_id: int = 1) -> None:
        request = ClientRequest(client_id=client_id, request_id=request_id, op=Operation(op), key=key, value=value)
        self._run(node_id, f"request {op} {key}", lambda node: node.on_client_request(request, self.now))

    def call(self, node_id: int, what: str, method: Callable[[Any, list], None]) -> None:
        """Run ``method(node, out)`` on a live node as an input (a test hook into a node's own procedures, e.g.
        starting the recovery of an instance now instead of after its timeout)."""
        def handler(node):
            out: list = []
            method(node, out)
            return node._emit(out)
        self._run(node_id, what, handler)

    def run_timers(self, until: float, max_steps: int = 100_000) -> None:
        """Deliver everything; when nothing is queued, fire the earliest timer; stop at ``until``."""
        for _ in range(max_steps):
            if self.deliver():
                continue
            due = [(t, i, str(n), n) for i, ts in self.timers.items() for n, t in ts.items() if i in self.nodes]
            if not due:
                break
            deadline, node_id, _, name = min(due)
            if deadline > until:
                break
            self.fire(node_id, name)
        self.now = max(self.now, until)

    # ------------------------------------------------------------------------------------------------ effects
    def _run(self, node_id: int, what: str, handler: Callable[[Any], list]) -> None:
        node = self.nodes[node_id]
        effects = handler(node)
        self.log.append(f"t={self.now:.4f} node {node_id}: {what}")
        notices = []
        immediate = []
        for effect in effects:
            if isinstance(effect, Persist):
                self.values[node_id][effect.key] = effect.value
            elif isinstance(effect, PersistRecords):
                table = self.records[node_id].setdefault(effect.table, {})
                table.update(effect.put)
                for key in effect.delete:
                    table.pop(key, None)
            elif isinstance(effect, Send):
                self.queue.append((node_id, effect.dst, effect.message))
            elif isinstance(effect, Reply):
                self.replies.append((node_id, effect))
            elif isinstance(effect, SetTimer):
                self.timers[node_id][effect.name] = self.now + effect.delay_s
                if effect.delay_s == 0:
                    immediate.append(effect.name)
            elif isinstance(effect, CancelTimer):
                self.timers[node_id].pop(effect.name, None)
            else:
                assert isinstance(effect, Annotate) or type(effect).__name__ == "Observe", effect
            notify = getattr(effect, "notify", None)
            if notify is not None:
                notices.append(notify)
        if self.monitor is not None:
            found = self.monitor.observe(list(self.nodes.values()))
            self.violations.extend(found)
        for token in notices:
            if node_id in self.nodes:
                self._run(node_id, f"persisted {token}", lambda n, token=token: n.on_persisted(token, self.now))
        for name in immediate if self.eager else ():
            if node_id in self.nodes and self.timers[node_id].get(name) == self.now:
                self.fire(node_id, name)

    # ----------------------------------------------------------------------------------------------- queries
    def reply_to(self, client_id: int, request_id: int) -> Reply | None:
        found = [r for _, r in self.replies if r.client_id == client_id and r.request_id == request_id]
        return found[-1] if found else None

    def story(self, last: int = 40) -> str:
        return "\n".join(self.log[-last:])
