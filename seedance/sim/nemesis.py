"""The nemesis: a fault schedule drawn from the seed, applied in the faulty phase, removed before the healed phase.

Rules (Jepsen's nemeses, Kingsbury 2013–; TigerBeetle VOPR's safety-then-liveness phases):

* The whole schedule is drawn up front from the nemesis generator (one child of the run's root SeedSequence): for
  each enabled fault, in the order given, windows ``[start, end)`` of uniform length separated by exponential gaps,
  clipped to the faulty phase. Different faults may overlap; windows of one fault never do.
* At the end of the faulty phase every fault has ended (crashed nodes restarted, paused nodes resumed, partitions
  healed, clocks and network restored); a ``heal`` record marks the start of the healed phase.
* Faults and their parameters (each drawn per window):

  - ``partition``: one of the four variants below, at random.
  - ``partition-one``: one node isolated both ways.  ``partition-halves``: a random minority of ⌊n/2⌋ nodes cut off
    from the majority.  ``partition-ring``: majorities ring — on a random ring, each node reaches only the
    ⌈(m−1)/2⌉ nearest nodes on each side (m = majority), so every node sees a majority but no two see the same one.
    ``partition-oneway``: a random group A cannot send to the rest (the rest can still send to A).
  - ``crash``: 1..n random nodes crash at the start and restart from durable state at the end.
  - ``pause``: 1..n random nodes stop handling inputs (SIGSTOP) and resume at the end.
  - ``loss`` / ``duplicate``: each node-to-node message is dropped / delivered twice with probability 5–30 %.
  - ``reorder``: each message gets an extra uniform delay in [0, 1–20 ms], so messages overtake each other.
  - ``delay``: with probability 5–30 % a message is delayed by a spike of 10–100 ms.
  - ``skew``: 1..n random nodes' timers run at a rate in [0.25, 4] (log-uniform).
  - ``cpu-hog``: a competing process holds one node's CPU in bursts of 5–50 ms with 1–5 ms gaps, so its inputs
    (heartbeats included) are handled late.

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

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from seedance.sim import triggers
from seedance.sim.kernel import call_at

PARTITION_VARIANTS = ("partition-one", "partition-halves", "partition-ring", "partition-oneway")
LEADER_FAULTS = ("leader-isolate", "leader-oneway", "leader-crash")
TARGETED_FAULTS = (*LEADER_FAULTS, "vote-crash")
FAULTS = ("partition", *PARTITION_VARIANTS, "crash", "pause", "loss", "duplicate", "reorder", "delay", "skew",
          "cpu-hog", *TARGETED_FAULTS)
VOTE_DOWN_S = (1e-4, 1e-3)  # a fast restart: back before a candidate's next retry
LEADER_STEPS = (0, 8)  # a strike lands after the new leader has handled this many more inputs (uniform, inclusive)


@dataclass(frozen=True, kw_only=True)
class FaultWindow:
    fault_id: int
    name: str  # the concrete fault (a partition variant, never plain "partition")
    start_s: float
    end_s: float
    params: dict[str, Any]


def _partition_pairs(variant: str, n: int, rng: np.random.Generator) -> tuple[list[tuple[int, int]], dict[str, Any]]:
    perm = [int(x) for x in rng.permutation(n)]
    if variant == "partition-one":
        node = perm[0]
        pairs = [(node, j) for j in range(n) if j != node] + [(j, node) for j in range(n) if j != node]
        return pairs, {"isolated": node}
    if variant == "partition-halves":
        minority = sorted(perm[: n // 2])
        majority = sorted(perm[n // 2:])
        pairs = [(a, b) for a in minority for b in majority] + [(b, a) for a in minority for b in majority]
        return pairs, {"minority": minority, "majority": majority}
    if variant == "partition-ring":
        majority = n // 2 + 1
        reach = math.ceil((majority - 1) / 2)
        position = {node: k for k, node in enumerate(perm)}
        pairs = []
        for a in range(n):
            for b in range(n):
                distance = abs(position[a] - position[b])
                if a != b and min(distance, n - distance) > reach:
                    pairs.append((a, b))
        return pairs, {"ring": perm, "reach": reach}
    size = int(rng.integers(1, n)) if n > 1 else 0
    senders = sorted(perm[:size])
    receivers = sorted(perm[size:])
    return [(a, b) for a in senders for b in receivers], {"cannot_send": senders, "to": receivers}


def _nodes(n: int, rng: np.random.Generator) -> list[int]:
    count = int(rng.integers(1, n + 1))
    return sorted(int(x) for x in rng.permutation(n)[:count])


def _params(name: str, n: int, rng: np.random.Generator, window_s: tuple[float, float] = (0.0, 0.0)
            ) -> tuple[str, dict[str, Any]]:
    if name == "partition":
        name = PARTITION_VARIANTS[int(rng.integers(len(PARTITION_VARIANTS)))]
    if name in PARTITION_VARIANTS:
        pairs, shape = _partition_pairs(name, n, rng)
        return name, {**shape, "pairs": pairs}
    if name in ("crash", "pause"):
        return name, {"nodes": _nodes(n, rng)}
    if name in ("loss", "duplicate"):
        return name, {"p": float(rng.uniform(0.05, 0.3))}
    if name == "reorder":
        return name, {"max_s": float(rng.uniform(1e-3, 20e-3))}
    if name == "delay":
        return name, {"p": float(rng.uniform(0.05, 0.3)), "spike_s": float(rng.uniform(10e-3, 100e-3))}
    if name in LEADER_FAULTS:
        return name, {"p": float(rng.uniform(0.5, 1.0)), "after_inputs": LEADER_STEPS, "hold_s": window_s,
                      "seed": int(rng.integers(2**63))}
    if name == "vote-crash":
        return name, {"p": float(rng.uniform(0.5, 1.0)), "after_inputs": (0, 0), "hold_s": VOTE_DOWN_S,
                      "seed": int(rng.integers(2**63))}
    if name == "skew":
        nodes = _nodes(n, rng)
        return name, {"rates": {node: float(math.exp(rng.uniform(math.log(0.25), math.log(4.0)))) for node in nodes}}
    return name, {"node": int(rng.integers(n)), "burst_s": float(rng.uniform(5e-3, 50e-3)),
                  "gap_s": float(rng.uniform(1e-3, 5e-3))}


def draw_schedule(faults: tuple[str, ...], *, num_nodes: int, faulty_end_s: float, rng: np.random.Generator,
                  window_s: tuple[float, float] | None = None, gap_s: float | None = None) -> list[FaultWindow]:
    """The fault windows of a run, sorted by start time (ties: in drawing order)."""
    length = faulty_end_s
    lo, hi = window_s if window_s is not None else (0.05 * length, 0.25 * length)
    mean_gap = gap_s if gap_s is not None else 0.1 * length
    windows: list[FaultWindow] = []
    for fault in faults:
        t = float(rng.exponential(mean_gap))
        while t < faulty_end_s:
            end = min(t + float(rng.uniform(lo, hi)), faulty_end_s)
            name, params = _params(fault, num_nodes, rng, (lo, hi))
            windows.append(FaultWindow(fault_id=len(windows), name=name, start_s=t, end_s=end, params=params))
            t = end + float(rng.exponential(mean_gap))
    windows.sort(key=lambda w: (w.start_s, w.fault_id))
    return windows


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
        name, params, runtime, network = window.name, window.params, self.runtime, self.network
        if name in PARTITION_VARIANTS:
            network.block(params["pairs"], +1)
        elif name == "crash":
            for node in params["nodes"]:
                runtime.crash(node)
        elif name == "pause":
            for node in params["nodes"]:
                runtime.pause(node)
        elif name == "loss":
            network.set_fault("loss_p", params["p"])
        elif name == "duplicate":
            network.set_fault("duplicate_p", params["p"])
        elif name == "reorder":
            network.set_fault("reorder_s", params["max_s"])
        elif name == "delay":
            network.set_fault("spike_s", params["spike_s"])
            network.set_fault("spike_p", params["p"])
        elif name == "skew":
            for node, rate in params["rates"].items():
                runtime.set_timer_rate(node, rate)
        elif name == "cpu-hog":
            self._burst(window)
        elif name == "vote-crash":
            self._vote_windows[window.fault_id] = (window, np.random.default_rng(params["seed"]))
        elif name in LEADER_FAULTS:
            rng = np.random.default_rng(params["seed"])
            self._leader_windows[window.fault_id] = (window, rng)
            for host in runtime.hosts:  # the leader in place when the window opens is struck too
                term = triggers.leader_term(host.node) if host.up else None
                if term is not None:
                    self._strike(window, rng, host.node_id, term)

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

    def _count_steps(self) -> None:
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
        name, params, runtime, network = window.name, window.params, self.runtime, self.network
        if name in PARTITION_VARIANTS:
            network.block(params["pairs"], -1)
        elif name == "crash":
            for node in params["nodes"]:
                runtime.restart(node)
        elif name == "pause":
            for node in params["nodes"]:
                runtime.resume(node)
        elif name == "loss":
            network.set_fault("loss_p", 0.0)
        elif name == "duplicate":
            network.set_fault("duplicate_p", 0.0)
        elif name == "reorder":
            network.set_fault("reorder_s", 0.0)
        elif name == "delay":
            network.set_fault("spike_p", 0.0)
            network.set_fault("spike_s", 0.0)
        elif name == "skew":
            for node in params["rates"]:
                runtime.set_timer_rate(node, 1.0)
        elif name in LEADER_FAULTS:
            self._leader_windows.pop(window.fault_id, None)  # strikes already made run their course
        elif name == "vote-crash":
            self._vote_windows.pop(window.fault_id, None)

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
        for row in network.blocked:
            row[:] = [0] * len(row)
        for name in ("loss_p", "duplicate_p", "reorder_s", "spike_p", "spike_s"):
            setattr(network, name, 0.0)
        network.block([], 0)
        self._record("heal", -1)
