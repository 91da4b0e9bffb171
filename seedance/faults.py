"""The fault table: every fault kind once — its name, parameters and their draws, what it does, who can apply it.

Both runtimes read this table (Jepsen's nemeses, Kingsbury 2013–; TigerBeetle VOPR's safety-then-liveness phases):
the simulator's nemesis (:mod:`seedance.sim.nemesis`) and the real backend's (:mod:`seedance.real.nemesis`) take
their names, their validation and their seeded schedule from here, and each keeps only *how* it applies and heals
a fault (a registry keyed by the names below; ``tests/test_faults.py`` checks that every runtime a fault names has
an applier for it).

Rules:

* The schedule is drawn up front from one generator (the simulator spawns it as the fourth child of the run's root
  ``SeedSequence(seed)``; the real backend uses the same child, so ``sim run`` and ``real run`` with the same seed,
  nodes, duration and faults draw the same windows): for each enabled fault, in the order given, windows
  ``[start, end)`` of uniform length in ``window_s`` separated by exponential gaps of mean ``gap_s``, clipped to the
  faulty phase. Different faults may overlap; windows of one fault never do. Each window's parameters are drawn
  right after its length, in the order its :class:`Param` entries are listed (so adding a fault, or a parameter at
  the end of a new fault, never changes the draws of the existing ones).
* ``partition`` is an alias: each window picks one of its variants at random, then draws that variant's shape.
* A fault's ``runtimes`` says which runtimes can apply it: ``sim`` (the simulator), ``real`` (OS processes).
  Leader-targeted faults need to observe node state after every input, which only the simulator does.
* Adding a fault: one :class:`Fault` entry in :data:`TABLE` (its parameters from the :class:`Param` kinds below,
  or a new kind in :meth:`Param.sample`), plus an applier in each runtime it names.

No simpy, sockets or clocks here: plain data and numpy draws only.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from seedance.errors import SpecError

SIM, REAL = "sim", "real"
PARTITION_VARIANTS = ("partition-one", "partition-halves", "partition-ring", "partition-oneway")
VOTE_DOWN_S = (1e-4, 1e-3)  # vote-crash: a fast restart, back before a candidate's next retry
LEADER_STEPS = (0, 8)  # a strike lands after the new leader has handled this many more inputs (uniform, inclusive)


@dataclass(frozen=True)
class Param:
    """One parameter of a fault and how it is drawn per window.

    ``kind``: ``uniform`` (float in [lo, hi]), ``nodes`` (a random non-empty subset of the nodes, sorted),
    ``node`` (one node), ``constant`` (``lo``), ``window`` (the schedule's window-length range), ``seed`` (a 63-bit
    integer seeding a per-window generator), ``log-uniform-per-node`` (a random non-empty subset of nodes, each
    with a rate log-uniform in [lo, hi]), ``partition`` (the cut of a partition variant: ``pairs`` of directed
    node pairs plus the variant's shape).
    """

    name: str
    kind: str
    lo: Any = None
    hi: Any = None
    unit: str = ""

    def describe(self) -> str:
        unit = f" {self.unit}" if self.unit else ""
        if self.kind == "uniform":
            return f"{self.name} ~ U[{_num(self.lo)}, {_num(self.hi)}]{unit}"
        if self.kind == "log-uniform-per-node":
            return f"{self.name}: 1..n nodes, each ~ logU[{_num(self.lo)}, {_num(self.hi)}]{unit}"
        if self.kind == "nodes":
            return f"{self.name}: 1..n random nodes"
        if self.kind == "node":
            return f"{self.name}: one random node"
        if self.kind == "constant":
            return f"{self.name} = {self.lo}{unit}"
        if self.kind == "window":
            return f"{self.name}: the window-length range"
        if self.kind == "seed":
            return f"{self.name}: per-window generator seed"
        if self.kind == "partition":
            return f"{self.name}: the cut (directed node pairs)"
        return f"{self.name} ({self.kind})"

    def sample(self, fault: str, n: int, rng: np.random.Generator, window_s: tuple[float, float]) -> dict[str, Any]:
        kind = self.kind
        if kind == "uniform":
            return {self.name: float(rng.uniform(self.lo, self.hi))}
        if kind == "nodes":
            return {self.name: random_nodes(n, rng)}
        if kind == "node":
            return {self.name: int(rng.integers(n))}
        if kind == "constant":
            return {self.name: self.lo}
        if kind == "window":
            return {self.name: window_s}
        if kind == "seed":
            return {self.name: int(rng.integers(2**63))}
        if kind == "log-uniform-per-node":
            nodes = random_nodes(n, rng)
            lo, hi = math.log(self.lo), math.log(self.hi)
            return {self.name: {node: float(math.exp(rng.uniform(lo, hi))) for node in nodes}}
        if kind == "partition":
            pairs, shape = partition_pairs(fault, n, rng)
            return {**shape, self.name: pairs}
        raise ValueError(f"unknown parameter kind {kind!r}")


def _num(x: float) -> str:
    return f"{x:g}"


@dataclass(frozen=True)
class Fault:
    """One row of the table."""

    name: str
    description: str
    params: tuple[Param, ...] = ()
    runtimes: tuple[str, ...] = (SIM, REAL)
    variants: tuple[str, ...] = ()  # an alias: each window picks one of these
    targeted: bool = False  # strikes at protocol moments (a new leader, a granted vote), not at clock times

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "description": self.description, "runtimes": list(self.runtimes),
                "params": [p.describe() for p in self.params], "variants": list(self.variants),
                "targeted": self.targeted}


_P_MSG = Param("p", "uniform", 0.05, 0.3)
_STRIKE_P = Param("p", "uniform", 0.5, 1.0)
_CUT = (Param("pairs", "partition"),)

TABLE: tuple[Fault, ...] = (
    Fault("partition", "one of the four partition variants below, picked at random per window",
          variants=PARTITION_VARIANTS),
    Fault("partition-one", "one node isolated from every other, both ways", _CUT),
    Fault("partition-halves", "a random minority of floor(n/2) nodes cut off from the majority, both ways", _CUT),
    Fault("partition-ring", "majorities ring: each node reaches only its ceil((m-1)/2) nearest on a random ring "
          "(m = majority), so every node sees a majority but no two the same one", _CUT),
    Fault("partition-oneway", "a random group cannot send to the rest; it still hears them", _CUT),
    Fault("crash", "random nodes crash (real: SIGKILL) at the start and restart from durable state at the end",
          (Param("nodes", "nodes"),)),
    Fault("pause", "random nodes stop handling inputs (real: SIGSTOP of the process group) and resume (SIGCONT)",
          (Param("nodes", "nodes"),)),
    Fault("loss", "each node-to-node message is dropped with probability p", (_P_MSG,)),
    Fault("duplicate", "each node-to-node message is delivered twice with probability p", (_P_MSG,)),
    Fault("reorder", "each message gets an extra delay uniform in [0, max_s], so messages overtake each other",
          (Param("max_s", "uniform", 1e-3, 20e-3, "s"),)),
    Fault("delay", "with probability p a message is delayed by a spike of spike_s",
          (_P_MSG, Param("spike_s", "uniform", 10e-3, 100e-3, "s"))),
    Fault("skew", "some nodes' timers run at a rate in [0.25, 4] (log-uniform)",
          (Param("rates", "log-uniform-per-node", 0.25, 4.0),), runtimes=(SIM,)),
    Fault("cpu-hog", "a competing process holds one node's CPU in bursts of burst_s with gaps of gap_s, so its "
          "inputs (heartbeats included) are handled late",
          (Param("node", "node"), Param("burst_s", "uniform", 5e-3, 50e-3, "s"),
           Param("gap_s", "uniform", 1e-3, 5e-3, "s")), runtimes=(SIM,)),
    Fault("leader-isolate", "the current and each new leader is cut off from every peer, both ways, with "
          "probability p, after 0-8 of its own inputs, for a window-length hold",
          (_STRIKE_P, Param("after_inputs", "constant", LEADER_STEPS), Param("hold_s", "window"),
           Param("seed", "seed")), runtimes=(SIM,), targeted=True),
    Fault("leader-oneway", "the current and each new leader's messages to its peers are dropped (it still hears "
          "them), with probability p, after 0-8 of its own inputs",
          (_STRIKE_P, Param("after_inputs", "constant", LEADER_STEPS), Param("hold_s", "window"),
           Param("seed", "seed")), runtimes=(SIM,), targeted=True),
    Fault("leader-crash", "the current and each new leader crashes, with probability p, after 0-8 of its own "
          "inputs, and restarts from durable state a window-length later",
          (_STRIKE_P, Param("after_inputs", "constant", LEADER_STEPS), Param("hold_s", "window"),
           Param("seed", "seed")), runtimes=(SIM,), targeted=True),
    Fault("vote-crash", "a node that has just granted its vote crashes right after that input (its persist is "
          "lost) and restarts 0.1-1 ms later",
          (_STRIKE_P, Param("after_inputs", "constant", (0, 0)), Param("hold_s", "constant", VOTE_DOWN_S, "s"),
           Param("seed", "seed")), runtimes=(SIM,), targeted=True),
    Fault("slow-disk", "random nodes' fsyncs each take delay_s longer (real: the node sleeps before each "
          "group-commit fsync)", (Param("nodes", "nodes"), Param("delay_s", "uniform", 5e-3, 50e-3, "s"))),
)

BY_NAME: dict[str, Fault] = {fault.name: fault for fault in TABLE}
NAMES: tuple[str, ...] = tuple(BY_NAME)
TARGETED: tuple[str, ...] = tuple(f.name for f in TABLE if f.targeted)
LEADER_FAULTS: tuple[str, ...] = tuple(name for name in TARGETED if name.startswith("leader-"))


def names(runtime: str | None = None) -> tuple[str, ...]:
    """Fault names in table order (those a runtime can apply, if given)."""
    return tuple(f.name for f in TABLE if runtime is None or runtime in f.runtimes)


def parse(text: str | Iterable[str], runtime: str | None = None, field_name: str = "--nemesis") -> tuple[str, ...]:
    """``--nemesis a,b,c`` (or a sequence of names) -> the fault names, in order.

    ``""`` or ``"none"`` is no fault. An empty item (``crash,,pause``), a repeated name or a name the runtime
    cannot apply is a :class:`SpecError` naming the valid ones.
    """
    items = [s.strip() for s in text.split(",")] if isinstance(text, str) else [str(s).strip() for s in text]
    if isinstance(text, str) and text.strip() in ("", "none"):
        return ()
    valid = names(runtime)
    listing = f"valid: {', '.join(valid)}"
    if any(not item for item in items):
        raise SpecError(field_name, f"empty fault name in {text!r}", listing)
    unknown = [item for item in items if item not in valid]
    if unknown:
        where = f" for the {runtime} runtime" if runtime and all(u in BY_NAME for u in unknown) else ""
        raise SpecError(field_name, f"unknown fault(s) {', '.join(map(repr, unknown))}{where}", listing)
    repeated = sorted({item for item in items if items.count(item) > 1})
    if repeated:
        raise SpecError(field_name, f"fault(s) given twice: {', '.join(repeated)}", "each fault at most once")
    return tuple(items)


# ------------------------------------------------------------------------------------------------- the draws
def random_nodes(n: int, rng: np.random.Generator) -> list[int]:
    """A random non-empty subset of ``range(n)``, sorted."""
    count = int(rng.integers(1, n + 1))
    return sorted(int(x) for x in rng.permutation(n)[:count])


def partition_pairs(variant: str, n: int, rng: np.random.Generator) -> tuple[list[tuple[int, int]], dict[str, Any]]:
    """The directed pairs ``(a, b)`` (a cannot send to b) of one partition variant, and its shape."""
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


def draw_params(name: str, n: int, rng: np.random.Generator, window_s: tuple[float, float] = (0.0, 0.0)
                ) -> tuple[str, dict[str, Any]]:
    """The concrete fault (an alias resolved to one variant) and its parameters for one window."""
    fault = BY_NAME[name]
    if fault.variants:
        fault = BY_NAME[fault.variants[int(rng.integers(len(fault.variants)))]]
    params: dict[str, Any] = {}
    for param in fault.params:
        params.update(param.sample(fault.name, n, rng, window_s))
    return fault.name, params


@dataclass(frozen=True, kw_only=True)
class FaultWindow:
    fault_id: int
    name: str  # the concrete fault (a partition variant, never plain "partition")
    start_s: float
    end_s: float
    params: dict[str, Any] = field(default_factory=dict)


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
            name, params = draw_params(fault, num_nodes, rng, (lo, hi))
            windows.append(FaultWindow(fault_id=len(windows), name=name, start_s=t, end_s=end, params=params))
            t = end + float(rng.exponential(mean_gap))
    windows.sort(key=lambda w: (w.start_s, w.fault_id))
    return windows


def table_text(runtime: str | None = None) -> str:
    """The table as text, one fault per block (what ``seedance sim faults`` prints)."""
    lines = []
    for fault in TABLE:
        if runtime is not None and runtime not in fault.runtimes:
            continue
        lines.append(f"{fault.name:<18} [{','.join(fault.runtimes)}] {fault.description}")
        if fault.variants:
            lines.append(f"{'':<18}   variants: {', '.join(fault.variants)}")
        for param in fault.params:
            lines.append(f"{'':<18}   {param.describe()}")
    return "\n".join(lines)
