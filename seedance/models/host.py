"""The host model: service-time distributions measured on a real machine, and processes sharing its cores.

A :class:`HostProfile` (written by ``seedance real profile``, read by ``sim run --host-profile``) holds what the
simulator's textbook constants leave out:

* CPU time per handled input, by input kind (message, timer, client, collective, persisted, work), as a fitted
  log-normal (median and shape sigma; Hoefler & Belli, SC'15 rule 5: service times are skewed, report and model the
  distribution, not a mean), plus the per-input cost of the node's own frame I/O (receive, HMAC check, decode,
  encode, send) that the handler timing does not see;
* fsync latency (log-normal, or empirical: the measured quantiles, tail included) and write bandwidth of the run
  directory's filesystem;
* one-way loopback latency between processes (log-normal);
* the client process's CPU per operation (the real backend drives all clients from one process);
* amortisation (optional ``wake`` / ``client_wake``): an event-loop process pays a fixed CPU cost per wake-up (the
  select, the loop's iterations, task steps) and a cost per item handled in it, so when inputs queue up under load
  several share one wake-up and the CPU per input falls. With ``wake`` set, ``io_per_input`` is the per-item part
  (an fsync completion is an item too: the sends and replies that waited behind it), both fitted from the real
  loop's busy periods; without it, ``io_per_input`` is the old average per input and fsync completions are free;
  ``io_per_kind`` (optional) is the per-item part by kind (``ITEM_KINDS``: the input kinds, ``fsync_done``, and
  ``fsync_start``: the loop's CPU to hand an fsync to its storage thread), fitted with ``wake`` from the periods'
  items by kind: items of different cost in different mixes at different loads (a follower's AppendEntries, a
  leader's zero-delay timers) would otherwise move CPU between one average per-item cost and ``wake``;
* ``connect`` (optional): a client's connection set-up to a node (TCP, the authenticated handshake, its first
  frame), paid before its first request to that node; measured by the profile run's client process; ``accept``
  (optional) is the node's serial part of it: simultaneous set-ups at one node queue behind each other;
* ``sync_cpu`` (optional): the storage thread's CPU per fsync (the writes and the fsync's kernel work), taken on a
  shared core before the fsync's wait, while the thread holds the interpreter's lock (the loop waits meanwhile;
  charged with fsync off too: the thread runs the same code around the write); ``fsync_cpu`` (optional) is the part
  of it spent inside the timed write + fsync (so already inside ``fsync``'s wall time): it holds a core during the
  wait instead, and ``sync_cpu`` is then only the rest;
* ``handoff`` (optional): the latency of the round trip from the event loop to its storage thread and back (thread
  wake-up, the loop's wake-up by its self-pipe), half before the thread starts and half after it hands back;
  ``handback`` (optional) replaces the second half with the profile run's own: from the storage thread holding the
  interpreter's lock after its write to the loop running the completion (the future's result handed over, the
  self-pipe, the loop's two turns to the callback), measured for every fsync of the run (here median 56 us, p90
  143 us, against the idle probe's 15 us half); ``handover`` (optional) replaces the first half likewise: from the
  loop's submit to the storage thread running the job (its wake-up on a busy machine, the interpreter's lock),
  measured for every fsync of the run (here median 74-119 us, p90 250-400 us, against the idle probe's ~17 us);
* ``spell`` (optional): the host's slow spells (:class:`SpellProfile`): a slowly varying factor on every CPU cost
  and the loopback latency, fitted to the profile runs' latency windows (:mod:`seedance.analysis.spells`);
* ``tenants`` (optional): the machine's other tenants (other users' processes on a shared machine): the cores' worth
  of CPU they use (``busy_cores``, from ``/proc/stat`` less this process tree's own CPU) and how long one of their
  bursts keeps a core from a waking process (``slice``: the lateness of a sleeping thread's wake-ups beyond the
  quietest one). In the simulator they hold each core for drawn slices, ``busy_cores / cores`` of the time, and a
  node or client process that needs the core waits, or is preempted, until the slice ends;
* ``write`` and ``write_cpu`` (optional): a durable write's wall time and its storage thread's CPU *without* fsync
  (the page cache keeps it: the real backend's ``SEEDANCE_FSYNC=0``, the simulator's ``storage.fsync = false``),
  probed on the real storage code apart from any run, so a configuration with fsync off is held out;
* ``fsync_grow`` and ``block_bytes`` (optional): the write + fsync's wall time when an append reaches a new block of
  its file (``block_bytes``, the file system's block): the fsync then also commits the block allocation's metadata
  to the journal. Measured apart from ``fsync`` (the run's fsyncs split by whether they allocated: on one ext4 disk
  shared by three nodes 453 us against 288 us; alone on it the step is only +18 to +30 us, and flat from 4 to 16 KiB
  appends: a step per allocation, not a bandwidth), so larger values (whose appends allocate more often) cost what
  they cost for real;
* ``entries`` (optional): the frame path's CPU per log entry a message carries, sending (protocol codec, msgpack,
  HMAC) and receiving (the same back), and the profile run's mean entries per message received and sent: an input
  or a send pays ``cost × (entries − mean)`` beside its kind's cost (fitted at the mean), so a catch-up batch of
  hundreds of entries costs milliseconds on both ends as it does for real, and the fitted mix costs what it did;
* ``gc`` and ``client_gc`` (optional): the interpreter's older-generation garbage collections in a node process
  and in the client process: the chance per handled item (per operation for the client) that one runs, and its
  pause (measured with ``gc.callbacks`` in the profile run: ~4 per process in a 3 s run here, ~1 ms each, now and
  then a 100 ms one in the client process as its history grows); for the nodes, the full (generation-2)
  collections apart, counted per incarnation as the interpreter counts them (:class:`GcProfile`). A pause holds
  the process's core and stalls every operation waiting on that process, which is much of a CPU-bound run's tail;
  the young collections are frequent and short and stay inside the per-item costs (the busy periods' CPU includes
  the pauses too, ~0.3 % of it: left in);
* ``restart`` (optional): a node process's restart, from its spawn to serving (fork from the launcher's zygote,
  recovery of its durable state, listening again), which the simulator's crash fault waits before the node's
  recovery handler runs; ``restart_cpu`` (optional) is the restarted process's CPU in that time, taken on a shared
  core (a restart competes with the running nodes), and ``recover_per_entry_s`` (optional) the CPU and time it
  adds per durable log entry it recovers (a restart late in a run reads a long log);
* ``device`` (optional): a GPU host's accelerator (kind, name, memory, count, and optional CUDA-side costs: kernel
  launch, host-to-device and device-to-host bandwidth). Recorded and validated; the simulator's device compute
  times come from the compute model (:mod:`seedance.models.compute`), keyed by the device kind;
* the number of cores, and where and when it was measured (CPU model, kernel, filesystem, load average).

It is a model (pure data and draws from a given generator); the real backend measures it
(:mod:`seedance.real.profile`), the simulator uses it (:mod:`seedance.sim.runtime`).

Amortisation in the simulator: a node's loop is *idle* when its CPU is free and nothing waits in its inbox; an
input (or fsync completion) arriving then starts a busy period and pays ``wake`` on top of its own cost; inputs that
arrive while it is busy join the period and pay only their own, and so do inputs the node scheduled for the loop's
next turn (a zero-delay timer, a durability notice: the real loop's ``call_later(0)`` / ``call_soon``, run after a
select that does not block), which arrive the moment the input before ends; these run before the inputs that
arrived while that input was handled (asyncio: their bytes wait for the next select, then a reader callback wakes
their task one turn later), so a leader's zero-delay flush closes its batch as in the real run. The client process
likewise pays ``client_wake`` when a reply finds it idle. So the cost per operation falls with concurrency as
measured, and low-load latency carries the wake-up cost of every hop.

Contention: with a profile, the N node processes and the client process share ``cores`` cores (:class:`CorePool`):
an input is handled only when its node's own CPU *and* some core are free, so 3 nodes and a client process on 2
cores queue behind each other as they do here. Every draw comes from the run's host generator (a child of the root
seed), so a run stays a pure function of (config, seed, profile).
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from seedance.errors import SpecError

KINDS = ("message", "timer", "client", "collective", "persisted", "work")
# what a loop's busy period handles, by kind: the input kinds, fsync completions, fsyncs handed to the storage thread
ITEM_KINDS = (*KINDS, "fsync_done", "fsync_start")


@dataclass(frozen=True)
class LogNormal:
    """A log-normal service time: ``median_s · exp(sigma · N(0, 1))``, clipped at ``cap_s`` (a tail, not infinity)."""

    median_s: float
    sigma: float = 0.0
    cap_s: float | None = None

    def __post_init__(self) -> None:
        for name in ("median_s", "sigma"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
                raise SpecError(f"host profile {name}", f"must be a finite number >= 0, got {value!r}")
        if self.cap_s is not None and (not math.isfinite(self.cap_s) or self.cap_s <= 0):
            raise SpecError("host profile cap_s", f"must be a finite number > 0 or null, got {self.cap_s!r}")

    @property
    def mean_s(self) -> float:
        return self.median_s * math.exp(self.sigma ** 2 / 2)

    def draw(self, rng: np.random.Generator) -> float:
        if self.sigma == 0.0:
            return self.median_s
        value = self.median_s * math.exp(self.sigma * float(rng.standard_normal()))
        return min(value, self.cap_s) if self.cap_s is not None else value

    def scaled(self, factor: float) -> LogNormal:
        """The same shape, every draw ``factor`` times as long."""
        return LogNormal(self.median_s * factor, self.sigma, None if self.cap_s is None else self.cap_s * factor)

    @classmethod
    def fit(cls, samples: Any, *, cap_quantile: float = 0.999) -> LogNormal:
        """Maximum-likelihood log-normal (location 0) of positive samples; the cap is their 99.9th percentile."""
        values = np.asarray([s for s in samples if s > 0], dtype=float)
        if values.size == 0:
            return cls(0.0)
        logs = np.log(values)
        return cls(float(np.exp(logs.mean())), float(logs.std()), float(np.quantile(values, cap_quantile)))

    @classmethod
    def from_dict(cls, data: Any, where: str) -> LogNormal:
        if isinstance(data, (int, float)) and not isinstance(data, bool):
            return cls(float(data))
        if not isinstance(data, Mapping):
            raise SpecError(where, f"expected {{median_s, sigma, cap_s}} or a number, got {data!r}")
        unknown = set(data) - {"median_s", "sigma", "cap_s"}
        if unknown:
            raise SpecError(where, f"unknown field(s) {', '.join(sorted(unknown))}", "median_s, sigma, cap_s")
        if "median_s" not in data:
            raise SpecError(where, "missing median_s", "median_s (seconds), sigma (log-normal shape), cap_s")
        try:
            return cls(float(data["median_s"]), float(data.get("sigma", 0.0)),
                       None if data.get("cap_s") is None else float(data["cap_s"]))
        except (TypeError, ValueError):
            raise SpecError(where, f"not numbers: {data!r}", "median_s, sigma, cap_s as numbers") from None
        except SpecError as err:
            raise SpecError(where, err.problem, err.valid) from None


# The probabilities an empirical service time keeps its quantiles at: every 2 % in the body, then finer towards the
# tail, which is what sets a run's p99 (a slow fsync stalls every operation waiting behind it).
EMPIRICAL_PROBS = (*(i / 50 for i in range(49)), 0.98, 0.99, 0.995, 0.998, 0.999, 1.0)


@dataclass(frozen=True)
class Empirical:
    """A measured service time drawn from its own quantiles: ``p`` (0 .. 1, increasing) and the values ``s`` at them
    (non-decreasing, seconds); a draw is the inverse CDF at a uniform ``u``, linear between the stored points. The
    tail is the measured one (bounded by the largest sample) rather than a fitted shape's: a log-normal fitted to
    the fsyncs of a run put its 99.9th percentile at ~3.8x the median where the run's own was ~6x."""

    p: tuple[float, ...]
    s: tuple[float, ...]

    def __post_init__(self) -> None:
        p, s = tuple(float(x) for x in self.p), tuple(float(x) for x in self.s)
        if len(p) < 2 or len(p) != len(s):
            raise SpecError("host profile empirical", f"p and s need the same length >= 2, got {len(p)} and {len(s)}",
                            "quantiles as written by `seedance real profile`")
        if p[0] != 0.0 or p[-1] != 1.0 or any(b <= a for a, b in zip(p, p[1:])):
            raise SpecError("host profile empirical p", "must increase strictly from 0 to 1", "e.g. [0, 0.5, 1]")
        if not all(math.isfinite(x) and x >= 0 for x in s) or any(b < a for a, b in zip(s, s[1:])):
            raise SpecError("host profile empirical s", "must be finite seconds >= 0, non-decreasing",
                            "quantile values in seconds")
        object.__setattr__(self, "p", p)
        object.__setattr__(self, "s", s)

    @property
    def median_s(self) -> float:
        return float(np.interp(0.5, self.p, self.s))

    @property
    def mean_s(self) -> float:  # the piecewise-linear inverse CDF's integral
        return float(sum((b - a) * (x + y) / 2 for a, b, x, y in zip(self.p, self.p[1:], self.s, self.s[1:])))

    @property
    def sigma(self) -> float:
        """The log-normal shape with the same 16th..84th percentile span (for printing, not for drawing)."""
        lo, hi = np.interp([0.16, 0.84], self.p, self.s)
        return float(math.log(hi / lo) / 2) if lo > 0 else 0.0

    @property
    def cap_s(self) -> float:
        return self.s[-1]

    def scaled(self, factor: float) -> Empirical:
        return Empirical(self.p, tuple(x * factor for x in self.s))

    def draw(self, rng: np.random.Generator) -> float:
        u = float(rng.random())
        p, s = self.p, self.s
        hi = bisect_left(p, u, 1)
        lo = hi - 1
        return s[lo] + (s[hi] - s[lo]) * (u - p[lo]) / (p[hi] - p[lo])

    @classmethod
    def fit(cls, samples: Any) -> Empirical:
        values = np.asarray([x for x in samples if x > 0], dtype=float)
        if values.size == 0:
            return cls((0.0, 1.0), (0.0, 0.0))
        return cls(EMPIRICAL_PROBS, tuple(float(v) for v in np.quantile(values, EMPIRICAL_PROBS)))

    @classmethod
    def from_dict(cls, data: Any, where: str) -> Empirical:
        unknown = set(data) - {"p", "s"}
        if unknown:
            raise SpecError(where, f"unknown field(s) {', '.join(sorted(unknown))}", "p, s (an empirical quantile table)")
        if not isinstance(data.get("p"), list) or not isinstance(data.get("s"), list):
            raise SpecError(where, "p and s must be lists of numbers", "p (probabilities 0..1), s (seconds)")
        try:
            return cls(tuple(data["p"]), tuple(data["s"]))
        except (TypeError, ValueError):
            raise SpecError(where, f"not numbers: {data!r}", "p and s as lists of numbers") from None
        except SpecError as err:
            raise SpecError(where, err.problem, err.valid) from None


