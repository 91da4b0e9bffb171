"""Delta-intervals and causal delta-merging (Almeida, Shoker & Baquero, "Delta state replicated data types", JPDC
111, 2018, §6, Algorithm 2) over the grid's deltas (:mod:`seedance.models.crdt`): the sender's side numbers its
delta-groups and tracks what each peer acknowledged (:class:`DeltaBuffer`); the receiver's side joins an interval only
when it extends the prefix it holds of that sender's incarnation (:class:`IntervalReceiver`)."""

from __future__ import annotations

from typing import Any

from seedance.models.crdt import GridDelta, join_many

_IDS: dict[int, list[int]] = {}  # n -> [0 .. n-1], one list per n
_ALL_TO: dict[tuple[int, Any], dict[int, Any]] = {}  # (n, value) -> dict.fromkeys(range(n), value)
_ALL: dict[int, set[int]] = {}  # n -> set(range(n))


def peers_of(me: int, n: int) -> list[int]:
    """The ids ``0 .. n-1`` but ``me``, in order: slices of one list per ``n`` (its ints are shared, not made anew
    for every replica: at 1,024 replicas building each peer list from ranges was most of its cost)."""
    ids = _IDS.get(n)
    if ids is None:
        ids = _IDS[n] = list(range(n))
    return ids[:me] + ids[me + 1:]


def _all_but(me: int, n: int, value: Any) -> dict[int, Any]:
    """``dict.fromkeys(peers_of(me, n), value)``, as a copy of one dict of all ``n`` ids (made once per ``n`` and
    value) less ``me``: copying a dict clones its table, about fifty times cheaper than inserting every key."""
    full = _ALL_TO.get((n, value))
    if full is None:
        full = _ALL_TO[n, value] = dict.fromkeys(range(n), value)
    out = full.copy()
    del out[me]
    return out


class DeltaBuffer:
    """A replica's delta-groups, numbered by its counter, and what each peer acknowledged (Algorithm 2's D_i, c_i,
    A_i). ``interval(peer)`` is the delta-interval ``Δ[A(peer), c)`` — or None when the peer's start is unknown (no
    acknowledgement yet in this incarnation) or was collected: then the peer needs the full state.

    Groups that every peer with a known start acknowledged are collected; at most ``max_groups`` are kept (older
    ones are collected anyway, and peers that lag behind them get the full state)."""

    def __init__(self, peers: list[int], max_groups: int = 4096, *, me: int | None = None) -> None:
        """``me``: the peers are ``peers_of(me, len(peers) + 1)`` (a replica's: every other id) and only they
        acknowledge, so the per-peer maps are copies of shared ones (:func:`_all_but`), not built key by key."""
        self.counter = 0  # c_i: the number the next group gets
        self.base = 0  # the first group still held
        self.groups: dict[int, GridDelta] = {}
        self._me = me
        # A_i(j): j holds our groups [.., acked)
        self.acked: dict[int, int | None] = dict.fromkeys(peers) if me is None else _all_but(me, len(peers) + 1, None)
        self.max_groups = max_groups
        # the smallest known acknowledgement, kept incrementally so that an ack costs O(1), not a scan of every
        # peer: how many peers acknowledged each value (peers with a known start only; a handful of values, as
        # peers ack the same groups), and a bound at or below all of them, which is their minimum when it is one
        self._holding: dict[int, int] = {}
        self._low = 0
        self._peers = list(peers)
        self.lagging: set[int] = self._every_peer()  # the peers for which pending() is true

    def add(self, delta: GridDelta) -> int:
        """Record a group (a local write or a received interval that changed the state); its number."""
        n = self.counter
        self.groups[n] = delta
        self.counter += 1
        self.lagging.update(self._peers)
        self._collect()
        return n

    def add_held(self, delta: GridDelta) -> None:
        """``add(delta)`` then ``assume_held(counter)``: a group every peer holds already (a fresh replica's group
        0, the empty state), without add's pass over the peers that assume_held undoes."""
        self.groups[self.counter] = delta
        self.counter += 1
        self.assume_held(self.counter)

    def _every_peer(self) -> set[int]:
        """``set(self._peers)`` (for a replica's peers: a copy of a shared set of all ids, less ``me``)."""
        me = self._me
        if me is None:
            return set(self._peers)
        n = len(self._peers) + 1
        full = _ALL.get(n)
        if full is None:
            full = _ALL[n] = set(range(n))
        out = full.copy()
        out.discard(me)
        return out

    def interval(self, peer: int) -> tuple[int, GridDelta] | None:
        """(start, Δ[start, counter)) for ``peer``; None when it needs the full state."""
        start = self.acked[peer]
        if start is None or start < self.base:
            return None
        return start, self.span(start)

    def span(self, start: int) -> GridDelta:
        """Δ[start, counter): the join of the groups from ``start`` (which must still be held)."""
        if start < self.base:
            raise ValueError(f"group {start} was collected (first held: {self.base})")
        return join_many([self.groups[n] for n in range(start, self.counter)])

    def ack(self, peer: int, upto: int) -> None:
        """``peer`` holds our groups before ``upto`` (it may have restarted and hold fewer than it said before)."""
        if 0 <= upto <= self.counter:
            before = self.acked.get(peer)
            self.acked[peer] = upto
            holding = self._holding
            if before is not None:
                if holding[before] == 1:
                    del holding[before]
                else:
                    holding[before] -= 1
            holding[upto] = holding.get(upto, 0) + 1
            if upto < self._low:
                self._low = upto
            if upto < self.counter:
                self.lagging.add(peer)
            else:
                self.lagging.discard(peer)
            # only a first known start, or the smallest one losing its last peer, can raise the smallest known
            # acknowledgement (the counter is as it was): otherwise _collect would find nothing to collect
            if before is None or (before == self._low and before not in holding):
                self._collect()

    def assume_held(self, upto: int) -> None:
        """Every peer holds our groups before ``upto`` without having said so (a fresh replica's group 0 is the
        empty state, which every replica holds): nothing is sent for them."""
        if not 0 <= upto <= self.counter:
            raise ValueError(f"upto {upto} outside [0, {self.counter}]")
        if self._me is None:
            self.acked = dict.fromkeys(self.acked, upto)  # (from a dict: its keys' hashes are reused)
        else:
            self.acked = _all_but(self._me, len(self._peers) + 1, upto)
        self._holding = {upto: len(self._peers)} if self._peers else {}
        self._low = upto
        if upto >= self.counter:
            self.lagging = set()
        else:
            self.lagging = set(self.acked) if self._me is None else self._every_peer()
        self._collect()

    def _known_low(self) -> int | None:
        """min(acked of the peers with a known start), or None when no peer acknowledged yet."""
        holding = self._holding
        if not holding:
            return None
        low = self._low
        if low not in holding:  # the smallest value's last peer moved on: a value of the few peers hold now
            low = self._low = min(holding)
        return low

    def _collect(self) -> None:
        known = self._known_low()
        low = known if known is not None else self.base  # no peer acknowledged yet: keep (up to max_groups)
        low = max(low, self.counter - self.max_groups)
        while self.base < low:
            self.groups.pop(self.base, None)
            self.base += 1

    def pending(self, peer: int) -> bool:
        """The peer may lack some of our groups (or its start is unknown)."""
        acked = self.acked[peer]
        return acked is None or acked < self.counter


