"""EPaxos commit and execution (SOSP 2013, §4.4): a decision is made durable before it is announced; a committed
instance runs once its dependencies are committed here, by strongly connected components of the dependency graph.
Methods of
:class:`~seedance.models.protocols.epaxos.node.EPaxosNode`.

* Execution (§4.4): a committed instance executes once every instance it may depend on is committed locally; the
  dependency graph of committed, unexecuted instances is split into strongly connected components (Tarjan 1972,
  iterative), executed in inverse topological order, and within a component by increasing ``seq`` (ties: replica,
  instance). Replicas thus apply interfering commands in the same order.
"""

from __future__ import annotations

import bisect
from typing import Any

from seedance.models.kv import Result
from seedance.models.protocols.contract import Effects, NodeId, Outcome, Reply, Send
from seedance.models.protocols.epaxos.deps import Deps
from seedance.models.protocols.epaxos.instance import (
    COMMITTED,
    NONE,
    NOOP,
    Iid,
    Instance,
    Value,
    _decoded,
    _keys,
    _parts,
    _reply,
    _size,
)
from seedance.models.protocols.epaxos.messages import Commit, Fetch
from seedance.models.protocols.multipaxos.messages import Command

DONE = 1 << 62  # Tarjan: the index of a vertex whose component is complete (above every index given out)