def service_time_from_dict(data: Any, where: str) -> LogNormal | Empirical:
    """A profile's service time: ``{median_s, sigma, cap_s}`` (log-normal), a number, or ``{p, s}`` (empirical)."""
    if isinstance(data, Mapping) and ("p" in data or "s" in data):
        return Empirical.from_dict(data, where)
    return LogNormal.from_dict(data, where)


@dataclass(frozen=True)
class HostProfile:
    cores: int
    cpu: dict[str, LogNormal]  # per input kind: the handler's CPU time
    io_per_input: LogNormal  # the node's frame I/O per input (receive, verify, decode, encode, send)
    fsync: LogNormal | Empirical  # the write + fsync's wall time (empirical when measured from a run's own fsyncs)
    write_bandwidth_GBps: float
    loopback: LogNormal  # one-way latency process to process
    client_per_op: LogNormal  # the client process's CPU per operation
    measured: dict[str, Any] = field(default_factory=dict)  # where / when / how
    wake: LogNormal | None = None  # a node loop's CPU per wake-up (busy period); None: no amortisation
    client_wake: LogNormal | None = None  # the client process's CPU per wake-up
    handoff: LogNormal | None = None  # loop -> storage thread -> loop latency, added to each fsync
    device: DeviceProfile | None = None  # a GPU host's accelerator (recorded; not used by the CPU model)
    tenants: TenantProfile | None = None  # other tenants' CPU on the shared cores
    connect: LogNormal | None = None  # a client's connection set-up to a node (before its first request there)
    accept: LogNormal | None = None  # the node's serial part of a set-up (set-ups at one node queue behind it)
    sync_cpu: LogNormal | None = None  # the storage thread's CPU per fsync (writes, the fsync's kernel work)
    fsync_cpu: LogNormal | None = None  # its CPU inside the fsync's wall time (a core held during the wait)
    io_per_kind: dict[str, LogNormal] | None = None  # the loop's per-item CPU by ITEM_KINDS (else io_per_input)
    write: LogNormal | Empirical | None = None  # a durable write's wall time with fsync off (page cache only)
    write_cpu: LogNormal | None = None  # the storage thread's CPU per write with fsync off
    restart: LogNormal | None = None  # a node process's restart: spawn to serving
    fsync_grow: LogNormal | Empirical | None = None  # write + fsync of an append that allocated a new file block
    block_bytes: int | None = None  # the file system's block size (what an append must cross to allocate)
    restart_cpu: LogNormal | None = None  # the restarted process's CPU from spawn to serving (an empty log)
    recover_per_entry_s: float | None = None  # the restart's extra CPU (and time) per recovered log entry
    entries: EntryCosts | None = None  # CPU per log entry a message carries (send, receive) around the run's mean
    gc: GcProfile | None = None  # a node process's older-generation collections (per handled item)
    client_gc: GcProfile | None = None  # the client process's (per operation)
    spell: SpellProfile | None = None  # the host's slow spells (a slowly varying factor on every CPU cost)
    handback: LogNormal | Empirical | None = None  # storage thread (holding the lock) -> the loop has the result
    disk_stalls: DiskStallProfile | None = None  # the shared disk's stalls (every node's fsyncs held together)
    handover: LogNormal | Empirical | None = None  # the loop's submit -> its storage thread runs the job (under load)
    # the real transport's retry interval for a refused peer when the profile was measured: a restarted node is
    # reached by each running peer at its next retry, a uniform point within it (None: at once)
    reconnect_s: float | None = None

    def __post_init__(self) -> None:
        if set(self.cpu) != set(KINDS):  # a kind never measured costs nothing beyond its frame I/O
            object.__setattr__(self, "cpu", {k: self.cpu.get(k, LogNormal(0.0)) for k in KINDS})

    def cpu_cost(self, kind: int, rng: np.random.Generator, woke: bool = False,
                 collections: list[int] | None = None) -> float:
        """CPU of one input of ``kind``: the handler, the per-item frame I/O and, when it woke the loop, the
        wake-up cost (amortisation; see the module docstring); ``collections``: the node incarnation's collections
        so far (:meth:`GcProfile.draw`)."""
        cost = self.cpu[KINDS[kind]].draw(rng) + self._io(KINDS[kind]).draw(rng)
        if woke and self.wake is not None:
            cost += self.wake.draw(rng)
        if self.gc is not None:
            cost += self.gc.draw(rng, collections)
        return cost

    def completion_cost(self, rng: np.random.Generator, woke: bool, collections: list[int] | None = None) -> float:
        """CPU of an fsync completion (the effects that waited behind it) on an amortised host."""
        cost = self._io("fsync_done").draw(rng) + (self.wake.draw(rng) if woke and self.wake is not None else 0.0)
        return cost + self.gc.draw(rng, collections) if self.gc is not None else cost

    def sync_start_cost(self, rng: np.random.Generator) -> float:
        """The loop's CPU to hand one fsync to its storage thread, where measured by kind (else inside the items)."""
        io = self.io_per_kind.get("fsync_start") if self.io_per_kind else None
        return io.draw(rng) if io is not None else 0.0

    def _io(self, kind: str) -> LogNormal:
        io = self.io_per_kind.get(kind) if self.io_per_kind else None
        return io if io is not None else self.io_per_input

    def client_cost(self, rng: np.random.Generator, woke: bool) -> float:
        """The client process's CPU for one operation, plus its wake-up cost when the reply found it idle."""
        cost = self.client_per_op.draw(rng)
        if woke and self.client_wake is not None:
            cost += self.client_wake.draw(rng)
        if self.client_gc is not None:
            cost += self.client_gc.draw(rng)
        return cost

    @property
    def amortised(self) -> bool:
        return self.wake is not None

    def scaled_cpu(self, factor: float) -> HostProfile:
        """The profile with every CPU time ``factor`` times as long (handlers, frame I/O, wake-ups, the client
        process, the storage thread's CPU, a restart's, the entries carried); latencies (loopback, hand-off,
        connection set-up), the garbage collections' pauses and the tenants unchanged. A machine whose cores run this
        code slower or faster than when it was profiled (clock, caches, a neighbour the meter cannot see) moves all
        of them together. A durable write's wall time (``fsync``, ``fsync_grow``; ``write`` with fsync off) moves by
        the share of it that is the storage thread's own CPU (``fsync_cpu`` / ``write_cpu`` over the wall's median:
        ~0.3-0.4 here): that part is CPU on the same cores, the rest is the device's."""
        import dataclasses

        if not (isinstance(factor, (int, float)) and math.isfinite(factor) and factor > 0):
            raise SpecError("cpu scale factor", f"must be a finite number > 0, got {factor!r}")

        def one(dist: LogNormal | None) -> LogNormal | None:
            return None if dist is None else dist.scaled(factor)

        def wall(dist: LogNormal | Empirical | None, cpu: LogNormal | None) -> LogNormal | Empirical | None:
            if dist is None or cpu is None or dist.median_s <= 0:
                return dist
            share = min(1.0, cpu.median_s / dist.median_s)
            return dist.scaled(1.0 + (factor - 1.0) * share)

        return dataclasses.replace(
            self, fsync=wall(self.fsync, self.fsync_cpu), fsync_grow=wall(self.fsync_grow, self.fsync_cpu),
            write=wall(self.write, self.write_cpu),
            cpu={k: v.scaled(factor) for k, v in self.cpu.items()}, io_per_input=self.io_per_input.scaled(factor),
            client_per_op=self.client_per_op.scaled(factor), wake=one(self.wake), client_wake=one(self.client_wake),
            sync_cpu=one(self.sync_cpu), fsync_cpu=one(self.fsync_cpu), write_cpu=one(self.write_cpu),
            restart_cpu=one(self.restart_cpu),
            entries=None if self.entries is None else self.entries.scaled(factor),
            recover_per_entry_s=None if self.recover_per_entry_s is None else self.recover_per_entry_s * factor,
            io_per_kind=None if self.io_per_kind is None else {k: v.scaled(factor)
                                                               for k, v in self.io_per_kind.items()})

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        for key in ("fsync", "write", "fsync_grow", "handback", "handover"):
            value = getattr(self, key)
            if isinstance(value, Empirical):
                out[key] = {"p": list(value.p), "s": list(value.s)}
        out["cpu"] = {k: asdict(v) for k, v in self.cpu.items()}
        for key in _OPTIONAL:  # absent rather than null: an old reader of the format still reads a new profile
            if out[key] is None:
                del out[key]
        if self.device is not None:
            out["device"] = self.device.to_dict()
        if self.io_per_kind is not None:
            out["io_per_kind"] = {k: asdict(v) for k, v in self.io_per_kind.items()}
        if self.tenants is not None:
            out["tenants"] = {"busy_cores": self.tenants.busy_cores, "slice": asdict(self.tenants.slice),
                              "share": self.tenants.share}
        for key in ("gc", "client_gc"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key).to_dict()
        if self.entries is not None:
            out["entries"] = asdict(self.entries)
        if self.spell is not None:
            out["spell"] = asdict(self.spell)
        if self.disk_stalls is not None:
            out["disk_stalls"] = self.disk_stalls.to_dict()
        return out

    def to_yaml(self) -> str:
        """The profile file's text (written atomically by the real backend's ``atomic_write``; read by
        :func:`load_profile`)."""
        from seedance.validation import dumps_yaml

        return dumps_yaml(self.to_dict())

    @classmethod
    def from_dict(cls, data: Any, where: str = "host profile") -> HostProfile:
        if not isinstance(data, Mapping):
            raise SpecError(where, "expected a mapping (a host profile written by `seedance real profile`)")
        required = ("cores", "cpu", "io_per_input", "fsync", "write_bandwidth_GBps", "loopback", "client_per_op")
        missing = [k for k in required if k not in data]
        if missing:
            raise SpecError(where, f"missing field(s) {', '.join(missing)}", f"required: {', '.join(required)}")
        unknown = set(data) - set(required) - {"measured", *_OPTIONAL}
        if unknown:
            raise SpecError(where, f"unknown field(s) {', '.join(sorted(unknown))}",
                            f"valid: {', '.join(required)}, measured, {', '.join(_OPTIONAL)}")
        cores = data["cores"]
        if isinstance(cores, bool) or not isinstance(cores, int) or not 1 <= cores <= 4096:
            raise SpecError(f"{where}: cores", f"must be an integer in 1..4096, got {cores!r}")
        cpu = data["cpu"]
        if not isinstance(cpu, Mapping) or set(cpu) - set(KINDS):
            raise SpecError(f"{where}: cpu", f"expected a mapping of input kinds, got {cpu!r}",
                            f"keys among {', '.join(KINDS)}")
        per_kind = data.get("io_per_kind")
        if per_kind is not None and (not isinstance(per_kind, Mapping) or set(per_kind) - set(ITEM_KINDS)):
            raise SpecError(f"{where}: io_per_kind", f"expected a mapping of item kinds, got {per_kind!r}",
                            f"keys among {', '.join(ITEM_KINDS)}")
        bandwidth = data["write_bandwidth_GBps"]
        if isinstance(bandwidth, bool) or not isinstance(bandwidth, (int, float)) or not (
                math.isfinite(bandwidth) and bandwidth > 0):
            raise SpecError(f"{where}: write_bandwidth_GBps", f"must be a finite number > 0, got {bandwidth!r}")
        return cls(
            cores=cores,
            cpu={k: LogNormal.from_dict(cpu.get(k, 0.0), f"{where}: cpu.{k}") for k in KINDS},
            io_per_input=LogNormal.from_dict(data["io_per_input"], f"{where}: io_per_input"),
            fsync=service_time_from_dict(data["fsync"], f"{where}: fsync"),
            write_bandwidth_GBps=float(bandwidth),
            loopback=LogNormal.from_dict(data["loopback"], f"{where}: loopback"),
            client_per_op=LogNormal.from_dict(data["client_per_op"], f"{where}: client_per_op"),
            measured=dict(data.get("measured") or {}),
            **{key: None if data.get(key) is None else LogNormal.from_dict(data[key], f"{where}: {key}")
               for key in ("wake", "client_wake", "handoff", "connect", "accept", "sync_cpu", "fsync_cpu",
                           "write_cpu", "restart", "restart_cpu")},
            recover_per_entry_s=_seconds(data.get("recover_per_entry_s"), f"{where}: recover_per_entry_s"),
            reconnect_s=_seconds(data.get("reconnect_s"), f"{where}: reconnect_s"),
            write=None if data.get("write") is None else service_time_from_dict(data["write"], f"{where}: write"),
            fsync_grow=None if data.get("fsync_grow") is None else service_time_from_dict(data["fsync_grow"],
                                                                                         f"{where}: fsync_grow"),
            block_bytes=_block_bytes(data.get("block_bytes"), f"{where}: block_bytes"),
            **{key: None if data.get(key) is None else GcProfile.from_dict(data[key], f"{where}: {key}")
               for key in ("gc", "client_gc")},
            entries=None if data.get("entries") is None else EntryCosts.from_dict(data["entries"], f"{where}: entries"),
            spell=None if data.get("spell") is None else SpellProfile.from_dict(data["spell"], f"{where}: spell"),
            handback=None if data.get("handback") is None else service_time_from_dict(data["handback"],
                                                                                     f"{where}: handback"),
            handover=None if data.get("handover") is None else service_time_from_dict(data["handover"],
                                                                                     f"{where}: handover"),
            disk_stalls=None if data.get("disk_stalls") is None else DiskStallProfile.from_dict(
                data["disk_stalls"], f"{where}: disk_stalls"),
            device=None if data.get("device") is None else DeviceProfile.from_dict(data["device"], f"{where}: device"),
            tenants=None if data.get("tenants") is None else TenantProfile.from_dict(data["tenants"],
                                                                                   f"{where}: tenants"),
            io_per_kind=None if per_kind is None else {
                k: LogNormal.from_dict(v, f"{where}: io_per_kind.{k}") for k, v in per_kind.items()},
        )


