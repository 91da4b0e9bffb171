"""Instance compaction by snapshots: the :class:`Snapshots` part of an EPaxos replica.

What a replica keeps:

* ``executed_prefix[q]``: the highest ``i`` such that instances ``(q, 1..i)`` are all executed here, and
  ``_above[q]``, the instances of ``q`` executed above it (a later instance may execute before an earlier one
  it does not interfere with). Every instance number a command leader hands out is made durable before any peer
  hears of it, so a hole in the prefix is an instance some replica knows; it commits (a command, or a recovery's
  no-op) and the prefix moves on.
* A **snapshot**, taken once ``snapshot_instances`` instances were executed since the last one: the kv store, the
  EPaxos client sessions (``results``: deduplication survives), the executions per key (so the monitor can place a
  replica that restarts from it), and exactly the instances it reflects: ``executed_prefix`` and the executed
  instances above it. It is persisted under ``snapshot`` (one ``Persist``, after the handler's instance writes:
  every instance it reflects is committed durably before it).
* The **watermark**: each replica tells the others the prefix of its latest *durable* snapshot (a ``Watermark``
  message after each snapshot, behind the ``Persist`` in the effects, so durable before it leaves; again every
  ``WATERMARK_TICKS`` ticks against loss). The global watermark ``W[q]`` is the minimum, over every replica, this
  one included, of the prefix it reported (0 for one not heard from). Instances ``(q, i ≤ W[q])`` are
  **forgotten**: deleted from ``instances`` and the other per-instance tables, and from the durable table ``inst``
  (one ``PersistRecords`` delete, after ``Persist("forgotten", W)``), their clients' ``results`` too. (A result
  is what deduplicates a request proposed twice; a second instance of a request still uncommitted when the first
  is forgotten would be applied again where it executes after that. No client of this framework proposes a request
  twice to EPaxos: each attempt has its own request id, the simulator never duplicates a client's request and EPaxos
  never answers ``not-leader``; a client that re-sent request ids would need the results kept longer.)

Why forgetting is safe. An instance below ``W`` is executed at every replica and in the durable snapshot of every
replica, so a replica that crashes restarts past it (durable storage survives a crash in this model; a replica that
lost its disk would need a snapshot sent to it — not implemented: it would wait on instances nobody holds). Hence:

* no replica ever needs it again: it never blocks on it (a dependency ``deps[q] ≤ W[q]`` is at or below every
  replica's committed prefix, so it counts as executed), never Fetches it and never recovers it (Prepare,
  TryPreAccept are run only for instances not committed at the recoverer);
* a message about it that arrives late or twice (PreAccept, Accept, Commit, Prepare, TryPreAccept and the
  replies) is dropped (:meth:`Snapshots.on_message`): answering it as an unknown instance could let a recovery
  commit a no-op over a committed command, and handling it would recreate the instance;
* any command committed later is executed after it at every replica, because every replica executed it already;
  so dependencies pointing at it, or missing it (the per-key ``conf`` a restarted replica rebuilds from the
  records it kept), order nothing that is not ordered already;
* TryPreAccept's conflict check no longer sees it. A forgotten ``X`` not covered by the recovered attributes nor
  depending on the instance ``I`` would have told the recoverer that those attributes were never fast-committed
  (restart phase 1). Accepting them instead is still safe: if ``I`` was never committed, committing it now orders
  it after ``X`` everywhere (``X`` is executed everywhere); if it was committed on the fast path with them, the
  accept commits the same value.

A crashed replica holds the watermark back until it returns (its snapshot and its reports). Recovery
(:meth:`Snapshots._restore`): the snapshot's kv store and sessions, the instances it reflects marked executed, the
records at or below ``forgotten`` deleted again (a crash between the two writes), then the committed instances
above it re-executed as before. A replica whose prefix of a leader's instances has a hole while later ones are
executed here, or stays below the prefix a peer's snapshot reflects, twice in a row at a watermark tick, treats the
next instance as missing (Fetch, then recovery), so lost Commits cannot stall the watermark forever.

Logs for monitors: ``commit_log`` and ``exec_log`` keep what was logged since the snapshot before the last one
(``commit_base``/``exec_base`` count the entries dropped, ``exec_base_counts`` the executions per key before
``exec_log[0]``); the monitor observes a node after every input, so it has seen what is dropped.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from seedance.models.kv import KVStore, Result, _plain_key
from seedance.models.protocols.contract import DurableState, Effects, NodeId, Outcome, Persist, PersistRecords, Send
from seedance.models.protocols.epaxos.instance import COMMITTED, TABLE, Iid, _keys, _parts
from seedance.models.protocols.epaxos.messages import HEADER_BYTES, Watermark

SNAPSHOT_KEY = "snapshot"
FORGOTTEN_KEY = "forgotten"
WATERMARK_TICKS = 20  # a replica with a snapshot repeats its Watermark (and looks for holes) every so many ticks


class Snapshots:
    """Mixin of :class:`~seedance.models.protocols.epaxos.node.EPaxosNode`: snapshots, the watermark, forgetting."""

    __slots__ = ()

    def _init_snapshots(self) -> None:
        n = self.num_nodes
        self.executed_prefix = [0] * n
        self._above: list[set[int]] = [set() for _ in range(n)]
        # the prefix of the newest snapshot (durable before anyone hears of it); this list and ``forgotten`` are
        # replaced, never changed in place, so the monitor sees a change by identity
        self.snapshot_prefix = [0] * n
        self._snapshot_above: list[list[int]] = []
        self._since_snapshot = 0
        self._every = self.config.snapshot_instances
        self._reported: dict[NodeId, list[int]] = {}  # peer -> the prefix of its durable snapshot it reported
        self.forgotten = [0] * n  # instances (q, i <= forgotten[q]) are forgotten here
        self._forgot = False  # whether any is (messages are filtered from then on)
        self.snapshot_key_counts: dict[Any, int] = {}  # executions per key the newest snapshot reflects
        self.commit_base = self.exec_base = 0
        self.exec_base_counts: Counter[Any] = Counter()  # executions per key before exec_log[0]
        self._log_cut = (0, 0)  # commit_log, exec_log lengths at the last snapshot
        self._watermark_ticks = 0
        self._holes: set[Iid] = set()

    # ---------------------------------------------------------------------------------------------- executing
    def _executed_one(self, iid: Iid, out: Effects) -> None:
        """``iid`` was just executed (the caller's ``_apply``): advance the executed prefix; a snapshot once
        ``snapshot_instances`` instances were executed since the last one."""
        q, i = iid
        prefix = self.executed_prefix[q]
        if i == prefix + 1:
            above = self._above[q]
            prefix = i
            while prefix + 1 in above:
                prefix += 1
                above.discard(prefix)
            self.executed_prefix[q] = prefix
        elif i > prefix:
            self._above[q].add(i)
        self._since_snapshot += 1
        if self._since_snapshot >= self._every > 0:
            self._take_snapshot(out)

    def _take_snapshot(self, out: Effects) -> None:
        self._since_snapshot = 0
        self.snapshot_prefix = list(self.executed_prefix)
        self._snapshot_above = [[q, i] for q in range(self.num_nodes) for i in sorted(self._above[q])]
        self._trim_logs()
        counts = self.snapshot_key_counts = Counter(self.exec_base_counts)
        counts.update(key for key, _ in self.exec_log)
        results = [[c, r, res.outcome.value, res.value, res.error] for (c, r), res in self.results.items()]
        state = self.kv.snapshot()
        value = [self.snapshot_prefix, self._snapshot_above, state, results, [[k, v] for k, v in counts.items()]]
        size = HEADER_BYTES + 32 * len(state["data"]) + 48 * len(results) + 16 * len(self._snapshot_above)
        out.append(Persist(key=SNAPSHOT_KEY, value=value, size_bytes=size))
        self._send_watermark(out)
        self._advance_watermark(out)

    def _trim_logs(self) -> None:
        """Drop the log entries made before the previous snapshot (the monitor has seen them)."""
        commits, execs = self._log_cut
        if commits:
            del self.commit_log[:commits]
            self.commit_base += commits
        if execs:
            self.exec_base_counts.update(key for key, _ in self.exec_log[:execs])
            del self.exec_log[:execs]
            self.exec_base += execs
        self._log_cut = (len(self.commit_log), len(self.exec_log))

    # ---------------------------------------------------------------------------------------------- watermark
    def _send_watermark(self, out: Effects) -> None:
        message = Watermark(prefix=tuple(self.snapshot_prefix))
        out.extend(Send(dst=p, message=message, size_bytes=HEADER_BYTES + 8 * self.num_nodes) for p in self.peers)

    def _on_watermark(self, src: NodeId, m: Watermark, now: float) -> Effects:
        old = self._reported.get(src)
        self._reported[src] = list(m.prefix) if old is None else [a if a > b else b for a, b in zip(old, m.prefix)]
        out: Effects = []
        self._advance_watermark(out)
        return self._emit(out)

    def _watermark(self) -> list[int]:
        """The global watermark: per leader, the least durable snapshot prefix over every replica."""
        if len(self._reported) < len(self.peers):
            return list(self.forgotten)
        low = list(self.snapshot_prefix)
        for prefix in self._reported.values():
            low = [a if a < b else b for a, b in zip(low, prefix)]
        return low

    def _advance_watermark(self, out: Effects) -> None:
        mark = self._watermark()
        if all(w <= f for w, f in zip(mark, self.forgotten)):
            return
        gone: list[str] = []
        forgotten = list(self.forgotten)  # a new list: the monitor sees a change by identity
        for q, top in enumerate(mark):
            for i in range(forgotten[q] + 1, top + 1):
                if self._forget((q, i)):
                    gone.append(f"{q}.{i}")
            if top > forgotten[q]:
                forgotten[q] = top
        self.forgotten = forgotten
        self._forgot = True
        out.append(Persist(key=FORGOTTEN_KEY, value=list(self.forgotten), size_bytes=16 + 8 * self.num_nodes))
        if gone:
            out.append(PersistRecords(table=TABLE, delete=tuple(gone), size_bytes=16 * len(gone)))

    def _forget(self, iid: Iid) -> bool:
        """Drop ``iid`` from every per-instance table (True if this replica held it)."""
        inst = self.instances.pop(iid, None)
        self._committed_at.pop(iid, None)
        self._fetched.pop(iid, None)
        self._missing.pop(iid, None)
        self.coords.pop(iid, None)
        if inst is None:
            return False
        for key in _keys(inst.command):
            known = self._key_instances.get(key)
            if known is not None:
                known.discard(iid)
        for command in _parts(inst.command):
            if command.client_id is not None:
                self.results.pop((command.client_id, command.request_id), None)
        return True

    def on_message(self, src: NodeId, message: Any, now: float) -> Effects:
        """Messages about a forgotten instance are dropped (see the module's docstring); the others dispatched by
        type, as :class:`~seedance.models.protocols.dispatch.Dispatching` does."""
        if self._forgot:
            instance = getattr(message, "instance", None)
            if instance is not None and instance <= self.forgotten[message.replica]:
                return []
        handler = self._by_type.get(type(message))
        return [] if handler is None else handler(self, src, message, now)

    def _tick_snapshots(self, out: Effects, now: float) -> None:
        """Every ``WATERMARK_TICKS`` ticks once a snapshot exists (or a peer reported one): our Watermark again, and
        the next instance of each leader looked for (Fetch, then recovery) where we stay behind: a hole below
        instances executed here, or a prefix a peer's snapshot reflects, twice in a row."""
        if not any(self.snapshot_prefix) and not self._reported:
            return
        self._watermark_ticks += 1
        if self._watermark_ticks < WATERMARK_TICKS:
            return
        self._watermark_ticks = 0
        if any(self.snapshot_prefix):
            self._send_watermark(out)
        ahead = [max(column) for column in zip(*self._reported.values())] if self._reported else self.forgotten
        holes = {(q, self.executed_prefix[q] + 1) for q in range(self.num_nodes)
                 if self._above[q] or ahead[q] > self.executed_prefix[q]}
        for iid in sorted(holes & self._holes):
            inst = self.instances.get(iid)
            if iid not in self._missing and (inst is None or inst.status != COMMITTED):
                self._missing[iid] = (now, self._recovery_timeout())
        self._holes = holes

    # ----------------------------------------------------------------------------------------------- recovery
    def _restore(self, durable: DurableState) -> tuple[set[Iid], Effects]:
        """The snapshot and the forgotten watermark from what survived a crash: the instances the snapshot
        reflects (marked executed by the caller), and the delete of the records at or below ``forgotten`` that a
        crash between the two writes left."""
        forgotten = durable.values.get(FORGOTTEN_KEY)
        if forgotten is not None:
            self.forgotten = [int(x) for x in forgotten]
            self._forgot = any(self.forgotten)
        covered: set[Iid] = set()
        snapshot = durable.values.get(SNAPSHOT_KEY)
        if snapshot is not None:
            prefix, above, state, results, counts = snapshot
            self.kv = KVStore.restore(state)
            self.results = {(c, r): Result(outcome=Outcome(o), value=v, error=e) for c, r, o, v, e in results}
            self.snapshot_prefix = [int(x) for x in prefix]
            self.executed_prefix = list(self.snapshot_prefix)
            self._snapshot_above = [[int(q), int(i)] for q, i in above]
            for q, i in self._snapshot_above:
                self._above[q].add(i)
                covered.add((q, i))
            self.snapshot_key_counts = Counter({_plain_key(k): int(v) for k, v in counts})
            self.exec_base_counts = Counter(self.snapshot_key_counts)
        self.committed_prefix = [max(a, b) for a, b in zip(self.snapshot_prefix, self.forgotten)]
        # our own instances up to there may have no record left: never hand their numbers out again
        self.next_instance = max(self.next_instance, self.committed_prefix[self.node_id] + 1)
        stale = [name for name in durable.records.get(TABLE, {})
                 if int(name.split(".")[1]) <= self.forgotten[int(name.split(".")[0])]]
        if not stale:
            return covered, []
        return covered, [PersistRecords(table=TABLE, delete=tuple(stale), size_bytes=16 * len(stale))]

    def _covered(self, iid: Iid, covered: set[Iid]) -> bool:
        """Whether the restored snapshot reflects ``iid`` (executed before the crash)."""
        return iid[1] <= self.snapshot_prefix[iid[0]] or iid in covered

    def _walk_committed_prefix(self) -> None:
        for q in range(self.num_nodes):
            prefix = self.committed_prefix[q]
            while True:
                nxt = self.instances.get((q, prefix + 1))
                if nxt is None or nxt.status != COMMITTED:
                    break
                prefix += 1
            self.committed_prefix[q] = prefix