class Execution:
    """Commits (made durable, then announced and learnt) and the dependency-graph execution of committed
    instances (a mixin of the node)."""

    __slots__ = ()

    # ================================================================================================= commit
    def _commit(self, iid: Iid, command: Value, seq: int, deps: Deps, out: Effects, now: float) -> None:
        """This replica decided ``iid`` (as its coordinator): write the commit with a durability notice; the commit
        takes effect — Commit messages, execution, the monitors' view — only once the write has landed
        (:meth:`on_persisted`), so a decision a crash erases was never acted upon."""
        self.coords.pop(iid, None)
        if not self._commit_local(iid, command, seq, deps, now, mark=False):
            return
        self._unmarked.add(iid)
        self._notify.append(iid)

    def on_persisted(self, token: Any, now: float) -> Effects:
        if not (isinstance(token, tuple) and len(token) == 2 and token[0] == "commit"):
            return []
        out: Effects = []
        for q, i in token[1]:
            iid = (q, i)
            if iid not in self._unmarked:
                continue
            self._unmarked.discard(iid)
            self._mark_committed(iid, now)
            inst = self.instances[iid]
            commit = self._commit_message(self.node_id, iid, inst)  # one message, sent to every peer
            out.extend(Send(dst=p, message=commit.message, size_bytes=commit.size_bytes) for p in self.peers)
            self._execute([iid, *self._blocked.pop(iid, ())], out, now)
        return self._emit(out)

    def _commit_local(self, iid: Iid, command: Value, seq: int, deps: Deps, now: float, *,
                      mark: bool = True) -> bool:
        inst = self.instances.get(iid)
        if inst is None:  # not setdefault(iid, Instance()): no Instance made and dropped for a known one
            inst = self.instances[iid] = Instance()
        elif inst.status == COMMITTED:
            return False
        registered = _registered(inst, command, seq)
        inst.status, inst.command, inst.seq, inst.deps = COMMITTED, command, seq, deps
        if not registered:
            self._register(iid, command, seq)
        self._persist(iid)
        if mark:
            self._mark_committed(iid, now)
        return True

    def _mark_committed(self, iid: Iid, now: float) -> None:
        inst = self.instances[iid]
        self.commit_log.append((iid, (inst.command, inst.seq, inst.deps)))
        q, i = iid
        prefix = self.committed_prefix[q]
        if i == prefix + 1:  # otherwise the prefix stays: its next instance is not this one
            instances, unmarked = self.instances, self._unmarked
            while True:
                nxt_iid = (q, prefix + 1)
                nxt = instances.get(nxt_iid)
                if nxt is None or nxt.status != COMMITTED or nxt_iid in unmarked:
                    break
                prefix += 1
            self.committed_prefix[q] = prefix
        unexec = self._unexec
        for key in _keys(inst.command):
            table = unexec.get(key)
            if table is None:
                unexec[key] = {q: [i]}
                continue
            numbers = table.get(q)
            if numbers is None:
                table[q] = [i]
            else:
                bisect.insort(numbers, i)
        self._missing.pop(iid, None)
        if iid in self.pending:
            self._committed_at[iid] = now

    def _commit_message(self, dst: int, iid: Iid, inst: Instance) -> Send:
        message = Commit(replica=iid[0], instance=iid[1], command=inst.command or NOOP, seq=inst.seq, deps=inst.deps)
        return Send(dst=dst, message=message, size_bytes=_size(inst.command, inst.deps))

    def _on_commit(self, src: NodeId, m: Commit, now: float) -> Effects:
        iid = (m.replica, m.instance)
        command = _decoded(m.command)
        out: Effects = []
        self.coords.pop(iid, None)
        if self._commit_local(iid, command, m.seq, m.deps, now):
            self._execute([iid, *self._blocked.pop(iid, ())], out, now)
        return self._emit(out)

    def _on_fetch(self, src: NodeId, m: Fetch, now: float) -> Effects:
        out: Effects = []
        for i in range(m.first, m.last + 1):
            inst = self.instances.get((m.replica, i))
            if inst is not None and inst.status == COMMITTED:
                out.append(self._commit_message(src, (m.replica, i), inst))
        return out

    # ============================================================================================== execution
    def _execute(self, candidates: list[Iid], out: Effects, now: float) -> None:
        """Execute what ``candidates`` (a list made for the call, consumed from its end) and the instances they
        depend on allow; a candidate blocked on an instance not committed here waits for it (``_blocked``)."""
        work = candidates
        instances, blocked = self.instances, self._blocked
        while work:
            iid = work.pop()
            inst = instances.get(iid)
            if inst is None or inst.status != COMMITTED or inst.executed:
                continue
            missing = self._run_scc(iid, out, now)
            if missing is not None:
                waiting = blocked.get(missing)  # not setdefault(missing, set()): no set made and dropped per call
                if waiting is None:
                    waiting = blocked[missing] = set()
                waiting.add(iid)
                if missing not in self._missing:
                    self._missing[missing] = (now, self._recovery_timeout())

    def _edges(self, iid: Iid) -> tuple[list[Iid], Iid | None]:
        """Committed, unexecuted instances ``iid`` depends on; or the first instance not committed here.

        In the order of replica, key, then instance number. The committed-prefix test covers the replicas among the
        dependencies (a sparse set: a pair per replica with an interfering instance, not a slot per replica), once:
        ``Instance.ready`` records that they all are (an instance reached again, from others or in a later try, is
        not tested again); only the replicas with unexecuted instances on a key are visited (``_unexec`` holds no
        empty entry): the cost follows the instances waiting, not the number of replicas."""
        inst = self.instances[iid]
        value = inst.command
        if type(value) is Command:  # one key (or none): no tuple of keys made
            if value.op is None:
                return [], None
            keys: tuple[Any, ...] = ()
        else:
            keys = _keys(value)
            if not keys:
                return [], None
        deps, prefix = inst.deps, self.committed_prefix
        if not inst.ready:  # its pairs not yet all seen committed here (a Python loop: cheaper than map(lt, ...))
            pairs = iter(deps)
            for q, top in zip(pairs, pairs):
                if prefix[q] < top:
                    return [], (q, prefix[q] + 1)
            inst.ready = True
        replicas, tops = deps[::2], deps[1::2]
        if not keys:
            return self._edges_on_key(iid, replicas, tops, self._unexec.get(value.key)), None
        if len(keys) == 1:
            return self._edges_on_key(iid, replicas, tops, self._unexec.get(keys[0])), None
        found: list[Iid] = []
        tables = [table for table in map(self._unexec.get, keys) if table]
        waiting = sorted(tables[0]) if len(tables) == 1 else sorted({q for table in tables for q in table})
        count = len(replicas)
        for q in waiting:
            k = bisect.bisect_left(replicas, q)
            if k == count or replicas[k] != q:
                continue
            top = tops[k]
            for table in tables:
                numbers = table.get(q)
                if numbers and numbers[0] <= top:
                    for i in numbers[: bisect.bisect_right(numbers, top)]:
                        if (q, i) != iid:
                            found.append((q, i))
        return list(dict.fromkeys(found)), None

    @staticmethod
    def _edges_on_key(iid: Iid, replicas: Deps, tops: Deps, table: dict[int, list[int]] | None) -> list[Iid]:
        """:meth:`_edges` of a value on one key (every single command), its dependencies committed here: the
        committed, unexecuted instances on the key (``table``: replica -> its sorted numbers, none empty) that the
        dependencies (``replicas`` and their ``tops``) cover."""
        found: list[Iid] = []
        if not table:
            return found
        count = len(replicas)
        own, number = iid
        for q in table if len(table) == 1 else sorted(table):
            k = bisect.bisect_left(replicas, q)
            if k == count or replicas[k] != q:
                continue
            top = tops[k]
            numbers = table[q]
            if numbers[0] <= top:
                for i in numbers[: bisect.bisect_right(numbers, top)]:
                    if i != number or q != own:
                        found.append((q, i))
        return found

    def _run_scc(self, start: Iid, out: Effects, now: float) -> Iid | None:
        """Tarjan's SCC algorithm (iterative) from ``start``; execute every component, dependencies first.
        Returns the missing instance that blocks ``start`` (nothing is executed then), or None.

        Each frame walks its vertex's edges with an iterator (no tuple made per edge); low-links sit in a list by
        index; a vertex whose component is complete takes the index ``DONE``, above every other, so the low-link
        update ``min(low, index)`` passes over it without an on-stack set."""
        edges0, missing = self._edges(start)
        if missing is not None:  # the common way out (a commit still missing here): nothing allocated
            return missing
        if not edges0:  # no committed, unexecuted dependency: a component of its own
            self._apply(start, out, now)
            return None
        edges_of = self._edges
        index: dict[Iid, int] = {start: 0}
        low: list[int] = [0]
        stack: list[Iid] = [start]
        components: list[list[Iid]] = []
        frames: list[tuple[Iid, int, Any, int]] = [(start, 0, iter(edges0), 0)]  # vertex, index, edges, stack slot
        while frames:
            _, vi, edges, slot = frames[-1]
            for w in edges:
                wi = index.get(w)
                if wi is None:  # a tree edge: descend
                    w_edges, missing = edges_of(w)
                    if missing is not None:
                        return missing
                    wi = index[w] = len(low)
                    low.append(wi)
                    frames.append((w, wi, iter(w_edges), len(stack)))
                    stack.append(w)
                    break
                if wi < low[vi]:
                    low[vi] = wi
            else:  # every edge of v walked
                frames.pop()
                lv = low[vi]
                if lv == vi:  # v roots a component: v and what lies above it on the stack
                    component = stack[slot:]
                    del stack[slot:]
                    for w in component:
                        index[w] = DONE
                    components.append(component)
                else:  # not a root, so not start: its parent's frame is below
                    parent = frames[-1][1]
                    if lv < low[parent]:
                        low[parent] = lv
        instances = self.instances
        for component in components:
            if len(component) > 1:  # (seq, replica, instance): a total order, whatever the stack order was
                component.sort(key=lambda x: (instances[x].seq, x))
            for iid in component:
                self._apply(iid, out, now)
        return None

    def _apply(self, iid: Iid, out: Effects, now: float) -> None:
        inst = self.instances[iid]
        inst.executed = True
        q, i = iid
        for key in _keys(inst.command):
            table = self._unexec[key]
            numbers = table[q]
            if len(numbers) == 1:  # no empty entry stays: a replica listed has instances waiting
                del table[q]
            else:
                del numbers[bisect.bisect_left(numbers, i)]
            self.exec_log.append((key, iid))
        waiting = self.pending.pop(iid, None)  # own commands: answered below
        results: dict[tuple[Any, int], Result] | None = None if waiting is None else {}
        known = self.results
        for command in _parts(inst.command):
            pair = (command.client_id, command.request_id)
            result = known.get(pair) if command.client_id is not None else None
            if result is None:
                result = self.kv.apply(None, command.request_id, command.op, command.key, command.value)
                if command.client_id is not None:
                    known[pair] = result
            if results is not None:
                results[pair] = result
        if waiting is not None:
            committed = self._committed_at.pop(iid, now)
            for client_id, request_id, proposed in waiting:
                result = results.get((client_id, request_id))
                if result is not None:
                    self.latencies.add(committed - proposed, now - committed)
                    out.append(_reply(client_id, request_id, result))
                else:  # the instance was committed with something else (a recovery's no-op)
                    out.append(Reply(client_id=client_id, request_id=request_id, outcome=Outcome.INFO,
                                     error="superseded"))
        self._executed_one(iid, out)


def _registered(inst: Instance, command: Value, seq: int) -> bool:
    """Whether ``inst`` was registered (:meth:`Attributes._register`) with ``command`` at ``seq`` or above, so that
    registering it again changes nothing: it was pre-accepted or accepted here with that very object (the simulator
    hands every replica the leader's object; a decoded copy is registered again)."""
    return inst.status != NONE and inst.command is command and inst.seq >= seq