_OPTIONAL = ("wake", "client_wake", "handoff", "device", "tenants", "connect", "accept", "sync_cpu", "io_per_kind",
             "fsync_cpu", "write", "write_cpu", "restart", "fsync_grow", "block_bytes", "gc", "client_gc",
             "restart_cpu", "recover_per_entry_s", "entries", "spell", "handback", "disk_stalls",
             "handover", "reconnect_s")


def _seconds(value: Any, where: str) -> float | None:
    from seedance import validation as V

    return None if value is None else V.number(where, value, lo=0, hi=1)


def _block_bytes(value: Any, where: str) -> int | None:
    from seedance import validation as V

    return None if value is None else V.integer(where, value, lo=512, hi=1 << 20,
                                                why="the file system's block size, statvfs f_bsize")


def reaches_new_block(before: int, after: int, block: int) -> bool:
    """Does growing a file from ``before`` to ``after`` bytes reach a block it did not have (its first included)?
    The one rule of the real storage's count and the simulator's draw of an allocating fsync (``fsync_grow``)."""
    return after > before and (before == 0 or (after - 1) // block > (before - 1) // block)


def carried_entries(message: Any) -> int:
    """How many log entries a message carries (a Raft AppendEntries' ``entries``; 0 for anything else)."""
    entries = getattr(message, "entries", None)
    return len(entries) if isinstance(entries, (tuple, list)) else 0


@dataclass(frozen=True)
class EntryCosts:
    """CPU per log entry a message carries: ``send_s`` to encode one (protocol codec, frame), ``recv_s`` to decode
    one; ``mean_in`` / ``mean_out`` are the profile run's mean entries per message received / sent, where the
    per-kind costs already hold them (a message pays ``cost × (entries − mean)`` on top)."""

    send_s: float
    recv_s: float
    mean_in: float
    mean_out: float

    FIELDS = ("send_s", "recv_s", "mean_in", "mean_out")

    def __post_init__(self) -> None:
        from seedance import validation as V

        for name in self.FIELDS:
            V.number(f"host profile entries.{name}", getattr(self, name), lo=0)

    def received(self, entries: int) -> float:
        return self.recv_s * (entries - self.mean_in)

    def sent(self, entries: int) -> float:
        return self.send_s * (entries - self.mean_out)

    def scaled(self, factor: float) -> EntryCosts:
        return EntryCosts(self.send_s * factor, self.recv_s * factor, self.mean_in, self.mean_out)

    @classmethod
    def from_dict(cls, data: Any, where: str) -> EntryCosts:
        if not isinstance(data, Mapping) or set(data) != set(cls.FIELDS):
            raise SpecError(where, f"expected {{{', '.join(cls.FIELDS)}}}, got {data!r}",
                            "send_s, recv_s (s per entry), mean_in, mean_out (entries per message)")
        return cls(**{k: data[k] for k in cls.FIELDS})


@dataclass(frozen=True)
class GcProfile:
    """A process's older-generation garbage collections: each handled item (operation) runs one with probability
    ``rate``, which pauses the process for a draw of ``pause``.

    With ``full`` (the full collections' pauses, generation 2), the collections of one incarnation are counted, as
    CPython counts them: the ``full_first``-th is a full one, then every ``full_period``-th (the interpreter runs
    generation 2 once ``threshold2`` generation-1 collections have passed: 12 for the default thresholds), and the
    others draw ``pause`` (generation 1 only). A node forked from the zygote inherits the zygote's counts, so its
    first full collection comes early (its 6th here, the 4th of those drawn per item: the few every process makes
    at its start are not drawn, :func:`seedance.real.profile.fit_gc`), and a restarted node counts again. Without
    ``full`` (a profile from before it), every collection draws the pooled ``pause``."""

    rate: float
    pause: LogNormal | Empirical
    full: LogNormal | Empirical | None = None
    full_first: int = 0
    full_period: int = 0

    def __post_init__(self) -> None:
        from seedance import validation as V

        V.number("host profile gc.rate", self.rate, lo=0, hi=1)
        if self.full is not None:
            V.integer("host profile gc.full_first", self.full_first, lo=1, hi=10_000)
            V.integer("host profile gc.full_period", self.full_period, lo=1, hi=10_000)

    def draw(self, rng: np.random.Generator, counted: list[int] | None = None) -> float:
        """One item's collection pause (0: none); ``counted``: the incarnation's collections so far, in a list of
        one (updated), where the profile has ``full``."""
        if not self.rate or rng.random() >= self.rate:
            return 0.0
        if self.full is None or counted is None:
            return self.pause.draw(rng)
        counted[0] += 1
        n = counted[0]
        if n >= self.full_first and (n - self.full_first) % self.full_period == 0:
            return self.full.draw(rng)
        return self.pause.draw(rng)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"rate": self.rate, "pause": _service_dict(self.pause)}
        if self.full is not None:
            out.update({"full": _service_dict(self.full), "full_first": self.full_first,
                        "full_period": self.full_period})
        return out

    @classmethod
    def from_dict(cls, data: Any, where: str) -> GcProfile:
        full_keys = {"full", "full_first", "full_period"}
        if not isinstance(data, Mapping) or not {"rate", "pause"} <= set(data) <= {"rate", "pause"} | full_keys \
                or (set(data) & full_keys and not full_keys <= set(data)):
            raise SpecError(where, f"expected {{rate, pause}} and optionally {{full, full_first, full_period}}, "
                                   f"got {data!r}",
                            "rate (collections per item, 0..1), pause (a service time); full (a service time), "
                            "full_first and full_period (integers >= 1)")
        from seedance import validation as V

        rate = V.number(f"{where}.rate", data["rate"], lo=0, hi=1)
        if "full" not in data:
            return cls(float(rate), service_time_from_dict(data["pause"], f"{where}.pause"))
        return cls(float(rate), service_time_from_dict(data["pause"], f"{where}.pause"),
                   service_time_from_dict(data["full"], f"{where}.full"),
                   V.integer(f"{where}.full_first", data["full_first"], lo=1, hi=10_000),
                   V.integer(f"{where}.full_period", data["full_period"], lo=1, hi=10_000))


