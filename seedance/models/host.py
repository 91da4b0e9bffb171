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
  and the loopback latency, fitted to the profile runs' latency windows (:mod:`seedance.history.spells`);
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
from seedance.models.cores import CorePool
from seedance.models.host_parts import (DeviceProfile, DiskStallProcess, DiskStallProfile, EntryCosts, GcProfile,
                                        SpellProcess, SpellProfile, TenantProfile, fit_spell, ou_window_shape)
from seedance.models.service_times import EMPIRICAL_PROBS, Empirical, LogNormal, service_time_from_dict

# the host model's parts live in service_times, host_parts and cores; imported from here as before
__all__ = ["CorePool", "DeviceProfile", "DiskStallProcess", "DiskStallProfile", "EMPIRICAL_PROBS", "Empirical",
           "EntryCosts", "GcProfile", "HostProfile", "ITEM_KINDS", "KINDS", "LogNormal", "SpellProcess",
           "SpellProfile", "TenantProfile", "carried_entries", "fit_spell", "load_profile", "ou_window_shape",
           "reaches_new_block", "service_time_from_dict"]

KINDS = ("message", "timer", "client", "collective", "persisted", "work")
# what a loop's busy period handles, by kind: the input kinds, fsync completions, fsyncs handed to the storage thread
ITEM_KINDS = (*KINDS, "fsync_done", "fsync_start")


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


def load_profile(path: str | Path) -> HostProfile:
    """Read a host profile (YAML or JSON, strictly: :func:`seedance.validation.load_file`, so a binary file, a
    repeated key or an alias is named as such); a clear error naming the field otherwise."""
    from seedance.validation import load_file

    data = load_file(path, "--host-profile",
                     expected="a host profile: YAML/JSON as `seedance real profile` writes it")
    return HostProfile.from_dict(data, f"host profile {path}")