class IntervalReceiver:
    """The causal delta-merging rule on the receiving side: from each sender incarnation (``epoch``) the prefix of
    its groups already joined. An interval ``Δ[a, b)`` is joinable only when ``a <= held`` of that very incarnation;
    a full state (``start is None``) is causally closed and always joinable, and it starts (or advances) the
    prefix of its incarnation. Older incarnations never replace a newer one."""

    def __init__(self, first: tuple[int, int] = (-1, 0)) -> None:
        self.held: dict[int, tuple[int, int]] = {}  # sender -> (sender incarnation, groups held)
        # what is held of a sender never heard from: nothing by default; (0, 1) when every sender's first
        # incarnation starts from the empty state (its group 0), which every receiver holds
        self._first = first

    def acceptable(self, sender: int, epoch: int, start: int | None) -> bool:
        """A full state, an interval from 0 (a sender's group 0 is its whole state at boot) of a current or newer
        incarnation, or an interval that extends the prefix held of this incarnation."""
        incarnation, held = self.held.get(sender, self._first)
        if start is None or start == 0:
            return epoch >= incarnation
        return incarnation == epoch and start <= held

    def held_for(self, sender: int, epoch: int) -> int:
        incarnation, held = self.held.get(sender, self._first)
        return held if incarnation == epoch else 0

    def extends(self, sender: int, epoch: int, start: int) -> bool:
        """``acceptable`` of an interval from ``start`` > 0: it extends the prefix held of incarnation ``epoch``."""
        incarnation, held = self.held.get(sender, self._first)
        return incarnation == epoch and start <= held

    def joined(self, sender: int, epoch: int, start: int | None, end: int) -> int:
        """Record that the sender's groups before ``end`` are held; the acknowledgement to send back."""
        incarnation, held = self.held.get(sender, self._first)
        if epoch > incarnation and (start is None or start == 0):
            held = end
        elif epoch == incarnation:
            held = end if end > held else held
        else:  # an older incarnation, or a newer one's interval that does not start it: nothing held of it
            return 0
        self.held[sender] = (epoch, held)
        return held  # (held_for(sender, epoch) now)