def _service_dict(time_: LogNormal | Empirical) -> dict[str, Any]:
    return {"p": list(time_.p), "s": list(time_.s)} if isinstance(time_, Empirical) else asdict(time_)


@dataclass(frozen=True)
class SpellProfile:
    """The host's slow spells: every CPU cost (and the loopback latency) is ``g(t)`` times its draw, where
    ``log g`` is an Ornstein-Uhlenbeck process (stationary sd ``sigma``, correlation time ``tau_s``), shifted by
    ``sigma² / 2`` so that the time average of ``1 / g`` is 1: the per-item costs were fitted on a real run that had
    the spells in it (its items came faster in the fast spells), so a run of the same length completes as many of
    them. A shared machine's cores run the same code faster and slower for tens to hundreds of milliseconds at a
    time (other virtual machines, frequency, caches), which independent per-item draws cannot reproduce: averaged
    over the items of one operation they cancel, a spell does not."""

    sigma: float
    tau_s: float

    def __post_init__(self) -> None:
        from seedance import validation as V

        V.number("host profile spell.sigma", self.sigma, lo=0, hi=1.5)
        V.number("host profile spell.tau_s", self.tau_s, lo=1e-4, hi=60,
                 why="the spells' correlation time in seconds")

    @classmethod
    def from_dict(cls, data: Any, where: str) -> SpellProfile:
        if not isinstance(data, Mapping) or set(data) != {"sigma", "tau_s"}:
            raise SpecError(where, f"expected {{sigma, tau_s}}, got {data!r}",
                            "sigma (log-sd of the spells' factor, 0..1.5), tau_s (their correlation time, s)")
        from seedance import validation as V

        return cls(V.number(f"{where}.sigma", data["sigma"], lo=0, hi=1.5),
                   V.number(f"{where}.tau_s", data["tau_s"], lo=1e-4, hi=60,
                            why="the spells' correlation time in seconds"))


