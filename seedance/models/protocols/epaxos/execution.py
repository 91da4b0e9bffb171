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
NO_EDGES: tuple[Iid, ...] = ()  # no edge (shared: edge lists are only read)


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
        registered = inst.status != NONE and inst.command is command and inst.seq >= seq  # _registered
        inst.status, inst.command, inst.seq, inst.deps = COMMITTED, command, seq, deps
        if not registered:
            self._register(iid, command, seq)
        self._write(iid, inst)
        if mark:
            self._mark_committed(iid, now, inst)
        return True

    def _mark_committed(self, iid: Iid, now: float, inst: Instance | None = None) -> None:
        if inst is None:
            inst = self.instances[iid]
        command = inst.command
        self.commit_log.append((iid, (command, inst.seq, inst.deps)))
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
        if type(command) is Command:  # one key (or none, a no-op): no tuple of keys made
            keys: tuple[Any, ...] = () if command.op is None else (command.key,)
        else:
            keys = _keys(command)
        for key in keys:
            table = unexec.get(key)
            if table is None:
                unexec[key] = {q: [i]}
                continue
            numbers = table.get(q)
            if numbers is None:
                table[q] = [i]
            elif numbers[-1] < i:  # the usual order: no bisection
                numbers.append(i)
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
        command = m.command
        if type(command) is Command and command.op is None and command.client_id is None:
            command = None  # the no-op travels as an empty Command (_decoded)
        out: Effects = []
        coords = self.coords
        if coords:
            coords.pop(iid, None)
        if self._commit_local(iid, command, m.seq, m.deps, now):
            waiting = self._blocked.pop(iid, None)
            self._execute([iid, *waiting] if waiting else [iid], out, now)
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
        instances, blocked, prefix = self.instances, self._blocked, self.committed_prefix
        while work:
            iid = work.pop()
            inst = instances.get(iid)
            if inst is None or inst.status != COMMITTED or inst.executed:
                continue
            missing = None
            deps, seen = inst.deps, inst.ready
            if seen < len(deps):  # the first test of _edges, here: a candidate still waiting costs no walk
                value = inst.command
                if value is not None and (type(value) is not Command or value.op is not None):
                    pairs = iter(deps[seen:] if seen else deps)
                    for q, top in zip(pairs, pairs):
                        if prefix[q] < top:
                            inst.ready = 2 * deps[::2].index(q)
                            missing = (q, prefix[q] + 1)
                            break
                    else:
                        inst.ready = len(deps)
            if missing is None:
                missing = self._run_scc(iid, out, now)
            if missing is not None:
                waiting = blocked.get(missing)  # not setdefault(missing, set()): no set made and dropped per call
                if waiting is None:
                    waiting = blocked[missing] = set()
                waiting.add(iid)
                if missing not in self._missing:
                    self._missing[missing] = (now, self._recovery_timeout())

    def _edges(self, iid: Iid) -> tuple[Any, Iid | None]:
        """Committed, unexecuted instances ``iid`` depends on (a sequence not to change); or the first instance not
        committed here.

        In the order of replica, key, then instance number. The committed-prefix test covers the replicas among the
        dependencies (a sparse set: a pair per replica with an interfering instance, not a slot per replica), once:
        ``Instance.ready`` counts the integers of ``deps`` whose pairs were seen committed (the prefixes only grow),
        so a later try resumes where the last stopped and an instance reached again is not tested again; only the
        replicas with unexecuted instances on a key are visited (``_unexec`` holds no empty entry): the cost follows
        the instances waiting, not the number of replicas."""
        inst = self.instances[iid]
        value = inst.command
        if type(value) is Command:  # one key (or none): no tuple of keys made
            if value.op is None:
                return NO_EDGES, None
            keys: tuple[Any, ...] = ()
        else:
            keys = _keys(value)
            if not keys:
                return NO_EDGES, None
        deps = inst.deps
        seen = inst.ready
        if seen < len(deps):  # some pairs not yet seen committed here (a Python loop: cheaper than map(lt, ...))
            prefix = self.committed_prefix
            pairs = iter(deps[seen:] if seen else deps)
            for q, top in zip(pairs, pairs):
                if prefix[q] < top:
                    inst.ready = 2 * deps[::2].index(q)
                    return NO_EDGES, (q, prefix[q] + 1)
            inst.ready = len(deps)
        if not keys:
            return self._edges_on_key(iid, deps, self._unexec.get(value.key)), None
        if len(keys) == 1:
            return self._edges_on_key(iid, deps, self._unexec.get(keys[0])), None
        return self._edges_on_keys(iid, deps, keys), None

    def _edges_on_keys(self, iid: Iid, deps: Deps, keys: tuple[Any, ...]) -> list[Iid]:
        """:meth:`_edges` of a batch on several keys, its dependencies committed here."""
        replicas, tops = deps[::2], deps[1::2]
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
        return list(dict.fromkeys(found))

    @staticmethod
    def _edges_on_key(iid: Iid, deps: Deps, table: dict[int, list[int]] | None) -> Any:
        """:meth:`_edges` of a value on one key (every single command), its dependencies committed here: the
        committed, unexecuted instances on the key (``table``: replica -> its sorted numbers, none empty) that the
        dependencies cover."""
        if not table:
            return NO_EDGES
        found: list[Iid] = []
        replicas = deps[::2]
        count = len(replicas)
        own, number = iid
        for q in table if len(table) == 1 else sorted(table):
            k = bisect.bisect_left(replicas, q)
            if k == count or replicas[k] != q:
                continue
            top = deps[2 * k + 1]
            numbers = table[q]
            first = numbers[0]
            if first > top:
                continue
            if len(numbers) == 1:  # the usual case: no slice, no bisection
                if first != number or q != own:
                    found.append((q, first))
                continue
            for i in numbers[: bisect.bisect_right(numbers, top)]:
                if i != number or q != own:
                    found.append((q, i))
        return found

    def _run_scc(self, start: Iid, out: Effects, now: float) -> Iid | None:
        """Execute the strongly connected components reachable from ``start``, dependencies first (Tarjan,
        :meth:`_tarjan`). Returns the missing instance that blocks ``start`` (nothing is executed then), or None.

        The two commonest walks take no Tarjan state: ``start`` with one dependency ``w`` that has none (two
        components, ``w`` first) or that depends on ``start`` alone (one component of two, by ``seq`` then id)."""
        edges0, missing = self._edges(start)
        if missing is not None:  # the common way out (a commit still missing here): nothing allocated
            return missing
        if not edges0:  # no committed, unexecuted dependency: a component of its own
            self._apply(start, out, now)
            return None
        if len(edges0) > 1:
            return self._tarjan(start, edges0, None, NO_EDGES, out, now)
        w = edges0[0]
        w_edges, missing = self._edges(w)
        if missing is not None:
            return missing
        if not w_edges:
            self._apply(w, out, now)
        elif len(w_edges) == 1 and w_edges[0] == start:
            instances = self.instances
            if (instances[w].seq, w) < (instances[start].seq, start):
                self._apply(w, out, now)
            else:
                self._apply(start, out, now)
                start = w
        else:
            return self._tarjan(start, edges0, w, w_edges, out, now)
        self._apply(start, out, now)
        return None

    def _tarjan(self, start: Iid, edges0: Any, w0: Iid | None, w0_edges: Any, out: Effects,
                now: float) -> Iid | None:
        """Tarjan's SCC algorithm (iterative) from ``start`` (its edges ``edges0``; ``w0``: its only edge, already
        descended to, with edges ``w0_edges``, or None); execute every component, dependencies first.

        Each frame walks its vertex's edges with an iterator (no tuple made per edge); low-links sit in a list by
        index; a vertex whose component is complete takes the index ``DONE``, above every other, so the low-link
        update ``min(low, index)`` passes over it without an on-stack set."""
        edges_of = self._edges
        index: dict[Iid, int] = {start: 0}
        low: list[int] = [0]
        stack: list[Iid] = [start]
        components: list[list[Iid]] = []
        first = iter(edges0)
        frames: list[tuple[Iid, int, Any, int]] = [(start, 0, first, 0)]  # vertex, index, edges, stack slot
        if w0 is not None:  # the state of the walk just after its first descent, to w0
            next(first)
            index[w0] = 1
            low.append(1)
            frames.append((w0, 1, iter(w0_edges), 1))
            stack.append(w0)
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
        value = inst.command
        if type(value) is Command:  # one key, one command (or a no-op: none): no tuples made
            parts: tuple[Command, ...] = () if value.op is None else (value,)
            keys: tuple[Any, ...] = () if value.op is None else (value.key,)
        else:
            parts, keys = _parts(value), _keys(value)
        for key in keys:
            table = self._unexec[key]
            numbers = table[q]
            if len(numbers) == 1:  # no empty entry stays: a replica listed has instances waiting
                del table[q]
            elif numbers[0] == i:  # the usual order: the oldest first
                del numbers[0]
            else:
                del numbers[bisect.bisect_left(numbers, i)]
            self.exec_log.append((key, iid))
        waiting = self.pending.pop(iid, None)  # own commands: answered below
        results: dict[tuple[Any, int], Result] | None = None if waiting is None else {}
        known = self.results
        for command in parts:
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
