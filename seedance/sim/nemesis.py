"""The nemesis: a fault schedule drawn from the seed, applied in the faulty phase, removed before the healed phase.

Rules (Jepsen's nemeses, Kingsbury 2013–; TigerBeetle VOPR's safety-then-liveness phases):

* The whole schedule is drawn up front from the nemesis generator (one child of the run's root SeedSequence): for
  each enabled fault, in the order given, windows ``[start, end)`` of uniform length separated by exponential gaps,
  clipped to the faulty phase. Different faults may overlap; windows of one fault never do.
* At the end of the faulty phase every fault has ended (crashed nodes restarted, paused nodes resumed, partitions
  healed, clocks and network restored); a ``heal`` record marks the start of the healed phase.
* Faults, their parameters and their draws live in one table, :mod:`seedance.faults` (``seedance sim faults``
  prints it); this module keeps only how the simulator applies and removes each one (:data:`APPLIERS`, one
  ``(start, end)`` pair per fault name). In brief: partitions block directed node pairs in the network; ``crash``
  and ``pause`` act on hosts; ``loss`` / ``duplicate`` / ``reorder`` / ``delay`` set the network's per-message
  fault knobs; ``skew`` sets timer rates; ``cpu-hog`` books bursts on one node's CPU; ``slow-disk`` adds
  ``delay_s`` to the chosen nodes' modelled fsync time.

* Leader-targeted faults (:mod:`seedance.sim.triggers`; for protocols whose nodes expose ``role == "leader"``):
  while such a window is open, the leader in place when it opens and each node that *becomes* leader is struck with
  probability ``p`` (50–100 %, drawn per window). A strike lands once that leader has handled ``n`` more inputs of
  its own, ``n`` uniform in 0..8 — a delay counted in the leader's steps, so it falls on the same protocol moments
  at any time scale: before its first message leaves (its fresh entries stay on itself), or mid-way through its
  first replication rounds (a follower half back-filled). It lasts ``hold_s``, drawn per strike like a window length
  (clipped to the faulty phase); a strike lands even if its leader stepped down meanwhile, and is dropped if it
  crashed first. Per-strike draws come from a generator seeded in the window's parameters, so the schedule stays a
  function of the seed; a ``fault-strike`` trace record names the node, its term and the strike's interval.

  - ``leader-isolate``: the new leader is cut off from every peer, both ways.
  - ``leader-oneway``: the new leader's messages to its peers are dropped; it still hears them (so it may still
    count acknowledgements of what it sent before). Raft §5.4.2's Figure 8 takes a few strikes of both kinds in a
    row (``tests/test_raft_campaign.py``).
  - ``leader-crash``: the new leader crashes and restarts from its durable state ``hold_s`` later.
  - ``vote-crash``: a node that has just granted its vote to another node (duck-typed ``voted_for``, Raft §5.2)
    crashes right after that input — its effects up to its first persist are out, the persist is lost — and
    restarts 0.1–1 ms later, in time to be asked again in the same term (no ``n``: it lands at once).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from seedance import faults as table
from seedance.faults import (  # noqa: F401 — re-exported: the simulator's names for the shared table
    LEADER_STEPS, PARTITION_VARIANTS, VOTE_DOWN_S, FaultWindow, draw_schedule,
)
from seedance.sim import triggers
from seedance.sim.kernel import call_at

FAULTS = table.names(table.SIM)  # every fault the simulator applies, in table order
LEADER_FAULTS = table.LEADER_FAULTS
TARGETED_FAULTS = table.TARGETED
_partition_pairs = table.partition_pairs
_nodes = table.random_nodes
_params = table.draw_params


class Nemesis:
    """Applies a schedule to a runtime and its network."""

    def __init__(self, *, runtime: Any, schedule: list[FaultWindow], faulty_end_s: float) -> None:
        self.runtime = runtime
        self.network = runtime.network
        self.env = runtime.env
        self.schedule = schedule
        self.faulty_end_s = faulty_end_s
        self.applied = 0
        self.healed = False
        self.strikes = 0  # targeted strikes landed (leader-* and vote-crash)
        self._leader_windows: dict[int, tuple[FaultWindow, np.random.Generator]] = {}  # open windows, by fault id
        self._vote_windows: dict[int, tuple[FaultWindow, np.random.Generator]] = {}
        self._aimed: list[tuple[FaultWindow, int, int, int, int, float]] = []  # strikes waiting for their step

    def install(self) -> None:
        self._fsync_s = [host.storage.fsync_s for host in self.runtime.hosts]
        if any(w.name in LEADER_FAULTS for w in self.schedule):
            triggers.Watcher(self.runtime, [triggers.Watch(key=triggers.leader_term, fire=self._new_leader)]).install()
            self.runtime.after_input.append(self._count_steps)
        if any(w.name == "vote-crash" for w in self.schedule):
            triggers.Watcher(self.runtime, [triggers.Watch(key=triggers.vote, fire=self._new_vote)]).install()
        for window in self.schedule:
            call_at(self.env, window.start_s, self._start, window)
        for window in self.schedule:
            call_at(self.env, window.end_s, self._end, window)
        if self.schedule:
            call_at(self.env, self.faulty_end_s, self._heal, None)

    def _record(self, *record: Any) -> None:
        if self.runtime._tracing:
            self.runtime._record((self.env.now, *record))

    def _start(self, event: Any) -> None:
        window: FaultWindow = event.args
        self.applied += 1
        self._record("fault-start", -1, window.fault_id, window.name, {k: window.params[k] for k in sorted(window.params)})
        APPLIERS[window.name][0](self, window)

    # ---------------------------------------------------------------------------- appliers: (start, end) per fault
    def _cut(self, window: FaultWindow) -> None:
        self.network.block(window.params["pairs"], +1)

    def _uncut(self, window: FaultWindow) -> None:
        self.network.block(window.params["pairs"], -1)

    def _leader_open(self, window: FaultWindow) -> None:
        rng = np.random.default_rng(window.params["seed"])
        self._leader_windows[window.fault_id] = (window, rng)
        runtime = self.runtime
        for host in runtime.hosts:  # the leader in place when the window opens is struck too
            term = triggers.leader_term(host.node) if host.up else None
            if term is not None:
                self._strike(window, rng, host.node_id, term)

    def _leader_close(self, window: FaultWindow) -> None:
        self._leader_windows.pop(window.fault_id, None)  # strikes already made run their course

    def _vote_open(self, window: FaultWindow) -> None:
        self._vote_windows[window.fault_id] = (window, np.random.default_rng(window.params["seed"]))

    def _vote_close(self, window: FaultWindow) -> None:
        self._vote_windows.pop(window.fault_id, None)

    def _slow_disk(self, window: FaultWindow, sign: int) -> None:
        for node in window.params["nodes"]:
            self.runtime.hosts[node].storage.fsync_s += sign * window.params["delay_s"]

    def _new_leader(self, runtime: Any, node_id: int, before: Any, after: Any) -> None:
        """A node became leader (its term changed to a led one): strike it per each open leader window."""
        if after is None or self.healed:
            return
        for window, rng in list(self._leader_windows.values()):
            self._strike(window, rng, node_id, after)

    def _new_vote(self, runtime: Any, node_id: int, before: Any, after: Any) -> None:
        """A node granted a vote to another node: crash it now (per each open vote-crash window)."""
        if after is None or self.healed:
            return
        for window, rng in list(self._vote_windows.values()):
            if not runtime.hosts[node_id].up:
                return
            self._strike(window, rng, node_id, after[0])

    def _strike(self, window: FaultWindow, rng: np.random.Generator, node_id: int, term: int) -> None:
        """Aim a strike at ``node_id``: it lands once the leader has handled ``n`` more inputs (0: now)."""
        params = window.params
        if rng.random() >= params["p"]:
            return
        lo, hi = params["after_inputs"]
        steps = int(rng.integers(lo, hi + 1))
        hold_s = float(rng.uniform(*params["hold_s"]))
        host = self.runtime.hosts[node_id]
        if steps == 0:
            self._land(window, node_id, term, hold_s)
        else:
            self._aimed.append((window, node_id, host.incarnation, host.handled + steps, term, hold_s))

    def _count_steps(self, _host: Any = None) -> None:
        """After-input hook: land the strikes whose leader has handled its count of inputs (if still alive)."""
        if not self._aimed:
            return
        hosts, waiting = self.runtime.hosts, []
        for aimed in self._aimed:
            window, node_id, incarnation, handled, term, hold_s = aimed
            host = hosts[node_id]
            if host.incarnation != incarnation or self.healed:
                continue  # crashed (or healed) before the strike landed
            if host.handled >= handled:
                self._land(window, node_id, term, hold_s)
            else:
                waiting.append(aimed)
        self._aimed = waiting

    def _land(self, window: FaultWindow, node_id: int, term: int, hold_s: float) -> None:
        runtime = self.runtime
        at = self.env.now
        until = min(at + hold_s, self.faulty_end_s)
        if at >= until:
            return
        self.strikes += 1
        self._record("fault-strike", -1, window.fault_id, window.name,
                     {"node": node_id, "term": term, "at_s": at, "until_s": until})
        alive = lambda: not self.healed  # noqa: E731 — heal restores everything itself
        if window.name in ("leader-crash", "vote-crash"):
            triggers.crash_for(runtime, node_id, at_s=at, down_s=until - at, alive=alive)
        else:
            pairs = (triggers.isolation if window.name == "leader-isolate" else triggers.outbound)(
                node_id, runtime.num_nodes)
            triggers.cut(runtime, pairs, at_s=at, until_s=until, alive=alive)

    def _burst(self, window: FaultWindow) -> None:
        now = self.env.now
        if now >= window.end_s:
            return
        until = min(now + window.params["burst_s"], window.end_s)
        self.runtime.hog(window.params["node"], until)
        call_at(self.env, until + window.params["gap_s"], lambda _event: self._burst(window))

    def _end(self, event: Any) -> None:
        window: FaultWindow = event.args
        self._record("fault-end", -1, window.fault_id, window.name)
        APPLIERS[window.name][1](self, window)

    def _heal(self, event: Any) -> None:
        """Belt and braces: everything is back to normal when the healed phase begins."""
        runtime, network = self.runtime, self.network
        self.healed = True
        self._leader_windows.clear()
        self._vote_windows.clear()
        self._aimed.clear()
        for host in runtime.hosts:
            if not host.up:
                runtime.restart(host.node_id)
            if host.paused:
                runtime.resume(host.node_id)
            host.timer_rate = 1.0
        for host, fsync_s in zip(runtime.hosts, self._fsync_s):
            host.storage.fsync_s = fsync_s  # slow-disk windows end exactly; this only removes float residue
        for row in network.blocked:
            row[:] = [0] * len(row)
        for name in ("loss_p", "duplicate_p", "reorder_s", "spike_p", "spike_s"):
            setattr(network, name, 0.0)
        network.block([], 0)
        self._record("heal", -1)


def _on_nodes(method: str, *args: Any) -> Callable[[Nemesis, FaultWindow], None]:
    """An applier calling ``runtime.<method>(node, *args)`` for each node of the window."""
    return lambda nemesis, window: [getattr(nemesis.runtime, method)(node, *args) for node in window.params["nodes"]]


def _network(**settings: str | float) -> Callable[[Nemesis, FaultWindow], None]:
    """An applier setting network fault knobs: a string value names the window parameter, a float is literal."""
    def apply(nemesis: Nemesis, window: FaultWindow) -> None:
        for knob, value in settings.items():
            nemesis.network.set_fault(knob, window.params[value] if isinstance(value, str) else value)
    return apply


def _skew(nemesis: Nemesis, window: FaultWindow, restore: bool = False) -> None:
    for node, rate in window.params["rates"].items():
        nemesis.runtime.set_timer_rate(node, 1.0 if restore else rate)


def _nothing(nemesis: Nemesis, window: FaultWindow) -> None:
    pass


#: How the simulator applies (start) and removes (end) each fault of the table that names ``sim``; everything
#: is also reset at the heal (:meth:`Nemesis._heal`).
APPLIERS: dict[str, tuple[Callable[[Nemesis, FaultWindow], None], Callable[[Nemesis, FaultWindow], None]]] = {
    **{variant: (Nemesis._cut, Nemesis._uncut) for variant in PARTITION_VARIANTS},
    "crash": (_on_nodes("crash"), _on_nodes("restart")),
    "pause": (_on_nodes("pause"), _on_nodes("resume")),
    "loss": (_network(loss_p="p"), _network(loss_p=0.0)),
    "duplicate": (_network(duplicate_p="p"), _network(duplicate_p=0.0)),
    "reorder": (_network(reorder_s="max_s"), _network(reorder_s=0.0)),
    "delay": (_network(spike_s="spike_s", spike_p="p"), _network(spike_p=0.0, spike_s=0.0)),
    "skew": (_skew, lambda nemesis, window: _skew(nemesis, window, restore=True)),
    "cpu-hog": (Nemesis._burst, _nothing),  # bursts stop by themselves at the window's end
    "slow-disk": (lambda nemesis, window: nemesis._slow_disk(window, +1),
                  lambda nemesis, window: nemesis._slow_disk(window, -1)),
    **{name: (Nemesis._leader_open, Nemesis._leader_close) for name in LEADER_FAULTS},
    "vote-crash": (Nemesis._vote_open, Nemesis._vote_close),
}