def ou_window_shape(ratio: float) -> tuple[float, float]:
    """For an Ornstein-Uhlenbeck process of correlation time tau, averaged over windows of ``ratio · tau``: (the
    window averages' variance as a fraction of the process's, the correlation of adjacent windows' averages)."""
    r = float(ratio)
    if r < 1e-6:
        return 1.0, 1.0
    kept = 2.0 * (r - 1.0 + math.exp(-r)) / r ** 2
    return kept, (1.0 - math.exp(-r)) ** 2 / (r ** 2 * kept)


def fit_spell(window_sd: float, window_rho: float, window_s: float, elasticity: float = 1.0) -> SpellProfile | None:
    """The spells that give a latency series whose ``window_s`` windows' log medians have sd ``window_sd`` and
    lag-1 correlation ``window_rho`` (sampling noise already removed), where the latency moves as ``g ** elasticity``
    (1: all of it is CPU; less where an fsync's wall time, which spells leave alone, is part of it). The
    correlation gives tau (inverting :func:`ou_window_shape`), the sd then sigma. None without spells (sd 0 or no
    positive correlation: what varies from window to window is then sampling, not spells)."""
    from scipy.optimize import brentq

    if not (window_sd > 0 and window_s > 0 and elasticity > 0) or not (window_rho > 0):
        return None
    rho = min(float(window_rho), 0.99)
    # the adjacent windows' correlation falls from 1 (tau >> window) towards 0 (tau << window)
    lo, hi = 1e-3, 50.0
    ratio = lo if ou_window_shape(lo)[1] <= rho else (hi if ou_window_shape(hi)[1] >= rho else
                                                        brentq(lambda r: ou_window_shape(r)[1] - rho, lo, hi))
    kept, _ = ou_window_shape(ratio)
    sigma = window_sd / elasticity / math.sqrt(kept)
    return SpellProfile(float(min(sigma, 1.5)), float(min(max(window_s / ratio, 1e-4), 60.0)))


