"""A tiny deterministic in-memory driver for Raft unit tests: real nodes, a message queue and timers under test control.

Not a simulator: no latency, no fabric. Messages wait in a FIFO queue until a test delivers (or drops) them; timers
fire only when a test fires them (or :meth:`Cluster.run` fires the earliest one); crashes discard everything but
what the node persisted. After every input the harness

* executes the node's effects in order, keeping the durable state exactly as a runtime would;
* checks the persistence rule generically: when a Send or Reply is executed, the node's term and vote must
  already be durable, and so must its whole log (Figure 2: "updated on stable storage before responding to RPCs") —
  with two deliberate relaxations for a leader writing in parallel with replication (Ongaro's thesis, §10.2.1): a
  leader's messages may carry entries not yet durable (its durable log must still be a prefix of its log; besides
  AppendEntries a leader only sends refusals, which depend on its term), and
  a leader's client Reply needs its log durable up to its commit index; after every input a leader's own match
  index (its vote toward the commit majority) must not exceed its durable log;
* feeds the cluster to :class:`seedance.models.protocols.raft.invariants.Monitor`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from seedance.models.protocols.contract import (
    Annotate,
    CancelTimer,
    ClientRequest,
    CompactLog,
    DurableState,
    Operation,
    Persist,
    PersistLog,
    Reply,
    Send,
    SetTimer,
)
from seedance.models.protocols.raft import RaftConfig, RaftNode, Role, invariants
from seedance.models.protocols.raft.roles import ELECTION, HARD_STATE_KEY, LOG_KEY, WRITE

PERSISTED = "persisted"  # pseudo-timer ("persisted", token): a durability notice waiting to be handed over


class Cluster:
    def __init__(self, num_nodes: int, *, seed: int = 0, config: Mapping[str, Any] | None = None,
                 node_class: type[RaftNode] = RaftNode,
                 node_classes: Mapping[int, type[RaftNode]] | None = None) -> None:
        self.num_nodes = num_nodes
        self.seed = seed
        self.config = RaftConfig.from_mapping(config)
        self.node_classes = {i: (node_classes or {}).get(i, node_class) for i in range(num_nodes)}
        self.now = 0.0
        self.nodes: dict[int, RaftNode] = {}  # live nodes only
        self.incarnation = dict.fromkeys(range(num_nodes), 0)
        # each node's disk: values, logs (the entries held) and each log's first position (CompactLog)
        self.durable: dict[int, dict[str, dict]] = {i: {"values": {}, "logs": {}, "starts": {}}
                                                    for i in range(num_nodes)}
        self.queue: list[tuple[int, int, Any]] = []  # (src, dst, message)
        self.timers: dict[int, dict[Any, float]] = {i: {} for i in range(num_nodes)}
        self.cut: set[tuple[int, int]] = set()  # (src, dst) links that drop messages
        self.replies: list[tuple[int, Reply]] = []
        self.trace: list[tuple[int, str, tuple]] = []  # (node, input kind, effects) — for determinism tests
        self.durability_errors: list[str] = []
        self.eager_timers: Callable[[Any], bool] = lambda name: True  # which zero-delay timers fire at once
        self.monitor = invariants.Monitor()
        self.violations: list[str] = []

    # ---------------------------------------------------------------------------------------------- lifecycle
    def _rng(self, node_id: int) -> np.random.Generator:
        return np.random.default_rng([self.seed, node_id, self.incarnation[node_id]])

    def start(self) -> Cluster:
        for i in range(self.num_nodes):
            node = self.node_classes[i](i, self.num_nodes, self._rng(i), self.config)
            self.nodes[i] = node
            self._execute(i, "start", node.on_start(self.now))
        return self

    def crash(self, node_id: int) -> None:
        """Lose everything volatile: the node object, its timers and messages addressed to it."""
        self.nodes.pop(node_id)
        self.timers[node_id].clear()
        self.queue = [m for m in self.queue if m[1] != node_id]

    def recover(self, node_id: int) -> RaftNode:
        self.incarnation[node_id] += 1
        node = self.node_classes[node_id](node_id, self.num_nodes, self._rng(node_id), self.config)
        self.nodes[node_id] = node
        disk = self.durable[node_id]
        durable = DurableState(values=dict(disk["values"]), logs={k: list(v) for k, v in disk["logs"].items()},
                               log_starts=dict(disk["starts"]))
        self._execute(node_id, "recover", node.on_recover(durable, self.now))
        return node

    # ------------------------------------------------------------------------------------------------ network
    def isolate(self, node_id: int) -> None:
        for other in range(self.num_nodes):
            if other != node_id:
                self.cut |= {(node_id, other), (other, node_id)}

    def heal(self) -> None:
        self.cut.clear()

    def deliver(self, where: Callable[[int, int, Any], bool] | None = None) -> bool:
        """Deliver the first queued message matching ``where(src, dst, message)``; False when none does."""
        for k, (src, dst, message) in enumerate(self.queue):
            if where is None or where(src, dst, message):
                del self.queue[k]
                if dst in self.nodes:
                    self._execute(dst, type(message).__name__, self.nodes[dst].on_message(src, message, self.now))
                return True
        return False

    def deliver_all(self, where: Callable[[int, int, Any], bool] | None = None, max_steps: int = 100_000) -> int:
        steps = 0
        while steps < max_steps and self.deliver(where):
            steps += 1
        return steps

    def drop(self, where: Callable[[int, int, Any], bool] | None = None) -> int:
        before = len(self.queue)
        self.queue = [m for m in self.queue if where is not None and not where(*m)]
        return before - len(self.queue)

    # ------------------------------------------------------------------------------------------------- timers
    def fire(self, node_id: int, name: Any) -> None:
        """Let time pass until ``node_id``'s timer ``name`` is due, and fire it (or hand over a durability notice:
        the harness makes writes durable at once and keeps each notice as a pseudo-timer ``("persisted", token)``,
        so a test or the fuzzer decides when the node hears of it)."""
        deadline = self.timers[node_id].pop(name)
        self.now = max(self.now, deadline)
        if isinstance(name, tuple) and name and name[0] == PERSISTED:
            self._execute(node_id, "persisted", self.nodes[node_id].on_persisted(name[1], self.now))
            return
        self._execute(node_id, f"timer:{name}", self.nodes[node_id].on_timer(name, self.now))

    def stand(self, node_id: int) -> RaftNode:
        """Let ``node_id``'s election timer run out (re-armed ones included) until it stands for a new term."""
        node = self.nodes[node_id]
        term = node.current_term
        while node.current_term == term:
            self.fire(node_id, ELECTION)
        return node

    def elect(self, node_id: int, where: Callable[[int, int, Any], bool] | None = None) -> RaftNode:
        """:meth:`stand`, then deliver everything (matching ``where``)."""
        node = self.stand(node_id)
        self.deliver_all(where)
        return node

    def run(self, until: float, max_steps: int = 1_000_000) -> None:
        """Deliver queued messages; when none are left, fire the earliest timer; stop at virtual time ``until``."""
        for _ in range(max_steps):
            if self.deliver():
                continue
            due = [(t, i, str(name), name) for i, timers in self.timers.items() for name, t in timers.items()]
            if not due:
                break
            deadline, node_id, _, name = min(due)
            if deadline > until:
                break
            self.fire(node_id, name)
        self.now = max(self.now, until)

    # ------------------------------------------------------------------------------------------------ clients
    def request(self, node_id: int, op: str, key: Any = None, value: Any = None, *, client_id: int = 1,
                request_id: int = 1) -> list:
        request = ClientRequest(client_id=client_id, request_id=request_id, op=Operation(op), key=key, value=value)
        return self._execute(node_id, "request", self.nodes[node_id].on_client_request(request, self.now))

    def reply_to(self, client_id: int, request_id: int) -> Reply | None:
        found = [r for _, r in self.replies if r.client_id == client_id and r.request_id == request_id]
        assert len(found) <= 1, f"more than one reply to ({client_id}, {request_id}): {found}"
        return found[0] if found else None

    # ---------------------------------------------------------------------------------------------- inspection
    def leaders(self) -> list[RaftNode]:
        return [n for n in self.nodes.values() if n.role is Role.LEADER]

    def leader(self) -> RaftNode:
        """The live leader of the highest term."""
        return max(self.leaders(), key=lambda n: n.current_term)

    def check(self) -> list[str]:
        return invariants.check(self.nodes.values()) + self.violations

    # ---------------------------------------------------------------------------------------------- execution
    def _execute(self, node_id: int, kind: str, effects: list) -> list:
        disk = self.durable[node_id]
        for effect in effects:
            if isinstance(effect, Persist):
                disk["values"][effect.key] = effect.value
            elif isinstance(effect, PersistLog):
                first = disk["starts"].get(effect.key, 0)
                held = disk["logs"].get(effect.key, [])
                assert first <= effect.start <= first + len(held), (effect, first, len(held))
                disk["logs"][effect.key] = held[: effect.start - first] + list(effect.entries)
            elif isinstance(effect, CompactLog):
                first = disk["starts"].get(effect.key, 0)
                assert effect.first >= first, (effect, first)
                disk["logs"][effect.key] = disk["logs"].get(effect.key, [])[effect.first - first:]
                disk["starts"][effect.key] = effect.first
            if isinstance(effect, (Persist, PersistLog, CompactLog)) and effect.notify is not None:
                self.timers[node_id][(PERSISTED, effect.notify)] = self.now
            if isinstance(effect, (Persist, PersistLog, CompactLog)):
                pass
            elif isinstance(effect, Send):
                self._check_durable(node_id, effect)
                if (node_id, effect.dst) not in self.cut:
                    self.queue.append((node_id, effect.dst, effect.message))
            elif isinstance(effect, Reply):
                self._check_durable(node_id, effect)
                self.replies.append((node_id, effect))
            elif isinstance(effect, SetTimer):
                self.timers[node_id][effect.name] = self.now + effect.delay_s
            elif isinstance(effect, CancelTimer):
                self.timers[node_id].pop(effect.name, None)
            else:
                assert isinstance(effect, Annotate), effect
        self.trace.append((node_id, kind, tuple(effects)))
        self.violations.extend(self.monitor.observe(self.nodes.values()))
        self._check_own_match(node_id)
        for effect in effects:  # a zero-delay timer fires before anything else happens (a runtime: next in line)
            if isinstance(effect, SetTimer) and effect.delay_s == 0 and node_id in self.nodes \
                    and self.timers[node_id].get(effect.name) == self.now and self.eager_timers(effect.name):
                self.fire(node_id, effect.name)
            elif isinstance(effect, (Persist, PersistLog)) and effect.notify is not None and node_id in self.nodes:
                notice = (PERSISTED, effect.notify)
                if self.timers[node_id].get(notice) == self.now and self.eager_timers(notice):
                    self.fire(node_id, notice)
        return effects

    def _check_durable(self, node_id: int, effect: Any) -> None:
        node = self.nodes[node_id]
        disk = self.durable[node_id]
        hard = disk["values"].get(HARD_STATE_KEY, [0, None])
        durable, log = _aligned(disk, node)  # by index, from the higher of the two first indexes held
        what = type(effect.message).__name__ if isinstance(effect, Send) else "Reply"
        if list(hard) != [node.current_term, node.voted_for]:
            self.durability_errors.append(f"node {node_id} sent {what} with durable hard state "
                                          f"{hard}, in memory {[node.current_term, node.voted_for]}")
        if node.role is Role.LEADER and what != "Reply":
            # §10.2.1: a leader replicates in parallel with its own write (its other messages, refusals of votes
            # and of stale AppendEntries, depend on its term only) ...
            need = 0
            if durable != log[: len(durable)]:  # ... but its disk never contradicts what it sends
                self.durability_errors.append(f"node {node_id} sent {what} while its durable log is not a "
                                              f"prefix of its log")
        elif node.role is Role.LEADER:
            need = max(0, node.commit_index - _base(disk, node))  # a leader's reply depends on the committed prefix
        else:
            need = len(log)
        if len(durable) < need or durable[:need] != log[:need] or (need == len(log) and durable != log):
            self.durability_errors.append(f"node {node_id} sent {what} before its log was durable "
                                          f"(up to index {need}; durable {len(durable)})")

    def _check_own_match(self, node_id: int) -> None:
        """§10.2.1: a leader counts itself toward a commit majority only for entries durable on its own disk."""
        node = self.nodes.get(node_id)
        if node is None or node.role is not Role.LEADER:
            return
        disk = self.durable[node_id]
        durable, log = _aligned(disk, node)
        own = max(0, node._match[node_id] - _base(disk, node))  # at or below the base: in the snapshot
        if own > len(durable) or durable[:own] != log[:own]:
            self.durability_errors.append(f"node {node_id} counts itself up to index {own} but only {len(durable)} "
                                          f"entries are durable")


