"""EPaxos attributes (SOSP 2013, Figure 2): ``seq`` and ``deps`` of a command from what a replica knows of the
commands interfering with it (per key: the highest instance of each replica, the highest ``seq``), and the record of
each instance a replica hears of. Methods of :class:`~seedance.models.protocols.epaxos.node.EPaxosNode`."""

from __future__ import annotations

from seedance.models.protocols.epaxos.deps import Deps, from_dict
from seedance.models.protocols.epaxos.instance import Iid, Value, _keys


class Attributes:
    """The per-key knowledge of interfering commands (``conf``, ``key_seq``, ``_key_instances``) and the merge of
    attributes against it (a mixin of the node)."""

    __slots__ = ()

    def _attributes(self, command: Value, iid: Iid, seq: int, deps: Deps) -> tuple[int, Deps]:
        """Merge what this replica knows of commands interfering with ``command`` (on any of its keys) into
        (seq, deps). ``deps`` comes back as the same object when nothing is added (then ``==`` is identity)."""
        keys = _keys(command)
        if not keys:
            return seq, deps
        merged: dict[int, int] | None = None
        grew = added = False
        own, number = iid
        for key in keys:
            known = self.conf.get(key)
            if known is None:
                seq = max(seq, 1)
                continue
            if merged is None:
                pairs = iter(deps)
                merged = dict(zip(pairs, pairs))
            get = merged.get
            # replica-wise max over the replicas this replica knows on the key (not every replica of the cluster);
            # the instance itself is no dependency of its own: its replica keeps what it had when it is the highest
            skip = own if known.get(own) == number else -1
            for q, j in known.items():
                held = get(q)
                if held is None:
                    if q != skip:
                        merged[q] = j
                        added = True
                elif j > held and q != skip:
                    merged[q] = j
                    grew = True
            seq = max(seq, 1 + self.key_seq.get(key, 0))
        if added:
            return seq, from_dict(merged)
        if grew:  # the same replicas, in the same (increasing) order: no sort
            flat = list(deps)
            flat[1::2] = merged.values()
            return seq, tuple(flat)
        return seq, deps

    def _register(self, iid: Iid, command: Value, seq: int) -> None:
        q, number = iid
        conf, key_seq, touching = self.conf, self.key_seq, self._key_instances
        for key in _keys(command):
            known = conf.get(key)
            if known is None:
                known = conf[key] = {}
            if number > known.get(q, 0):
                known[q] = number
            if seq > key_seq.get(key, 0):
                key_seq[key] = seq
            ids = touching.get(key)  # not setdefault(key, set()): no set made and dropped per call
            if ids is None:
                ids = touching[key] = set()
            ids.add(iid)