class SpellProcess:
    """A run's draw of :class:`SpellProfile`: ``log g`` on a grid of ``step_s`` (a tenth of tau, at most 5 ms),
    drawn from its own generator as far as asked (so the other draws of a run do not depend on it), held constant
    within a step. ``factor(t)`` is ``g`` at time ``t``."""

    def __init__(self, spell: SpellProfile, rng: np.random.Generator) -> None:
        self.step_s = min(spell.tau_s / 10.0, 0.005)
        self._keep = math.exp(-self.step_s / spell.tau_s)
        self._kick = spell.sigma * math.sqrt(1.0 - self._keep ** 2)
        self._shift = spell.sigma ** 2 / 2.0
        self._rng = rng
        self._x = spell.sigma * float(rng.standard_normal())  # stationary from the start
        self._g = [math.exp(self._x + self._shift)]

    def factor(self, t: float) -> float:
        index = int(t / self.step_s) if t > 0 else 0
        g = self._g
        while index >= len(g):
            self._x = self._x * self._keep + self._kick * float(self._rng.standard_normal())
            g.append(math.exp(self._x + self._shift))
        return g[index]


@dataclass(frozen=True)
class DiskStallProfile:
    """The shared disk's stalls: at ``rate_per_s`` (a Poisson process over the run), the device stops for one of
    ``durations_s`` (drawn uniformly: the stalls measured), and every fsync in flight on it, of any node, is held
    for as long as the stall overlaps it. What a run's fsyncs show as a handful of 40-95 ms waits among thousands
    of 0.3 ms ones, the three nodes' at the same moment (their intervals overlap on the shared clock): one event
    of the device, not three independent tails. Drawn per fsync from the quantiles instead, each node met them
    apart, three times as often, and the quantile table's last segment spread them evenly over 2-94 ms (a mean of
    48 ms where the measured ones averaged 30 ms), which over-predicted the held-out p99 up to 2.7x."""

    rate_per_s: float
    durations_s: tuple[float, ...]

    def __post_init__(self) -> None:
        rate, durations = self.checked(self.rate_per_s, self.durations_s, "host profile disk_stalls")
        object.__setattr__(self, "rate_per_s", rate)
        object.__setattr__(self, "durations_s", durations)

    @staticmethod
    def checked(rate: Any, durations: Any, where: str) -> tuple[float, tuple[float, ...]]:
        """``rate`` and ``durations`` validated, each error naming its field under ``where``."""
        from seedance import validation as V

        if not isinstance(durations, (list, tuple)):
            raise SpecError(f"{where}.durations_s", f"must be a list of seconds, got {durations!r}",
                            "the measured stalls' lengths in seconds")
        rate = float(V.number(f"{where}.rate_per_s", rate, lo=0, hi=1000, why="stalls per second of run"))
        if rate > 0 and not durations:
            raise SpecError(f"{where}.durations_s", "is empty but rate_per_s > 0",
                            "the measured stalls' lengths in seconds")
        return rate, tuple(float(V.number(f"{where}.durations_s[{i}]", d, lo=0, hi=60,
                                          why="seconds the device stopped")) for i, d in enumerate(durations))

    def to_dict(self) -> dict[str, Any]:
        return {"rate_per_s": self.rate_per_s, "durations_s": list(self.durations_s)}

    @classmethod
    def from_dict(cls, data: Any, where: str) -> DiskStallProfile:
        if not isinstance(data, Mapping) or set(data) != {"rate_per_s", "durations_s"}:
            raise SpecError(where, f"expected {{rate_per_s, durations_s}}, got {data!r}",
                            "rate_per_s (stalls per second), durations_s (a list of seconds)")
        if not isinstance(data["durations_s"], list):  # a YAML list: a tuple only ever comes from code
            raise SpecError(f"{where}.durations_s", f"must be a list of seconds, got {data['durations_s']!r}",
                            "the measured stalls' lengths in seconds")
        return cls(*cls.checked(data["rate_per_s"], data["durations_s"], where))


