"""EPaxos attributes (SOSP 2013, Figure 2): ``seq`` and ``deps`` of a command from what a replica knows of the
commands interfering with it (per key: the highest instance of each replica, the highest ``seq``), and the record of
each instance a replica hears of. Methods of :class:`~seedance.models.protocols.epaxos.node.EPaxosNode`.

Beside ``conf[key]`` (``{replica: highest instance}``), ``_known_flat[key]`` keeps the same knowledge in the
canonical dependency form (:mod:`~seedance.models.protocols.epaxos.deps`): ``[replicas, flat, tuple or None, set]``,
kept in step by :meth:`Attributes._register` (a bisection and an in-place update or insertion), its tuple made again
only when asked after a change. A command on one key then merges without a loop in the two common cases: the
attributes proposed are what this replica knows (``==`` of two tuples: unchanged), or they are part of it (every
pair of them is at most what ``conf[key]`` holds: the union is the replica's canonical tuple). The second is
recognised first by a set lookup: ``[3]`` keeps the last tuples made (``EARLIER_KEPT``), and knowledge only grows,
so a proposal equal to one of them is at most what is known (most proposals are: a command leader proposes what
it knew, and the replicas hear of the same commands); otherwise by comparing the pairs with ``conf[key]``."""

from __future__ import annotations

from bisect import bisect_left
from typing import Any

from seedance.models.protocols.epaxos.deps import Deps, from_dict
from seedance.models.protocols.epaxos.instance import Iid, Value, _keys
from seedance.models.protocols.multipaxos.messages import Command

EARLIER_KEPT = 32  # earlier canonical tuples of a key's knowledge kept to recognise a proposal (then all are dropped)


class Attributes:
    """The per-key knowledge of interfering commands (``conf``, ``_known_flat``, ``key_seq``, ``_key_instances``)
    and the merge of attributes against it (a mixin of the node)."""

    __slots__ = ()

    def _attributes(self, command: Value, iid: Iid, seq: int, deps: Deps) -> tuple[int, Deps]:
        """Merge what this replica knows of commands interfering with ``command`` (on any of its keys) into
        (seq, deps). ``deps`` comes back as the same object when nothing is added (then ``==`` is identity)."""
        if type(command) is Command and command.op is not None:  # one key: the common value
            key = command.key
            known = self.conf.get(key)
            if known is None:
                return (seq if seq > 0 else 1), deps  # max(seq, 1), without the call
            highest = self.key_seq.get(key, 0)
            if seq <= highest:
                seq = highest + 1
            entry = self._known_flat[key]
            mine = entry[2]
            if mine is None:
                mine = entry[2] = tuple(entry[1])
                earlier = entry[3]
                if len(earlier) >= EARLIER_KEPT:
                    earlier.clear()
                earlier.add(mine)
            if mine == deps:
                return seq, deps
            own, number = iid
            if known.get(own) != number:
                if deps in entry[3]:  # an earlier form of what is known here: every pair is at most what is known
                    return seq, mine
                pairs = iter(deps)
                proposed = dict(zip(pairs, pairs))
                if proposed.items() <= known.items():
                    return seq, mine  # every pair proposed is known here: the union is what is known
            else:
                pairs = iter(deps)
                proposed = dict(zip(pairs, pairs))
            return seq, _finish(deps, proposed, *_merge(known, proposed, iid))
        keys = _keys(command)
        if not keys:
            return seq, deps
        merged: dict[int, int] | None = None
        grew = added = False
        for key in keys:
            known = self.conf.get(key)
            if known is None:
                seq = max(seq, 1)
                continue
            if merged is None:
                pairs = iter(deps)
                merged = dict(zip(pairs, pairs))
            more, larger = _merge(known, merged, iid)
            added, grew = added or more, grew or larger
            seq = max(seq, 1 + self.key_seq.get(key, 0))
        return seq, deps if merged is None else _finish(deps, merged, added, grew)

    def _register(self, iid: Iid, command: Value, seq: int) -> None:
        q, number = iid
        conf, key_seq, touching = self.conf, self.key_seq, self._key_instances
        keys = (command.key,) if type(command) is Command and command.op is not None else _keys(command)
        for key in keys:
            known = conf.get(key)
            if known is None:
                known = conf[key] = {}
                self._known_flat[key] = [[], [], None, set()]
            if number > known.get(q, 0):
                known[q] = number
                entry = self._known_flat[key]  # in step: the canonical form of known
                replicas, flat = entry[0], entry[1]
                k = bisect_left(replicas, q)
                if k < len(replicas) and replicas[k] == q:
                    flat[2 * k + 1] = number
                else:
                    replicas.insert(k, q)
                    flat[2 * k:2 * k] = (q, number)
                entry[2] = None
            if seq > key_seq.get(key, 0):
                key_seq[key] = seq
            ids = touching.get(key)  # not setdefault(key, set()): no set made and dropped per call
            if ids is None:
                ids = touching[key] = set()
            ids.add(iid)


def _merge(known: dict[int, int], merged: dict[int, int], iid: Iid) -> tuple[bool, bool]:
    """The replica-wise maximum of ``known`` merged into ``merged`` (a dict of dependencies, updated in place):
    whether a replica was added, whether an instance grew. The instance ``iid`` is no dependency of its own: its
    replica keeps what it had when ``iid`` is the highest ``known`` holds for it."""
    get = merged.get
    own, number = iid
    skip = own if known.get(own) == number else -1
    grew = added = False
    for q, j in known.items():
        held = get(q)
        if held is None:
            if q != skip:
                merged[q] = j
                added = True
        elif j > held and q != skip:
            merged[q] = j
            grew = True
    return added, grew


def _finish(deps: Deps, merged: dict[int, int], added: bool, grew: bool) -> Deps:
    """The canonical tuple of ``merged``, the dict of ``deps`` after :func:`_merge` (``deps`` when unchanged)."""
    if added:
        return from_dict(merged)
    if grew:  # the same replicas, in the same (increasing) order: no sort
        flat = list(deps)
        flat[1::2] = merged.values()
        return tuple(flat)
    return deps