def _base(disk: dict, node: RaftNode) -> int:
    """The index both the node's log and its durable log hold entries after (the higher first index, less one)."""
    return max(disk["starts"].get(LOG_KEY, 0), node.log.offset)


def _aligned(disk: dict, node: RaftNode) -> tuple[list, list]:
    """The durable log and the node's log from the entry after :func:`_base` on (the node persists its Entry objects;
    the real storage writes their plain form)."""
    base = _base(disk, node)
    durable = disk["logs"].get(LOG_KEY, [])[base - disk["starts"].get(LOG_KEY, 0):]
    return durable, list(node.log)[base - node.log.offset:]


def fuzz(cluster: Cluster, seed: int, steps: int = 2000, *, crash_rate: float = 0.01) -> Cluster:
    """Random interleavings: deliver, drop, duplicate or reorder messages, fire timers, crash and recover nodes, and
    send client requests to whoever claims leadership. Deterministic in ``seed``."""
    rng = np.random.default_rng(seed)
    # the leader's write and its durability notice wait for the fuzzer (sometimes long), so followers acknowledge
    # and leaders crash while the leader's own copy is not yet durable (§10.2.1)
    cluster.eager_timers = lambda name: not (name == WRITE or (isinstance(name, tuple) and name[0] == PERSISTED))
    down: set[int] = set()
    request_id = 0
    for _ in range(steps):
        roll = rng.random()
        if roll < crash_rate and len(down) < (cluster.num_nodes - 1) // 2:
            victim = int(rng.choice(sorted(cluster.nodes)))
            cluster.crash(victim)
            down.add(victim)
        elif roll < 2 * crash_rate and down:
            back = int(rng.choice(sorted(down)))
            down.discard(back)
            cluster.recover(back)
        elif roll < 0.15:
            leaders = cluster.leaders()
            target = leaders[-1].node_id if leaders and rng.random() < 0.8 else int(rng.choice(sorted(cluster.nodes)))
            request_id += 1
            op = str(rng.choice(["read", "write", "cas"]))
            value = None if op == "read" else ([int(rng.integers(3)), int(rng.integers(3))] if op == "cas"
                                                 else int(rng.integers(3)))
            cluster.request(target, op, str(rng.choice(["a", "b"])), value, client_id=int(rng.integers(4)),
                            request_id=request_id)
        elif roll < 0.25:
            live = [(i, name) for i in sorted(cluster.nodes) for name in sorted(cluster.timers[i], key=str)]
            if rng.random() < 0.8:  # mostly heartbeats: elections every time would leave little committed
                live = [(i, name) for i, name in live if name != ELECTION] or live
            if live:
                node_id, name = live[int(rng.integers(len(live)))]
                cluster.fire(node_id, name)
        elif cluster.queue:
            k = int(rng.integers(len(cluster.queue))) if rng.random() < 0.3 else 0  # reorder
            if rng.random() < 0.05:
                del cluster.queue[k]  # loss
                continue
            if rng.random() < 0.03:
                cluster.queue.append(cluster.queue[k])  # duplication
            cluster.queue.insert(0, cluster.queue.pop(k))
            cluster.deliver()
    return cluster