class DiskStallProcess:
    """A run's draw of :class:`DiskStallProfile`: the stalls' windows ``[start, end)`` from their own generator,
    drawn as far as asked. :meth:`hold` is when an fsync that would run from ``start`` to ``done`` ends."""

    def __init__(self, stalls: DiskStallProfile, rng: np.random.Generator) -> None:
        self._profile = stalls
        self._rng = rng
        self._windows: list[tuple[float, float]] = []
        self._drawn = 0.0  # the windows are drawn up to here

    def _until(self, t: float) -> None:
        rate, rng = self._profile.rate_per_s, self._rng
        while self._drawn <= t:
            begin = self._drawn + float(rng.exponential(1.0 / rate))
            length = self._profile.durations_s[int(rng.integers(len(self._profile.durations_s)))]
            self._windows.append((begin, begin + length))
            self._drawn = begin + length

    def hold(self, start: float, done: float) -> float:
        """``done`` moved later by each stall's overlap with the fsync's time (it makes no progress meanwhile)."""
        if self._profile.rate_per_s <= 0:
            return done
        self._until(done)
        windows = self._windows
        i = bisect_left(windows, (start,)) - 1  # the stall that may have begun before the fsync
        i = max(i, 0)
        while i < len(windows):
            begin, end = windows[i]
            if begin >= done:
                break
            if end > start:
                done += end - max(begin, start)
                self._until(done)
            i += 1
        return done


@dataclass(frozen=True)
class TenantProfile:
    """Other tenants of a shared machine: ``busy_cores`` cores' worth of CPU, in bursts of ``slice``; ``share`` is
    the fraction of the metered busy cores that holds cores against this host's processes (fitted on the profile's
    own run: under contention the scheduler's fair share and the meter's granularity make the two differ)."""

    busy_cores: float
    slice: LogNormal
    share: float = 1.0

    def __post_init__(self) -> None:
        value = self.busy_cores
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
            raise SpecError("host profile tenants.busy_cores", f"must be a finite number >= 0, got {value!r}")

    @classmethod
    def from_dict(cls, data: Any, where: str) -> TenantProfile:
        if not isinstance(data, Mapping) or not {"busy_cores", "slice"} <= set(data) <= {"busy_cores", "slice",
                                                                                        "share"}:
            raise SpecError(where, f"expected {{busy_cores, slice, share}}, got {data!r}",
                            "busy_cores (cores), slice, share (optional, 0..2)")
        share = data.get("share", 1.0)
        if isinstance(share, bool) or not isinstance(share, (int, float)) or not 0 <= share <= 2:
            raise SpecError(f"{where}.share", f"must be a number in 0..2, got {share!r}")
        busy = data["busy_cores"]
        if isinstance(busy, bool) or not isinstance(busy, (int, float)) or not math.isfinite(busy) or busy < 0:
            raise SpecError(f"{where}.busy_cores", f"must be a finite number >= 0, got {busy!r}")
        return cls(float(busy), LogNormal.from_dict(data["slice"], f"{where}.slice"), float(share))


@dataclass(frozen=True)
class DeviceProfile:
    """A GPU host's accelerator: kind (the compute model's device kind), name, memory per device, how many, and
    optional CUDA-side costs (kernel launch latency, host-to-device and device-to-host bandwidth)."""

    kind: str
    name: str = ""
    memory_GiB: float = 0.0
    count: int = 1
    kernel_launch_s: LogNormal | None = None
    h2d_GBps: float | None = None
    d2h_GBps: float | None = None

    FIELDS = ("kind", "name", "memory_GiB", "count", "kernel_launch_s", "h2d_GBps", "d2h_GBps")

    def to_dict(self) -> dict[str, Any]:
        out = {"kind": self.kind, "name": self.name, "memory_GiB": self.memory_GiB, "count": self.count}
        if self.kernel_launch_s is not None:
            out["kernel_launch_s"] = asdict(self.kernel_launch_s)
        for key in ("h2d_GBps", "d2h_GBps"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        return out

    @classmethod
    def from_dict(cls, data: Any, where: str) -> DeviceProfile:
        from seedance.models.compute import DEVICES

        if not isinstance(data, Mapping):
            raise SpecError(where, f"expected a mapping, got {data!r}", ", ".join(cls.FIELDS))
        unknown = set(data) - set(cls.FIELDS)
        if unknown:
            raise SpecError(where, f"unknown field(s) {', '.join(sorted(unknown))}", ", ".join(cls.FIELDS))
        kind = data.get("kind")
        if not isinstance(kind, str) or not any(kind.upper().startswith(name) for name in DEVICES):
            raise SpecError(f"{where}.kind", f"unknown device kind {kind!r}",
                            f"one of {', '.join(DEVICES)} (a prefix match: A100-80GB is an A100)")
        count = data.get("count", 1)
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise SpecError(f"{where}.count", f"must be an integer >= 1, got {count!r}")
        numbers = {}
        for key in ("memory_GiB", "h2d_GBps", "d2h_GBps"):
            value = data.get(key, 0.0 if key == "memory_GiB" else None)
            if value is None:
                numbers[key] = None
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or (
                    value < 0 if key == "memory_GiB" else value <= 0):
                raise SpecError(f"{where}.{key}", f"must be a finite number {'>= 0' if key == 'memory_GiB' else '> 0'},"
                                f" got {value!r}")
            numbers[key] = float(value)
        launch = data.get("kernel_launch_s")
        return cls(kind=kind, name=str(data.get("name", "")), count=count, memory_GiB=numbers["memory_GiB"],
                   kernel_launch_s=None if launch is None else LogNormal.from_dict(launch, f"{where}.kernel_launch_s"),
                   h2d_GBps=numbers["h2d_GBps"], d2h_GBps=numbers["d2h_GBps"])


def load_profile(path: str | Path) -> HostProfile:
    """Read a host profile (YAML or JSON, strictly: :func:`seedance.validation.load_file`, so a binary file, a
    repeated key or an alias is named as such); a clear error naming the field otherwise."""
    from seedance.validation import load_file

    data = load_file(path, "--host-profile",
                     expected="a host profile: YAML/JSON as `seedance real profile` writes it")
    return HostProfile.from_dict(data, f"host profile {path}")


class CorePool:
    """``cores`` cores shared by every process of the modelled host.

    Two classes of work: *foreground* (:meth:`take`: the event-loop threads of the nodes and of the client process,
    which sleep in ``select`` between inputs) and *background* (:meth:`take_background`: the storage threads' CPU
    around their writes and fsyncs, a thread that has been running). Linux's scheduler lets a thread that wakes from
    sleep preempt one that has been running (CFS wake-up preemption: the sleeper's smaller virtual runtime), so
    foreground work never waits for background work: it starts on the core where it ends first counting foreground
    work only, and background work it lands on is pushed out by its length; background work waits for cores free of
    both. The cores' capacity is conserved either way (a background stream on a busy core falls behind).

    With ``tenants`` (and a generator), each core is also held by other tenants' bursts: a burst of ``slice`` starts
    after an exponential gap whose mean makes the held fraction ``busy_cores / cores`` (at most 0.95); work that
    would start in a burst starts at its end, and work running when a burst starts is preempted for its length.

    With ``spell`` (a :class:`SpellProcess`), every piece of work costs the spells' factor at its start times its
    draw: the cores run slower and faster together.
    """

    def __init__(self, cores: int, tenants: TenantProfile | None = None,
                 rng: np.random.Generator | None = None, spell: SpellProcess | None = None) -> None:
        self.spell = spell  # the host's slow spells: every cost is their factor at its start times its draw
        self.work_s = 0.0  # the CPU taken so far, foreground and background (the tenants' bursts not counted)
        self.free = [0.0] * cores  # per core: when its foreground work ends
        self.all_free = [0.0] * cores  # per core: when its foreground and background work ends
        self._tenants = None
        if tenants is not None and tenants.busy_cores * tenants.share > 0 and rng is not None:
            held = min(0.95, tenants.share * tenants.busy_cores / cores)
            mean_gap = tenants.slice.mean_s * (1.0 - held) / held
            self._tenants = (tenants.slice, mean_gap, rng)
            self._bursts: list[list[float]] = [[] for _ in range(cores)]  # flat [start, end, start, end, ...]
            self._drawn = [0.0] * cores  # bursts are drawn up to here

    def _burst_after(self, core: int, t: float) -> tuple[float, float]:
        """The first burst on ``core`` that ends after ``t`` (drawn as needed). Bursts are forgotten only once all
        of the core's work has passed them: a later request may start earlier than this ``t`` (it was asked of a
        core that was not chosen, or is foreground work ahead of background work), and must still meet them."""
        bursts = self._bursts[core]
        slice_, mean_gap, rng = self._tenants  # type: ignore[misc]
        free = min(self.free[core], self.all_free[core])
        while bursts and bursts[1] <= free:
            del bursts[:2]
        i = 0
        while True:
            while i >= len(bursts):
                start = self._drawn[core] + float(rng.exponential(mean_gap))
                end = start + slice_.draw(rng)
                self._drawn[core] = end
                bursts.extend((start, end))
            if bursts[i + 1] > t:
                return bursts[i], bursts[i + 1]
            i += 2

    def _run_on(self, core: int, start: float, cost: float, free: list[float]) -> tuple[float, float]:
        """(begin, end) of ``cost`` on ``core`` after ``start`` and ``free[core]``, around the tenants' bursts."""
        t = max(start, free[core])
        if self._tenants is None:
            return t, t + cost
        begin = None
        while True:
            b_start, b_end = self._burst_after(core, t)
            if b_start <= t:
                t = b_end  # held by a tenant: wait for the burst to end
                continue
            if begin is None:
                begin = t
            if t + cost <= b_start:
                return begin, t + cost
            cost -= b_start - t  # preempted by the burst for its length
            t = b_end

    def earliest(self) -> float:
        """When foreground work could start at the earliest (some core free of foreground work and bursts)."""
        if self._tenants is None:
            return min(self.free)
        best = math.inf
        for core, free in enumerate(self.free):
            b_start, b_end = self._burst_after(core, free)
            best = min(best, b_end if b_start <= free else free)
        return best

    def take(self, start: float, cost: float) -> float:
        """Foreground work: run ``cost`` seconds on the core where it ends first, not before ``start``, ahead of
        any background work there; when it ends."""
        if self.spell is not None:
            cost *= self.spell.factor(start)
        self.work_s += cost
        spans = [self._run_on(core, start, cost, self.free) for core in range(len(self.free))]
        core = min(range(len(spans)), key=lambda c: spans[c][1])
        begin, end = spans[core]
        self.free[core] = end
        if self.all_free[core] > begin:  # background work running or queued there falls behind by this much
            self.all_free[core] += end - begin
        else:
            self.all_free[core] = end
        return end

    def take_background(self, start: float, cost: float) -> float:
        """Background work: ``cost`` seconds on the core where it ends first, after that core's foreground and
        background work and not before ``start``; when it ends."""
        if self.spell is not None:
            cost *= self.spell.factor(start)
        self.work_s += cost
        spans = [self._run_on(core, start, cost, self.all_free) for core in range(len(self.all_free))]
        core = min(range(len(spans)), key=lambda c: spans[c][1])
        self.all_free[core] = spans[core][1]
        return spans[core][1]
