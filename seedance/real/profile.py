"""``seedance real profile``: measure this machine's service-time distributions for the simulator's host model.

Method (each part a measurement of the real backend's own code paths on this machine):

* fsync: the profile run's own (each node's storage thread times its write + fsync: three processes sharing one
  disk, as in every run). A probe alone is recorded beside it (``measured.fsync_probe``: 300 appends of 128 bytes
  each followed by ``os.fsync``) and used only if the run recorded none; write bandwidth: 4 writes of 8 MiB, each
  fsynced.
* log entries carried (``entries``): an AppendEntries of 64 entries against an empty one through the real frame
  path (the protocol codec and an authenticated connection over a socket pair), encode and decode timed apart:
  the CPU per entry sent and received (here ~4 and ~5-7 us). The profile run counts the messages received and sent
  and their entries; their means are the zero point (the per-kind costs were fitted at them).
* garbage collections (``gc``, ``client_gc``): every older-generation collection (``gc.callbacks``: generation and
  wall time); per process kind the rate per handled item (operation) and the pauses' quantiles. The nodes' come from
  one more run without the CPU profile (:func:`plain_gc`: the profile's own records made its nodes collect three
  times as often and gave their leaders a full collection the unprofiled runs never had), the client process's
  from the CPU runs.
* allocating fsyncs (``fsync_grow``, ``block_bytes``): the run's fsyncs are split by whether an append of theirs
  reached a new block of its file (the real storage counts them); ``fsync`` is the others, ``fsync_grow`` these
  (where the run had >= 50; else the others shifted by a probe's step: 100 fsynced 64-byte appends into a new block
  against 100 within one). Larger values allocate more often, so this is what a held-out value size costs.
* the shared disk's stalls (``disk_stalls``, :func:`split_stalls`): each fsync record carries its end on the
  monotonic clock that every process shares, so the nodes' fsyncs over 20x their kind's median that overlap in time
  are found to be one stop of the device. Their count over the runs' seconds is the stalls' rate, their union spans
  the lengths drawn; the fsync quantiles leave them out.
* write without fsync (``write``, ``write_cpu``): 300 log appends of one Raft-shaped entry through the real storage
  code with ``fsync=False`` (what a node does under ``SEEDANCE_FSYNC=0``), wall time and thread CPU; a probe, so a
  configuration with fsync off is never fitted.
* restart (``restart``, ``restart_cpu``, ``recover_per_entry_s``): 8 SIGKILL + restarts of the nodes of an idle Raft
  cluster, each timed from the spawn (a fork of the launcher's zygote) to the node serving again with its durable
  state recovered, and the restarted process's CPU until then (``/proc/<pid>/task/*/schedstat``); then one restart
  per node on a copy of the first CPU run's durable state: its extra CPU over the empty log's, per recovered entry
  (here ~19 ms on an empty log, ~55 ms on a 4,800-entry one).
* loopback: 2,000 round trips of a 64-byte message to an echo process over TCP on 127.0.0.1; one-way = RTT / 2,
  less the share of it that is the two ends' CPU (this thread's and the echo process's over the trips: their send
  and receive syscalls, which the nodes' per-item frame I/O already charges; 66-100 % of it here, depending on
  whether the cores were awake), so the simulator adds only the rest (wake-ups, the kernel's path) to a message.
* handoff: 1,000 round trips from an idle asyncio loop to a one-thread executor and back (the path of every fsync in
  the real runtime: submit to the storage thread, its wake-up, the result handed back through the loop's self-pipe).
  Its second half under load (``handback``) is the CPU runs' own: every fsync's time from the storage thread having
  the interpreter's lock again after the write to the loop running its completion (here median 56-103 us, p90
  143-225 us, where the idle probe's half is 15 us). So is its first half (``handover``): from the loop's submit to
  the thread running the job (median 74-119 us, p90 250-400 us).
* slow spells (``spell``): each CPU run's latencies in 50 ms windows (:mod:`seedance.analysis.spells`: the window
  medians' sd beyond their sampling noise, and their lag-1 correlation), pooled; fitted as an Ornstein-Uhlenbeck
  factor on every CPU cost by :func:`calibrate_spell` (on eleven profiles here: sd 0.08-0.17 of the windows' log
  latency, sigma 0.14-0.30 of the factor, tau 26-98 ms).
* CPU: ``--runs`` real Raft runs (``--nodes`` processes, ``--clients`` closed-loop clients, ``--duration`` s, fsync
  on; 3 runs by default, seeds ``--seed``, ``--seed`` + 1, ...; their samples pooled, so the fit is not one run's
  luck — three 3 s runs of the profile's configuration spanned 8.5-13 % in throughput here; the run of median
  throughput is the one the tenants' share is calibrated to) with
  ``SEEDANCE_CPU_PROFILE=1``: every node samples the loop thread's CPU time (``thread_time``) of each input it
  handles (handler and effect execution), by input kind, and records its loop's *busy periods* (from a wake-up out
  of ``select`` to the next ``select`` that may block; :class:`seedance.real.runtime.BusyPeriods`): the CPU outside
  the timed handlers and the items handled in each (inputs and fsync completions). The client process records its
  own busy periods (CPU, replies handled). Amortisation is fitted per process kind as
  ``CPU(period) = wake + per_item * items`` by non-negative least squares weighted by 1 / items (the variance of a
  period grows with its items), pooled over the nodes: ``wake`` and ``io_per_input`` for the nodes, ``client_wake``
  and ``client_per_op`` for the client process. The nodes' periods are also fitted by kind,
  ``CPU = wake + sum_k cost_k * items_k`` (inputs by kind, fsync completions, fsyncs handed to the storage thread):
  that ``wake`` and ``io_per_kind`` are what the simulator uses (the pooled fit stays as ``io_per_input``, for kinds
  never seen), since one average per-item cost over items whose mix changes with load (a follower's costly
  AppendEntries and fsync completions, one per period; a leader's cheap zero-delay timers, several per period) puts
  part of the costly items into ``wake``. The client process also times each connection it opens (TCP,
  handshake, first frame): ``connect``. Each node also reports its whole process's CPU: what its other threads
  used (the storage thread's writes and fsyncs) per fsync is ``sync_cpu``.
* tenants (a shared machine): for about half a second, 1,000 cycles of 0.1 ms of CPU then a 0.3 ms sleep by one
  thread (a node's duty cycle); the lateness of each wake-up beyond the quietest one is how long another tenant's
  burst kept a core from a waking process (fitted log-normal: the bursts' ``slice``); the machine's busy CPU over the probe (``/proc/stat``) less this process's own
  is the other tenants' ``busy_cores``. :class:`TenantMeter` measures the same ``busy_cores`` during any run (this
  process tree's CPU subtracted), so ``experiment sim-vs-real`` can give the simulator the tenants of each real run.
* Fits: log-normal per kind by maximum likelihood (location 0), capped at the 99.9th percentile.

The profile records the machine (CPU model, cores, kernel, the filesystem of the directory, load average) and the
configuration it was measured with, so ``experiment sim-vs-real`` can tell fitted from held-out configurations.
"""

from __future__ import annotations

import json
import math
import os
import platform
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from seedance.analysis.spells import WINDOW_S, pooled
from seedance.real.launcher import process_cpu_s
from seedance.models.host import (ITEM_KINDS, KINDS, DiskStallProfile, Empirical, EntryCosts, GcProfile, HostProfile,
                                  LogNormal, TenantProfile)

# what a profile keeps of a run (node_lead_s: how long the nodes ran before the load, which the calibrations'
# simulated runs reproduce)
RUN_FIELDS = ("throughput_ops_s", "latency_ms_p50", "latency_ms_p99", "ops_ok", "node_lead_s")
RUNS = 3  # CPU runs a profile pools by default

_ECHO = r"""
import socket, sys
srv = socket.socket(); srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind(("127.0.0.1", 0)); srv.listen(1)
print(srv.getsockname()[1], flush=True)
conn, _ = srv.accept(); conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
while True:
    data = conn.recv(65536)
    if not data:
        break
    conn.sendall(data)
"""


def measure_fsync(directory: Path, samples: int = 300) -> tuple[list[float], float]:
    """fsync latency samples (s) of 128-byte appends, and write bandwidth (GB/s) of 8 MiB fsynced writes."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "fsync-probe.log"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    latencies = []
    try:
        record = b"x" * 128
        for _ in range(samples):
            start = time.perf_counter()
            os.write(fd, record)
            os.fsync(fd)
            latencies.append(time.perf_counter() - start)
        block = os.urandom(8 << 20)
        rates = []
        for _ in range(4):
            start = time.perf_counter()
            os.write(fd, block)
            os.fsync(fd)
            rates.append(len(block) / (time.perf_counter() - start) / 1e9)
    finally:
        os.close(fd)
        path.unlink(missing_ok=True)
    return latencies, float(np.median(rates))


def measure_fsync_grow(directory: Path, samples: int = 100) -> tuple[list[float], list[float], int]:
    """fsync latency (s) of appends within the file's last block and of appends that reach a new block, and the
    file system's block size: ``samples`` of each, interleaved: from a block boundary a 64-byte append (into a new
    block), another (inside it), then an untimed fsynced filler up to the next boundary. On ext4 the allocating
    fsync also commits the allocation's metadata: a step, flat from 4 to 16 KiB appends, not a bandwidth."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "fsync-grow-probe.log"
    try:
        block = max(512, int(os.statvfs(directory).f_bsize))
    except (OSError, AttributeError):
        block = 4096
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    within, grow = [], []
    try:
        os.write(fd, b"x" * block)  # the file's first block, allocated
        os.fsync(fd)
        small, filler = b"x" * 64, b"x" * (block - 128)
        for _ in range(samples):
            for into in (grow, within):  # 64 B into a new block, then 64 B more inside it
                start = time.perf_counter()
                os.write(fd, small)
                os.fsync(fd)
                into.append(time.perf_counter() - start)
            os.write(fd, filler)  # untimed: up to the next block's boundary
            os.fsync(fd)
    finally:
        os.close(fd)
        path.unlink(missing_ok=True)
    return within, grow, block


def fsync_grow_kind(run_within: list[float], run_grow: list[float], probe_within: list[float],
                    probe_grow: list[float], min_samples: int = 50) -> tuple[Empirical | LogNormal, str]:
    """The allocating fsync's distribution: the run's own allocating fsyncs where it had ``min_samples`` of them,
    else the run's others shifted by the probe's step (median allocating - median within); and which it was."""
    if len(run_grow) >= min_samples:
        return Empirical.fit(run_grow), "run"
    step = max(0.0, float(np.median(probe_grow)) - float(np.median(probe_within))) if probe_grow else 0.0
    if not run_within:
        return LogNormal.fit([x + step for x in probe_within] if probe_within else probe_grow), "probe"
    base = Empirical.fit(run_within)
    return Empirical(base.p, tuple(x + step for x in base.s)), "run shifted by the probe's step"


def measure_write(directory: Path, samples: int = 300, value_bytes: int = 64) -> tuple[list[float], list[float]]:
    """A durable write *without* fsync through the real storage code (:class:`seedance.real.storage.DiskStorage`
    with ``fsync=False``, as a node runs with ``SEEDANCE_FSYNC=0``): ``samples`` log appends of one Raft-shaped entry
    each, staged and synced as the storage thread does; the wall-time and thread-CPU samples (s). A probe apart from
    any run, so a configuration with fsync off stays held out."""
    import shutil

    from seedance.models.protocols.contract import PersistLog
    from seedance.models.wire import Codec
    from seedance.real.storage import DiskStorage

    root = directory / "write-probe"
    shutil.rmtree(root, ignore_errors=True)
    storage = DiskStorage(root, Codec(()), fsync=False)
    walls, cpus = [], []
    try:
        for index in range(samples):
            entry = {"term": 1, "index": index + 1, "op": {"f": "write", "key": index % 8, "value": "v" * value_bytes,
                                                         "client": 0, "seq": index}}
            start, cpu = time.perf_counter(), time.thread_time()
            storage.stage(PersistLog(key="log", start=index, entries=(entry,)))
            storage.sync()
            cpus.append(time.thread_time() - cpu)
            walls.append(time.perf_counter() - start)
    finally:
        storage.close()
        shutil.rmtree(root, ignore_errors=True)
    return walls, cpus


def measure_restart(work_dir: Path, *, nodes: int = 3, restarts: int = 8, seed: int = 1) -> list[float]:
    """A node process's restart, as the crash fault does it (SIGKILL, then a new incarnation forked from the
    launcher's zygote that recovers its durable state and serves again): spawn-to-ready samples (s) of ``restarts``
    restarts, round robin over the nodes of an idle ``nodes``-process Raft cluster."""
    return restart_samples(work_dir / "restart-probe", nodes=nodes, restarts=restarts, seed=seed)[0]


def restart_samples(run_dir: Path, *, nodes: int = 3, restarts: int = 8, seed: int = 1,
                    state_from: Path | None = None) -> tuple[list[float], list[float]]:
    """Spawn-to-ready wall times and the restarted processes' CPU until ready (s) of ``restarts`` SIGKILL +
    restarts round robin over an idle Raft cluster in ``run_dir``; with ``state_from`` (a run directory), the
    cluster starts on a copy of that run's durable state, so each restart recovers its log."""
    import shutil

    from seedance.real.launcher import LocalLauncher

    shutil.rmtree(run_dir, ignore_errors=True)
    if state_from is not None:
        for rank in range(nodes):
            shutil.copytree(state_from / f"node-{rank}" / "state", run_dir / f"node-{rank}" / "state")
    walls, cpus = [], []
    with LocalLauncher(protocol="raft", num_nodes=nodes, run_dir=run_dir, seed=seed, config={}) as launcher:
        launcher.start_all()
        launcher.wait_ready()
        for index in range(restarts):
            rank = index % nodes
            launcher.kill(rank)
            start = time.perf_counter()
            launcher.spawn(rank)
            deadline = start + 30.0
            while not launcher.ready(rank):
                launcher.raise_if_failed()
                if time.perf_counter() > deadline:
                    raise RuntimeError(f"node {rank} not ready 30 s after its restart; see {run_dir}")
                time.sleep(0.0005)
            walls.append(time.perf_counter() - start)
            cpu = process_cpu_s(launcher.nodes[rank].process.pid)
            if cpu is not None:
                cpus.append(cpu)
    return walls, cpus


def log_entries(state_dir: Path) -> int:
    """Entries in a Raft node's durable logs, read by the real storage (read-only: the state is left as it is)."""
    from seedance.models.protocols.registry import get
    from seedance.models.wire import Codec
    from seedance.real.storage import DiskStorage

    durable = DiskStorage(state_dir, Codec(get("raft").message_types)).load(read_only=True)
    return sum(len(log) for log in durable.logs.values())


def fit_recovery(empty: tuple[list[float], list[float]], populated: tuple[list[float], list[float]],
                 entries: float) -> dict[str, Any]:
    """``restart`` (wall) and ``restart_cpu`` from the restarts on an empty log, and ``recover_per_entry_s``: the
    restarts' extra CPU per recovered log entry on a populated one (medians; 0 when it was not larger)."""
    out: dict[str, Any] = {"restart": LogNormal.fit(empty[0])}
    if empty[1]:
        out["restart_cpu"] = LogNormal.fit(empty[1])
    if empty[1] and populated[1] and entries > 0:
        out["recover_per_entry_s"] = max(0.0, (float(np.median(populated[1])) - float(np.median(empty[1])))
                                         / entries)
    return out


def measure_entry_codec(entries: int = 64, repeats: int = 60) -> tuple[float, float]:
    """The frame path's CPU per Raft log entry carried, sending and receiving (s): an AppendEntries of ``entries``
    entries against an empty one through the real code (the protocol codec, then an authenticated
    :class:`~seedance.real.transport.Connection` over a real socket pair: msgpack, HMAC; and back), medians of
    ``repeats``. A catch-up batch of 256 entries costs milliseconds to encode and decode, which a cost per
    message cannot carry."""
    import asyncio

    from seedance.models.protocols.raft.messages import AppendEntries, command_entry
    from seedance.models.protocols.registry import get
    from seedance.models.wire import Codec
    from seedance.real.transport import Connection

    codec = Codec(get("raft").message_types)

    async def pair() -> tuple[Connection, Connection]:
        left, right = socket.socketpair()
        key = os.urandom(32)
        a = Connection(*await asyncio.open_connection(sock=left), key)
        b = Connection(*await asyncio.open_connection(sock=right), key)
        await asyncio.gather(a.handshake(), b.handshake())
        return a, b

    async def timed() -> tuple[float, float]:
        sender, receiver = await pair()
        try:
            costs = {}
            for n in (0, entries):
                batch = tuple(command_entry(3, 1, i, "write", "k1", 12345678 + i) for i in range(n))
                message = AppendEntries(term=3, leader_id=0, prev_log_index=10, prev_log_term=3, entries=batch,
                                        leader_commit=9)
                send, recv = [], []
                for _ in range(repeats):
                    began = time.thread_time_ns()
                    frame = sender.encode("m", 0, codec.encode(message))
                    send.append(time.thread_time_ns() - began)
                    began = time.thread_time_ns()
                    codec.decode(receiver.decode(frame[4:]).message)
                    recv.append(time.thread_time_ns() - began)
                costs[n] = (float(np.median(send)), float(np.median(recv)))
            return tuple(max(0.0, (costs[entries][i] - costs[0][i]) / entries / 1e9) for i in (0, 1))
        finally:
            sender.close()
            receiver.close()

    return asyncio.run(timed())


def measure_loopback(round_trips: int = 2000) -> list[float]:
    """One-way process-to-process latency samples (s) over TCP on 127.0.0.1."""
    return measure_loopback_with_cpu(round_trips)[0]


def measure_loopback_with_cpu(round_trips: int = 2000) -> tuple[list[float], float | None]:
    """One-way latency samples (s) over TCP on 127.0.0.1, and the CPU both ends spent per one-way trip (their
    send and receive syscalls, their loops: this thread's CPU plus the echo process's, over the timed trips), or
    None where the echo's CPU cannot be read."""
    echo = subprocess.Popen([sys.executable, "-c", _ECHO], stdout=subprocess.PIPE, text=True)
    try:
        port = int(echo.stdout.readline())  # type: ignore[union-attr]
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            message = b"p" * 64
            samples = []
            echo_before, mine_before = process_cpu_s(echo.pid), time.thread_time()
            for _ in range(round_trips):
                start = time.perf_counter()
                sock.sendall(message)
                got = 0
                while got < len(message):
                    got += len(sock.recv(65536))
                samples.append((time.perf_counter() - start) / 2)
            mine, echo_after = time.thread_time() - mine_before, process_cpu_s(echo.pid)
        cpu = None if echo_before is None or echo_after is None else (mine + echo_after - echo_before) / (
            2 * round_trips)
        return samples, cpu
    finally:
        echo.kill()
        echo.wait(timeout=10)


LOOPBACK_KEEP_MIN = 0.05  # the least share of the probe's one-way latency kept as latency


def loopback_beyond_cpu(samples: list[float], cpu_per_one_way_s: float | None) -> tuple[list[float], float]:
    """The one-way latency less the share of it that is the two ends' CPU (the nodes' frame I/O per item, fitted
    from their loops' busy periods' thread CPU, already charges the send and receive syscalls): every sample scaled
    by ``1 - cpu / mean`` (at least :data:`LOOPBACK_KEEP_MIN`), so the shape stays the probe's; and that share."""
    if not samples or cpu_per_one_way_s is None:
        return samples, 1.0
    keep = min(max(1.0 - cpu_per_one_way_s / float(np.mean(samples)), LOOPBACK_KEEP_MIN), 1.0)
    return [x * keep for x in samples], keep


def _machine_busy_s() -> float:
    """CPU seconds the whole machine has been busy (all cores; ``/proc/stat``), or NaN where unavailable."""
    try:
        fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    except (OSError, ValueError):
        return float("nan")
    # user .. steal (guest time is already in user), less idle and iowait; steal is capacity other VMs took
    return (sum(fields[:8]) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")


def _timer_slack(ns: int) -> int | None:
    """Set this thread's timer slack (Linux prctl); the previous value, or None where unavailable."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        before = libc.prctl(30, 0, 0, 0, 0)  # PR_GET_TIMERSLACK
        if before < 0 or libc.prctl(29, ns, 0, 0, 0) != 0:  # PR_SET_TIMERSLACK
            return None
        return int(before)
    except (OSError, AttributeError):
        return None


def measure_tenants(cycles: int = 1000, work_s: float = 100e-6, sleep_s: float = 300e-6) -> tuple[float, list[float]]:
    """Other tenants' busy cores, and how long they keep a core from a process shaped like a node (``cycles`` of
    ``work_s`` of CPU then a ``sleep_s`` sleep, about a node's duty cycle under load): the lateness samples (s) of
    its wake-ups beyond the quietest one. (A thread that only sleeps is woken at once by the scheduler, whatever
    the load, and would say nothing of what a process that also uses its share of CPU waits.)"""
    slack = _timer_slack(1)  # 1 ns: the kernel's timer slack (50 us by default) would hide short bursts
    busy0, own0, wall0 = _machine_busy_s(), time.process_time(), time.perf_counter()
    late = []
    try:
        for _ in range(cycles):
            until = time.thread_time() + work_s
            while time.thread_time() < until:
                pass
            start = time.perf_counter()
            time.sleep(sleep_s)
            late.append(time.perf_counter() - start - sleep_s)
    finally:
        if slack is not None:
            _timer_slack(slack)
    busy = (_machine_busy_s() - busy0 - (time.process_time() - own0)) / (time.perf_counter() - wall0)
    floor = min(late)
    return max(0.0, busy) if busy == busy else 0.0, [t - floor for t in late]


_SPEED_CHUNK = """
import select, sys, time, hmac
from hashlib import sha256
import msgpack
key, interval, out = b"k" * 32, float(sys.argv[1]), []
message = ["AppendEntries", 3, [[3, 1, 7, "write", "k1", 12345678, 48] for _ in range(3)], 41, 2, 40, 0]
while not select.select([sys.stdin], [], [], interval)[0]:  # until the parent closes stdin
    at, began = time.monotonic_ns(), time.thread_time_ns()
    for _ in range(30):  # a node's kind of work: encode, authenticate, decode, small dicts
        payload = msgpack.packb(message)
        hmac.new(key, payload, sha256).digest()
        decoded = msgpack.unpackb(payload)
        {i: decoded for i in range(8)}
    out.append(f"{at}:{time.thread_time_ns() - began}")
print(" ".join(out), flush=True)
"""


class SpeedMeter:
    """How fast this machine's cores run interpreted code while it is entered: a child process runs a fixed chunk
    of node-like work (msgpack, HMAC, dicts; ~0.2 ms) every ``interval_s`` and times each chunk's *thread CPU*,
    so waiting for a core does not count but a slower core does. On a virtual machine the cores' speed moves
    without any CPU showing as busy or stolen (here the same chunk took 5.1-9.6 ms of CPU per 2,000 iterations
    within one minute, in episodes of seconds); ``chunk_s`` is the median chunk, and the ratio of a run's to the
    profile's scales the profile's CPU times for that run (a condition of the machine, like its tenants, not an
    outcome of the run: the chunk's work is fixed). About 0.5 % of one core.

    Each chunk is stamped with the monotonic clock (system-wide) when it began, so a run's reading can be taken
    over its load alone (:meth:`within`): the chunks while the run's processes start (imports, connections, the
    election) ran 15-40 % slower than under the load that followed, and in a 1 s run they were half of all."""

    def __init__(self, interval_s: float = 0.05) -> None:
        self.interval_s = interval_s
        self.chunks_s: list[float] = []
        self.stamps_s: list[float] = []  # time.monotonic() when each chunk began
        self._proc: subprocess.Popen[str] | None = None

    @property
    def chunk_s(self) -> float | None:
        return float(np.median(self.chunks_s)) if self.chunks_s else None

    def within(self, window: Sequence[float] | None) -> list[float]:
        """The chunks that began inside ``window`` (monotonic start, end; a run's ``load_window_monotonic_s``); all
        of them when no window is given or none fell inside it (a run shorter than the meter's interval)."""
        if not window:
            return list(self.chunks_s)
        start, end = window
        inside = [c for c, t in zip(self.chunks_s, self.stamps_s) if start <= t <= end]
        return inside or list(self.chunks_s)

    def __enter__(self) -> SpeedMeter:
        self._proc = subprocess.Popen([sys.executable, "-c", _SPEED_CHUNK, str(self.interval_s)],
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        return self

    def __exit__(self, *exc: Any) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        try:
            out, _ = proc.communicate(input="", timeout=10)
            pairs = [item.split(":") for item in out.split()]
            self.stamps_s = [int(at) / 1e9 for at, _ in pairs]
            self.chunks_s = [int(took) / 1e9 for _, took in pairs]
        except (subprocess.TimeoutExpired, ValueError):
            proc.kill()
            proc.wait()


class TenantMeter:
    """Other tenants' busy cores while it is entered: the machine's busy CPU less this process tree's (sampled every
    0.1 s by a thread, so children that come and go are counted; a child's last 0.1 s before it exits is not)."""

    def __init__(self, interval_s: float = 0.1) -> None:
        self.interval_s = interval_s
        self.busy_cores: float | None = None
        self._ours: dict[int, tuple[float, float]] = {}  # pid -> (first seen CPU or 0 if born after start, last)
        self._stop = None
        self._thread = None

    def _sample(self, first: bool) -> None:
        import psutil

        me = psutil.Process()
        for proc in [me, *me.children(recursive=True)]:
            try:
                times = proc.cpu_times()
            except psutil.Error:
                continue
            cpu = times.user + times.system
            base = self._ours.get(proc.pid, (cpu if first else 0.0, cpu))[0]
            self._ours[proc.pid] = (base, cpu)

    def __enter__(self) -> TenantMeter:
        import threading

        self._stop = threading.Event()
        self._busy0, self._wall0 = _machine_busy_s(), time.perf_counter()
        self._sample(first=True)

        def loop() -> None:
            while not self._stop.wait(self.interval_s):  # type: ignore[union-attr]
                self._sample(first=False)

        self._thread = threading.Thread(target=loop, daemon=True, name="tenant-meter")
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()  # type: ignore[union-attr]
        self._thread.join()  # type: ignore[union-attr]
        self._sample(first=False)
        ours = sum(last - base for base, last in self._ours.values())
        busy = (_machine_busy_s() - self._busy0 - ours) / max(time.perf_counter() - self._wall0, 1e-9)
        self.busy_cores = max(0.0, busy) if busy == busy else None


def calibrate_tenants(profile: HostProfile, *, real_ops_s: float, nodes: int, clients: int, duration_s: float,
                      steps: int = 8) -> HostProfile:
    """Fit the tenants' ``share`` (0..1.5) so the simulator reproduces the profile run's own throughput (the fitted
    configuration only; bisection: the simulated throughput falls as the share grows). The meter sees what the
    other tenants used; how much of it kept cores from this host's processes depends on the scheduler's fair share
    while both wanted them, which only the run shows. A machine without other tenants (under 0.1 busy cores) is
    left as it is."""
    import dataclasses

    from seedance.analysis.sim_vs_real import Config, predict, run_lead_s

    tenants = profile.tenants
    lead = run_lead_s(profile.measured.get("raft_run"))  # the profile run's nodes ran this long before its load
    if tenants is None or tenants.busy_cores < 0.1 or not real_ops_s:
        return profile

    def shared(share: float) -> HostProfile:
        return dataclasses.replace(profile, tenants=TenantProfile(tenants.busy_cores, tenants.slice, share))

    lo, hi = 0.0, 1.5
    for _ in range(steps):
        mid = (lo + hi) / 2
        predicted = predict("raft", nodes, Config(clients), duration_s, 1, shared(mid), lead)["throughput_ops_s"]
        lo, hi = (mid, hi) if predicted > real_ops_s else (lo, mid)
    share = (lo + hi) / 2
    out = shared(share)
    sim_ops = predict("raft", nodes, Config(clients), duration_s, 1, out, lead)["throughput_ops_s"]
    return dataclasses.replace(out, measured={**profile.measured, "tenant_calibration": {
        "share": share, "real_ops_s": real_ops_s, "sim_ops_s": sim_ops}})


def calibrate_cpu(profile: HostProfile, *, real_ops_s: float, nodes: int, clients: int, duration_s: float,
                  steps: int = 8) -> HostProfile:
    """Scale the profile's CPU times (:meth:`HostProfile.scaled_cpu`) by the one factor at which the simulator
    reproduces the profile run's own throughput: the experiment's anchor (:func:`seedance.analysis.sim_vs_real.
    anchor_cpu`) on the profile's own run, after the tenants' share, which does so only on a machine with other
    tenants to share it with. The CPU samples are the runs' own, but what the model makes of them (the cores'
    sharing, the hand-offs between processes) left a profile 0.8-1.04 of its own run's throughput on this machine
    (the median run of three 3 s runs; one 1 s run: 0.8); calibrated, a profile used without an experiment's
    anchor (``sim run --host-profile``) starts from its own run. The factor and both throughputs are recorded in
    ``measured.cpu_calibration``."""
    import dataclasses

    from seedance.analysis.sim_vs_real import Config, anchor_cpu, predict, run_lead_s

    if not real_ops_s:
        return profile
    config = Config(clients)
    lead = run_lead_s(profile.measured.get("raft_run"))
    before = predict("raft", nodes, config, duration_s, 1, profile, lead)["throughput_ops_s"]
    anchor = anchor_cpu([{"config": config.name, "held_out": False, "round": 0, "real_ops_s": real_ops_s,
                          "real_tenant_cores": None, "sim_ops_s": before, "real_lead_s": lead}],
                        profile, protocol="raft", nodes=nodes, configs=[config], duration_s=duration_s, steps=steps)
    return dataclasses.replace(profile.scaled_cpu(anchor["factor"]), measured={**profile.measured, "cpu_calibration": {
        "factor": anchor["factor"], "real_ops_s": real_ops_s, "sim_ops_s_before": before,
        "sim_ops_s": anchor["sim_ops_s"]}})


SPELL_ELASTICITY_STEP = 1.2  # the CPU scale the spells' calibration compares with 1 (the latency's elasticity)


def calibrate_spell(profile: HostProfile, real: Any, *, nodes: int, clients: int, duration_s: float,
                    seed: int = 1) -> HostProfile:
    """Fit the host's slow spells (``spell``) to the profile runs' own latency windows (``real``: their pooled
    :class:`seedance.analysis.spells.WindowStats`). The simulator's own windows vary a little too (the protocol's
    batching), so only the variance beyond that is the spells'; and a spell scales CPU, not an fsync's wall time,
    so the latency moves as ``g ** e``, with ``e`` the simulated latency's elasticity to a CPU scale (the fitted
    configuration at 1 and at :data:`SPELL_ELASTICITY_STEP`). The window correlation gives the spells' time
    (:func:`seedance.models.host.fit_spell`). A last simulated run with the fitted spells checks them against the
    real windows (recorded in ``measured.spells``). No spells (left out) when the real windows vary no more than
    the simulator's own (the median over three seeds), or neighbouring windows do not agree."""
    import dataclasses

    from seedance.analysis.sim_vs_real import Config, predict, run_lead_s
    from seedance.models.host import fit_spell

    lead = run_lead_s(profile.measured.get("raft_run"))

    def simulated(host: HostProfile, at: int = seed) -> dict[str, Any]:  # throughput, p50, p99, the windows' sd
        return predict("raft", nodes, Config(clients), duration_s, at, host, lead)

    record: dict[str, Any] = {"real": None if real is None else real.to_dict()}
    spell = None
    if real is not None and real.sd > 0 and real.rho == real.rho and real.rho > 0:
        own = simulated(profile)
        p50, slower = own["latency_ms_p50"], simulated(profile.scaled_cpu(SPELL_ELASTICITY_STEP))["latency_ms_p50"]
        elasticity = math.log(slower / p50) / math.log(SPELL_ELASTICITY_STEP) if p50 and slower else 1.0
        elasticity = min(max(elasticity, 0.2), 1.5)
        # the simulator's own windows' sd: the median of three seeds, since one run's rare stall (a 130 ms
        # collection in the client process) can lift its sd from 0.03 to 0.28 and hide the spells
        own_sd = float(np.median([(run["window_sd"] or 0.0) for run in
                                  (own, simulated(profile, seed + 1), simulated(profile, seed + 2))]))
        beyond = math.sqrt(max(real.sd ** 2 - own_sd ** 2, 0.0))
        spell = fit_spell(beyond, real.rho, WINDOW_S, elasticity)
        record.update({"simulated_own_sd": own_sd, "elasticity": elasticity, "beyond_sd": beyond})
        if spell is not None:
            check = simulated(dataclasses.replace(profile, spell=spell))
            record["simulated_with_spell"] = {"sd": check["window_sd"], "rho": check["window_rho"]}
    record["fitted"] = None if spell is None else asdict(spell)
    return dataclasses.replace(profile, spell=spell, measured={**profile.measured, "spells": record})


def fit_connects(samples: list[float]) -> dict[str, LogNormal | None]:
    """``connect`` and ``accept`` from the set-up times of connections opened at once (the clients' first requests):
    the k-th fastest took about base + k * accept (least squares over the sorted times, both >= 0); ``connect`` is
    the spread of the base (the times less their queueing), ``accept`` the serial part per set-up."""
    if not samples:
        return {"connect": None, "accept": None}
    times = np.sort(np.asarray(samples, dtype=float))
    if times.size < 3:
        return {"connect": LogNormal.fit(times), "accept": None}
    rank = np.arange(times.size, dtype=float)
    slope, _ = np.polyfit(rank, times, 1)
    accept = max(0.0, float(slope))
    return {"connect": LogNormal.fit(np.maximum(times - accept * rank, 1e-6)), "accept": LogNormal(accept)}


def measure_handoff(round_trips: int = 1000) -> list[float]:
    """Round-trip latency samples (s): an idle asyncio loop hands a no-op to a one-thread executor and gets the
    result back (as the real runtime's fsync path does: loop -> storage thread -> loop)."""
    import asyncio
    from concurrent.futures import ThreadPoolExecutor

    async def probe() -> list[float]:
        loop = asyncio.get_running_loop()
        samples = []
        with ThreadPoolExecutor(1) as pool:
            await asyncio.wrap_future(pool.submit(int))  # the thread exists before the first sample
            for _ in range(round_trips):
                await asyncio.sleep(0.0002)  # the loop and the thread go idle between samples, as between fsyncs
                start = time.perf_counter()
                await asyncio.wrap_future(pool.submit(int), loop=loop)
                samples.append(time.perf_counter() - start)
        return samples

    return asyncio.run(probe())


_TICKER = r"""
import socket, sys, time
sock = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
for _ in range(int(sys.argv[2])):
    sock.sendall(b"w" * 64)
    time.sleep(float(sys.argv[3]))
sock.close()
"""


def measure_wake(wakeups: int = 500, gap_s: float = 0.0005) -> list[float]:
    """A direct probe of the wake-up cost, apart from any load: the loop-thread CPU samples (s) of the busy periods
    of an idle asyncio loop woken by one 64-byte message at a time over TCP on 127.0.0.1 (another process sends one
    every ``gap_s``), with a protocol callback that does nothing: the select's return, the event dispatch, the
    socket read and the way back to select (:class:`seedance.real.runtime.BusyPeriods`, as in the profile run)."""
    import asyncio

    from seedance.real.runtime import BusyPeriods

    async def probe() -> list[float]:
        loop = asyncio.get_running_loop()
        busy = BusyPeriods(loop)
        closed = loop.create_future()

        class Count(asyncio.Protocol):
            def data_received(self, data: bytes) -> None:
                busy.items += 1

            def connection_lost(self, exc: Exception | None) -> None:
                if not closed.done():
                    closed.set_result(None)

        server = await loop.create_server(Count, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        sender = await asyncio.create_subprocess_exec(sys.executable, "-c", _TICKER, str(port), str(wakeups),
                                                      str(gap_s))
        try:
            await asyncio.wait_for(closed, 60.0)
        finally:
            if sender.returncode is None:
                sender.kill()
            await sender.wait()
            server.close()
        return [p[0] / 1e9 for p in busy.periods[1:] if p[1] == 1]  # the first may hold the set-up

    return asyncio.run(probe())


def fit_amortisation(periods: list[Any]) -> tuple[float, float]:
    """``(wake_s, per_item_s)`` of busy periods ``(cpu_ns, items, ...)``: CPU = wake + per_item * items, by
    non-negative least squares weighted by 1 / items; (0, mean CPU per item) when there are too few periods."""
    from scipy.optimize import nnls

    data = np.asarray([p[:2] for p in periods if p[1] > 0], dtype=float).reshape(-1, 2)
    if len(data) < 10 or len(np.unique(data[:, 1])) < 2:
        return 0.0, float(data[:, 0].sum() / max(data[:, 1].sum(), 1) / 1e9) if len(data) else 0.0
    cpu, items = data[:, 0] / 1e9, data[:, 1]
    weight = 1.0 / np.sqrt(items)
    (wake, per_item), _ = nnls(np.column_stack([np.ones_like(items), items]) * weight[:, None], cpu * weight)
    return float(wake), float(per_item)


def fit_amortisation_by_kind(periods: list[Any], wake_s: float | None = None) -> dict[str, Any] | None:
    """The busy periods' CPU as ``wake + sum over kinds of cost_k * items_k`` (non-negative least squares, weighted
    by 1 / items as :func:`fit_amortisation`): a check of the pooled fit, whose per-item cost is one average over
    every kind, so a mix of cheap and costly items at different loads can move CPU into ``wake``. Kinds that never
    occur are left out; None without kind counts (an older runtime) or with too few periods. With ``wake_s`` given
    (the direct probe's, :func:`measure_wake`), only the costs per kind are fitted, to what the periods leave."""
    from scipy.optimize import nnls

    rows = [(p[0], p[1], p[4]) for p in periods if len(p) > 4 and p[1] > 0]
    if len(rows) < 10:
        return None
    cpu = np.asarray([r[0] for r in rows], dtype=float) / 1e9
    items = np.asarray([r[1] for r in rows], dtype=float)
    kinds = np.asarray([r[2] for r in rows], dtype=float)
    used = [k for k in range(kinds.shape[1]) if kinds[:, k].any()]
    weight = 1.0 / np.sqrt(items)
    if wake_s is None:
        design = np.column_stack([np.ones_like(items), kinds[:, used]])
        coef, _ = nnls(design * weight[:, None], cpu * weight)
    else:
        per_kind, _ = nnls(kinds[:, used] * weight[:, None], (cpu - wake_s) * weight)
        coef = np.concatenate([[wake_s], per_kind])
    return {"wake_s": float(coef[0]), "per_kind_s": {ITEM_KINDS[k]: float(c) for k, c in zip(used, coef[1:])},
            "items": {ITEM_KINDS[k]: int(kinds[:, k].sum()) for k in used}}


STALL_FACTOR = 20.0  # an fsync this many times its kind's median is held by the device's stall, not its service


def split_stalls(syncs: Sequence[Sequence[int]], seconds: float, exclude: set[int] | frozenset[int] = frozenset(),
                 ) -> tuple[set[int], DiskStallProfile | None, dict[str, Any]]:
    """The shared disk's stalls in the profile runs' fsyncs (every node's ``syncs`` records, pooled; their end on
    the monotonic clock that every process shares): an fsync over :data:`STALL_FACTOR` times the median of its kind
    (within the file's last block, or allocating a new one) was held by the device; such fsyncs whose intervals
    overlap, of any node, are one stall, as long as their union. Here 7 of 17,153 fsyncs took 39-94 ms against a
    median of 0.34 ms and a 99.9th percentile of 2.1 ms: three stalls, two of them seen by all three nodes at once.
    Returns the records' indices that a stall held (the service-time fits leave them out), the stalls as a process
    (``seconds``: the runs' load time; None where the records have no clock, an older runtime) and a record."""
    timed = [i for i, s in enumerate(syncs) if len(s) > 6 and s[2] > 0 and s[6] > 0]
    if not timed or seconds <= 0:
        return set(), None, {"events": None}
    medians = {}
    for grow in (False, True):
        walls = [syncs[i][2] for i in timed if bool(syncs[i][4]) == grow]
        if walls:
            medians[grow] = float(np.median(walls))
    stalled = sorted((syncs[i][6] - syncs[i][2], syncs[i][6], i) for i in timed
                     if syncs[i][2] > STALL_FACTOR * medians[bool(syncs[i][4])] and i not in exclude)
    events: list[list[float]] = []  # [begin, end] in ns, merged where they overlap
    for begin, end, _ in stalled:
        if events and begin <= events[-1][1]:
            events[-1][1] = max(events[-1][1], end)
        else:
            events.append([begin, end])
    durations = tuple(float((end - begin) / 1e9) for begin, end in events)
    record = {"events": len(events), "fsyncs_held": len(stalled), "seconds": float(seconds),
              "durations_s": list(durations), "factor": STALL_FACTOR,
              "medians_s": {("grow" if k else "within"): v / 1e9 for k, v in medians.items()}}
    return ({i for _, _, i in stalled}, DiskStallProfile(len(events) / seconds, durations) if events else None,
            record)


def measure_cpu(work_dir: Path, *, nodes: int, clients: int, duration_s: float, seed: int, runs: int = 1,
                wake_probe_s: float | None = None) -> dict[str, Any]:
    """Handler CPU samples per input kind, frame I/O per input and client CPU per op, from ``runs`` real Raft runs
    (seeds ``seed``, ``seed + 1``, ...), pooled: one run's luck (which processes shared a core, the machine's other
    work during its few seconds) is not the model's. ``summary`` is the run of median throughput; ``runs`` lists
    every run's throughput and latencies."""
    from seedance.real.clients import CLIENT_PROFILE_ENV, Workload
    from seedance.real.run import run_real
    from seedance.real.runtime import CPU_PROFILE_ENV

    handler: dict[str, list[float]] = {k: [] for k in KINDS}
    periods: list[Any] = []
    syncs: list[Any] = []
    held: set[int] = set()  # the fsync records a collection of their process held (gc_held)
    client_periods: list[Any] = []
    connects: list[float] = []
    summaries: list[dict[str, Any]] = []
    tenant_cores: list[float] = []
    other_threads_s = 0.0  # CPU of the nodes' threads other than the loop (the storage thread's writes and fsyncs)
    # older-generation garbage collections, for the nodes and the client process: [pause samples (s), items handled,
    # processes: each one's (items handled, its collections in order as (generation, s))]
    gcs: dict[str, list[Any]] = {"node": [[], 0, []], "client": [[], 0, []]}
    chunks: list[float] = []  # the speed meter's chunks during the runs (SpeedMeter)
    windows: list[Any] = []  # each run's latency windows (the slow spells: seedance.analysis.spells)
    carried: dict[str, int] = {}  # messages received / sent and the log entries they carried
    for index in range(runs):
        run_dir = work_dir / ("raft" if runs == 1 else f"raft-{index}")
        client_file = work_dir / f"client-profile-{index}.json"
        client_file.unlink(missing_ok=True)
        before = os.environ.get(CLIENT_PROFILE_ENV)
        os.environ[CLIENT_PROFILE_ENV] = str(client_file)  # this process runs the clients
        try:
            with TenantMeter() as meter, SpeedMeter() as speed:
                summary = run_real(protocol="raft", nodes=nodes, clients=clients, duration_s=duration_s,
                                   seed=seed + index, out=run_dir,
                                   workload=Workload(num_clients=clients, read_fraction=0.0, cas_fraction=0.0),
                                   check=False, extra_env={CPU_PROFILE_ENV: "1"}, trace=False)
        finally:
            if before is None:
                os.environ.pop(CLIENT_PROFILE_ENV, None)
            else:
                os.environ[CLIENT_PROFILE_ENV] = before
        summaries.append(summary)
        windows.append(run_windows(run_dir / "history.jsonl"))
        chunks.extend(speed.within(summary.get("load_window_monotonic_s")))  # the load's, not the start-up's
        if meter.busy_cores is not None:
            tenant_cores.append(meter.busy_cores)
        for path in sorted(run_dir.glob("node-*/cpu-profile-*.json")):
            data = json.loads(path.read_text())
            if "process_cpu_ns" in data:
                other_threads_s += max(0, data["process_cpu_ns"] - data["loop_cpu_ns"]) / 1e9
            periods.extend(data.get("busy_periods", []))
            pauses = (data.get("gc") or {}).get("pauses", [])
            held.update(len(syncs) + i for i in gc_held(data.get("syncs", []), pauses))
            syncs.extend(data.get("syncs", []))
            _add_gc(gcs["node"], data)
            for key, value in (data.get("carried") or {}).items():
                carried[key] = carried.get(key, 0) + int(value)
            for kind, samples in data["handler_ns"].items():
                handler.setdefault(kind, []).extend(s / 1e9 for s in samples)
        client_data = json.loads(client_file.read_text()) if client_file.exists() else {}
        client_periods.extend(client_data.get("busy_periods", []))
        _add_gc(gcs["client"], client_data)
        connects.extend(client_data.get("connects_s", []))
    gc_source = "cpu-profile runs"
    plain = plain_gc(work_dir / "raft-gc", nodes=nodes, clients=clients, duration_s=duration_s, seed=seed + runs)
    if plain is not None:
        gcs["node"], gc_source = plain, "an unprofiled run"
    ordered = sorted(summaries, key=lambda r: r.get("throughput_ops_s") or 0.0)
    summary = ordered[(len(ordered) - 1) // 2]
    stalled, disk_stalls, stall_record = split_stalls(syncs, runs * duration_s, held)
    stall_record["gc_held_fsyncs"] = len(held)
    stalled |= held  # neither a service time nor a stall: the collections are drawn apart
    wake, per_item = fit_amortisation(periods)
    by_kind = fit_amortisation_by_kind(periods)
    by_kind_probed = fit_amortisation_by_kind(periods, wake_s=wake_probe_s) if wake_probe_s is not None else None
    client_wake, client_per_op = fit_amortisation(client_periods)
    items = np.asarray([p[1] for p in periods], dtype=float)
    client_items = np.asarray([p[1] for p in client_periods], dtype=float)
    return {"handler": handler, "wake_s": wake, "io_per_input_s": per_item, "client_wake_s": client_wake,
            "client_per_op_s": client_per_op, "summary": summary, "connects_s": connects,
            "runs": [{k: r.get(k) for k in RUN_FIELDS} for r in summaries],
            "inputs": sum(len(v) for v in handler.values()),
            # the run's fsyncs, within the files' last blocks and allocating a new one (older runtimes: all within),
            # less those the shared device's stalls held (split_stalls: drawn as stalls, not as a service time)
            "fsync_s": [s[2] / 1e9 for i, s in enumerate(syncs)
                        if len(s) > 2 and s[2] > 0 and not (len(s) > 4 and s[4]) and i not in stalled],
            "fsync_grow_s": [s[2] / 1e9 for i, s in enumerate(syncs)
                             if len(s) > 4 and s[2] > 0 and s[4] and i not in stalled],
            "disk_stalls": disk_stalls, "disk_stall_record": stall_record,
            # from the storage thread holding the lock after its write to the loop running the completion
            "handback_s": [s[1] / 1e9 for i, s in enumerate(syncs) if s[1] > 0 and i not in held],
            # from the loop's submit to the storage thread running the job (its wake-up, the lock)
            "handover_s": [s[5] / 1e9 for i, s in enumerate(syncs) if len(s) > 5 and s[5] > 0 and i not in held],
            "tenant_cores": float(np.mean(tenant_cores)) if tenant_cores else None,
            "gc": {who: {"pauses_s": pauses, "items": items, "processes": processes}
                   for who, (pauses, items, processes) in gcs.items()},
            "gc_source": gc_source,
            "cpu_chunk_s": float(np.median(chunks)) if chunks else None,
            "windows": pooled(windows),
            "carried": carried,
            "sync_cpu_s": other_threads_s / len(syncs) if syncs else None,
            "busy_periods": {"node": len(periods), "node_items_mean": float(items.mean()) if items.size else None,
                             "node_pooled": {"wake_s": wake, "per_item_s": per_item},
                             **({"node_by_kind": by_kind} if by_kind else {}),
                             **({"node_by_kind_probed_wake": by_kind_probed} if by_kind_probed else {}),
                             "client": len(client_periods),
                             "client_items_mean": float(client_items.mean()) if client_items.size else None},
            "group_commit": {"syncs": len(syncs),
                             "group_mean": float(np.mean([s[0] for s in syncs])) if syncs else None,
                             "handoff_median_s": float(np.median([s[1] for s in syncs]) / 1e9) if syncs else None,
                             # the first half under load: submitted -> the storage thread runs the job (the lock
                             # and a core), its 10th / 50th / 90th / 99th percentiles (s); beside the model, which
                             # draws the idle probe's half and waits for the lock itself
                             **({"handover_quantiles_s": [float(q) / 1e9 for q in np.quantile(
                                 [s[5] for s in syncs], [0.1, 0.5, 0.9, 0.99])]}
                                if syncs and all(len(s) > 5 for s in syncs) else {}),
                             # the storage thread's CPU inside the timed write + fsync (already in the fsync's wall
                             # time), per fsync: how much of sync_cpu overlaps the wait rather than preceding it
                             **({"cpu_in_fsync_mean_s": float(np.mean([s[3] for s in syncs]) / 1e9)}
                                if syncs and all(len(s) > 3 for s in syncs) else {})}}


def plain_gc(run_dir: Path, *, nodes: int, clients: int, duration_s: float, seed: int) -> list[Any] | None:
    """The nodes' older-generation collections in a run without the CPU profile (``GC_PROFILE_ENV``: only the
    collections and the items handled are recorded), pooled as :func:`_add_gc` does; None if none was recorded.

    The CPU profile's own records make its processes collect more often and longer: measured here at 8 clients,
    a profiled leader (21k items in 3 s) had 65 young collections, 6 of generation 1 and a 12 ms full one, an
    unprofiled leader (22k items) 20 young, 2 of generation 1 and no full one; its followers 34-36 young and 3
    older against 20-21 and 2. The simulator drew the profiled rate and the full collection, one stall of all
    clients per simulated 3 s leader that the experiment's real runs never had. So the nodes' collections come from
    this run, which allocates as every other real run does."""
    from seedance.real.clients import Workload
    from seedance.real.run import run_real
    from seedance.real.runtime import GC_PROFILE_ENV

    run_real(protocol="raft", nodes=nodes, clients=clients, duration_s=duration_s, seed=seed, out=run_dir,
             workload=Workload(num_clients=clients, read_fraction=0.0, cas_fraction=0.0), check=False,
             extra_env={GC_PROFILE_ENV: "1"}, trace=False)
    pooled: list[Any] = [[], 0, []]
    for path in sorted(run_dir.glob("node-*/gc-profile-*.json")):
        _add_gc(pooled, json.loads(path.read_text()))
    return pooled if pooled[1] > 0 else None


def run_windows(history: Path) -> Any:
    """A real run's latency windows (:func:`seedance.analysis.spells.latency_windows`), None without a history."""
    from seedance.history.events import read_jsonl
    from seedance.analysis.spells import history_windows

    return history_windows(read_jsonl(history)) if history.exists() else None


def _add_gc(into: list[Any], data: dict[str, Any]) -> None:
    """Pool one process's recorded collections (``seedance.real.runtime.GcPauses``) into [pauses (s), items,
    processes]: the process itself is one more (items handled, its collections in order as (generation, s))."""
    recorded = data.get("gc")
    if recorded and data.get("items"):
        into[0].extend(p[1] / 1e9 for p in recorded.get("pauses", []))
        into[1] += int(data["items"])
        into[2].append((int(data["items"]), [(int(p[0]), p[1] / 1e9) for p in recorded.get("pauses", [])]))


def gc_held(syncs: Sequence[Sequence[int]], pauses: Sequence[Sequence[int]]) -> set[int]:
    """The indices of one process's fsync records (``seedance.real.runtime.Runtime._synced``) whose span, from the
    loop's submit to the loop having the result, overlaps one of its own older-generation collections
    (``GcPauses``: generation, wall ns, start ns; older records without the start: none). The simulator draws the
    collections apart (``gc``); a hand-over, a write + fsync or a hand-back that a collection held (the thread
    needs the interpreter's lock before and after its syscall) would otherwise draw it a second time, in these
    distributions' tails: a profiled leader's 12 ms full collection had put the hand-over's largest quantile at
    12.5-15 ms, and the simulator then stalled every client 10-17 ms one to three times per 3 s run."""
    spans = sorted((p[2], p[2] + p[1]) for p in pauses if len(p) > 2 and p[2] > 0)
    if not spans:
        return set()
    held = set()
    for i, s in enumerate(syncs):
        if len(s) < 7 or s[6] <= 0:
            continue
        begin, end = s[6] - s[2] - s[5], s[6] + s[1]
        if any(b < end and begin < e for b, e in spans):
            held.add(i)
    return held


def _entry_costs(send_s: float, recv_s: float, carried: dict[str, int]) -> EntryCosts | None:
    """Per-entry costs with the profile run's mean entries per message (received, sent) as their zero point."""
    if not carried.get("messages_in") or not carried.get("messages_out"):
        return None
    return EntryCosts(send_s=send_s, recv_s=recv_s, mean_in=carried["entries_in"] / carried["messages_in"],
                      mean_out=carried["entries_out"] / carried["messages_out"])


def fit_gc(pauses_s: list[float], items: int,
           processes: list[tuple[int, list[tuple[int, float]]]] | None = None) -> GcProfile | None:
    """A process kind's older-generation collections: their rate per handled item and their pauses' quantiles;
    None when none were recorded.

    With ``processes`` (each process's items handled and its collections in order, as (generation, s)) in which a
    full collection (generation 2) ran, those are apart (:class:`GcProfile`). Every profile run here: each leader
    handled 16-19k items and had 4-7 older collections, the 6th (when it came) its one full one, 14-20 ms against
    0.5-3.8 ms; each follower handled ~3k items and had 3. So a process makes a few collections whatever it handles
    (its start) and then more per item: a line ``collections = start + rate x items`` fitted over the processes
    (least squares) gives the per-item ``rate``, and the first full collection is the ``(position - start)``-th
    of those drawn per item. One rate pooled over all of them (collections / items) had the simulated leader
    collect ~1.6x as often as the real one, and so reach its full collection early; its full ones fell on
    followers and on restarted nodes as often as on a long-lived leader. The period between full collections is
    the interpreter's (generation 2 runs once ``threshold2`` generation-1 collections have passed: 12 for the
    default thresholds; the nodes run this interpreter)."""
    if not pauses_s or items <= 0:
        return None
    pooled = GcProfile(min(1.0, len(pauses_s) / items), Empirical.fit(pauses_s))
    processes = [(n, seq) for n, seq in (processes or []) if n > 0]
    fulls = [s for _, seq in processes for gen, s in seq if gen >= 2]
    young = [s for _, seq in processes for gen, s in seq if gen < 2]
    counts = np.array([len(seq) for _, seq in processes], dtype=float)
    handled = np.array([n for n, _ in processes], dtype=float)
    if not fulls or not young or len(processes) < 2 or np.ptp(handled) <= 0:
        return pooled
    slope, start = np.polyfit(handled, counts, 1)
    if slope <= 0:
        return pooled
    import gc

    firsts = [next(i for i, (gen, _) in enumerate(seq) if gen >= 2) + 1
              for _, seq in processes if any(gen >= 2 for gen, _ in seq)]
    first = max(1, int(round(float(np.median(firsts)) - max(0.0, float(start)))))
    return GcProfile(min(1.0, float(slope)), Empirical.fit(young), Empirical.fit(fulls), first,
                     gc.get_threshold()[2] + 2)


def _sync_cpus(total_s: float | None, inside_s: float | None) -> dict[str, LogNormal | None]:
    """``sync_cpu`` (before the fsync's wait) and ``fsync_cpu`` (inside it) from the storage thread's CPU per fsync
    and the part of it measured inside the timed write + fsync (absent: all of it before, as older profiles)."""
    if total_s is None:
        return {"sync_cpu": None}
    if inside_s is None:
        return {"sync_cpu": LogNormal(total_s)}
    inside = min(inside_s, total_s)
    return {"sync_cpu": LogNormal(total_s - inside), "fsync_cpu": LogNormal(inside)}


def profile_host(work_dir: Path, *, nodes: int = 3, clients: int = 8, duration_s: float = 3.0,
                 seed: int = 1, runs: int = RUNS) -> HostProfile:
    """Measure everything (see the module docstring) and fit the profile."""
    work_dir = Path(work_dir)
    facts = machine_facts(work_dir)
    fsync_samples, bandwidth = measure_fsync(work_dir)
    loopback_wall, loopback_cpu = measure_loopback_with_cpu()
    loopback, loopback_kept = loopback_beyond_cpu(loopback_wall, loopback_cpu)
    handoff = measure_handoff()
    tenants_busy, tenant_slices = measure_tenants()
    wake_probe = measure_wake()
    write_walls, write_cpus = measure_write(work_dir)
    probe_within, probe_grow, block = measure_fsync_grow(work_dir)
    entry_send_s, entry_recv_s = measure_entry_codec()
    restarts = restart_samples(work_dir / "restart-probe", nodes=nodes, seed=seed)
    cpu = measure_cpu(work_dir, nodes=nodes, clients=clients, duration_s=duration_s, seed=seed, runs=runs,
                      wake_probe_s=float(np.median(wake_probe)) if wake_probe else None)
    summary = cpu["summary"]
    # restarts again, on a copy of the first CPU run's durable state: what recovering a log costs per entry
    first_run = work_dir / ("raft" if runs == 1 else "raft-0")
    entries = float(np.mean([log_entries(first_run / f"node-{r}" / "state") for r in range(nodes)]))
    recovering = restart_samples(work_dir / "recovery-probe", nodes=nodes, restarts=nodes, seed=seed,
                                 state_from=first_run)
    recovery = fit_recovery(restarts, recovering, entries)
    by_kind = cpu["busy_periods"].get("node_by_kind")
    fsync_grow, grow_source = fsync_grow_kind(cpu["fsync_s"], cpu["fsync_grow_s"], probe_within, probe_grow)
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    from seedance.real.runtime import RECONNECT_S

    profile = HostProfile(
        cores=cores,
        cpu={k: LogNormal.fit(v) for k, v in cpu["handler"].items() if k in KINDS},
        io_per_input=LogNormal(cpu["io_per_input_s"]),
        # by kind where the runtime recorded kinds (the wake-up apart from items of different cost), else pooled
        wake=LogNormal(by_kind["wake_s"] if by_kind else cpu["wake_s"]),
        io_per_kind={k: LogNormal(v) for k, v in by_kind["per_kind_s"].items()} if by_kind else None,
        client_wake=LogNormal(cpu["client_wake_s"]),
        handoff=LogNormal.fit(handoff),
        # ... whose second half, under the run's load, is the run's own (the lock's handover, the loop's turns)
        handback=Empirical.fit(cpu["handback_s"]) if len(cpu["handback_s"]) >= 50 else None,
        # ... and its first half too: the loop's submit to the thread running the write (the idle probe's half is
        # ~17 us; under the run's load 74-119 us at the median)
        handover=Empirical.fit(cpu["handover_s"]) if len(cpu["handover_s"]) >= 50 else None,
        # the other tenants during the profile run (as sim-vs-real measures them during each of its runs); the probe
        # alone (its own busy cores recorded in measured) gives their bursts' shape
        tenants=TenantProfile(cpu["tenant_cores"] if cpu["tenant_cores"] is not None else tenants_busy,
                              LogNormal.fit(tenant_slices)),
        **fit_connects(cpu["connects_s"]),
        # the storage thread's CPU per fsync: the part inside the timed write + fsync holds a core during the wait
        # (it is inside the fsync's wall time), the rest precedes it
        **_sync_cpus(cpu["sync_cpu_s"], cpu["group_commit"].get("cpu_in_fsync_mean_s")),
        # the fsyncs of the profile run itself (every node's storage thread: write and fsync, three processes on
        # one disk as in every run), as their measured quantiles (the tail sets the run's p99); the probe's, taken
        # alone, only where the run recorded none
        fsync=Empirical.fit(cpu["fsync_s"]) if cpu["fsync_s"] else LogNormal.fit(fsync_samples),
        # ... split by whether an append of it reached a new file block (the allocation's metadata commits too)
        fsync_grow=fsync_grow, block_bytes=block,
        # ... and the shared device's stalls, which held every node's fsyncs at once (split_stalls)
        disk_stalls=cpu["disk_stalls"],
        # the frame path's CPU per log entry a message carries, around the run's mean entries per message
        entries=_entry_costs(entry_send_s, entry_recv_s, cpu["carried"]),
        # the interpreter's older-generation collections in the nodes and in the client process (their pauses)
        gc=fit_gc(cpu["gc"]["node"]["pauses_s"], cpu["gc"]["node"]["items"], cpu["gc"]["node"]["processes"]),
        client_gc=fit_gc(cpu["gc"]["client"]["pauses_s"], cpu["gc"]["client"]["items"]),
        write_bandwidth_GBps=bandwidth,
        # with fsync off (page cache only), probed on the real storage code apart from any run
        write=Empirical.fit(write_walls), write_cpu=LogNormal(float(np.median(write_cpus))),
        **recovery,
        loopback=LogNormal.fit(loopback),
        client_per_op=LogNormal(cpu["client_per_op_s"]),
        reconnect_s=RECONNECT_S,  # the transport's, not measured: when a running peer reaches a restarted node
        measured={**facts, "cores_used": cores, "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                  "config": {"protocol": "raft", "nodes": nodes, "clients": clients, "duration_s": duration_s,
                             "seed": seed, "runs": runs, "fsync": True},
                  "samples": {"fsync": len(fsync_samples), "loopback": len(loopback), "handoff": len(handoff),
                              "inputs": cpu["inputs"], "write": len(write_walls), "restart": len(restarts[0])},
                  # restarts on a copy of the first CPU run's logs (their CPU until ready, s) and those logs' entries
                  "recovery_probe": {"entries": entries, "cpu_s": recovering[1], "wall_s": recovering[0]},
                  "busy_periods": cpu["busy_periods"], "group_commit": cpu["group_commit"],
                  # the direct probe of a wake-up (an idle loop, one message, a no-op callback): beside the fits
                  "wake_probe": {"samples": len(wake_probe), **asdict(LogNormal.fit(wake_probe))},
                  "fsync_probe": asdict(LogNormal.fit(fsync_samples)), "tenant_probe_busy_cores": tenants_busy,
                  # the probe's one-way latency as measured, the CPU in it, and the share kept as `loopback`
                  "loopback_probe": {"one_way_median_s": float(np.median(loopback_wall)),
                                     "cpu_per_one_way_s": loopback_cpu, "kept": loopback_kept},
                  "gc": {who: {"collections": len(v["pauses_s"]), "items": v["items"]} for who, v in cpu["gc"].items()},
                  "gc_nodes_from": cpu.get("gc_source"),
                  # the cores' speed during the CPU runs (SpeedMeter's median chunk of thread CPU)
                  "cpu_chunk_s": cpu["cpu_chunk_s"],
                  "disk_stalls": cpu["disk_stall_record"],
                  "fsync_grow": {"source": grow_source, "run_samples": len(cpu["fsync_grow_s"]),
                                 "run_within_samples": len(cpu["fsync_s"]),
                                 "probe_within_median_s": float(np.median(probe_within)),
                                 "probe_grow_median_s": float(np.median(probe_grow)),
                                 **({"run_within_median_s": float(np.median(cpu["fsync_s"])),
                                     "run_grow_median_s": float(np.median(cpu["fsync_grow_s"]))}
                                    if cpu["fsync_s"] and cpu["fsync_grow_s"] else {})},
                  # the run's fsyncs as a fitted log-normal too (what profiles before the empirical form held)
                  **({"fsync_lognormal": asdict(LogNormal.fit(cpu["fsync_s"]))} if cpu["fsync_s"] else {}),
                  # the run of median throughput (what the tenants' share is calibrated to), and every run
                  "raft_run": {k: summary.get(k) for k in RUN_FIELDS}, "raft_runs": cpu["runs"]},
    )
    profile = calibrate_tenants(profile, real_ops_s=summary.get("throughput_ops_s") or 0.0, nodes=nodes,
                                clients=clients, duration_s=min(duration_s, 2.0))
    profile = calibrate_cpu(profile, real_ops_s=summary.get("throughput_ops_s") or 0.0, nodes=nodes,
                            clients=clients, duration_s=min(duration_s, 2.0))
    return calibrate_spell(profile, cpu["windows"], nodes=nodes, clients=clients, duration_s=duration_s, seed=seed)


def machine_facts(directory: str | Path) -> dict[str, Any]:
    """Where a profile was measured: CPU model, cores, kernel, filesystem of ``directory``, load average."""
    import os

    cpu_model = platform.processor() or ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu_model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    filesystem = "?"
    try:
        target = str(Path(directory).resolve())
        best = ""
        for line in Path("/proc/mounts").read_text().splitlines():
            _, mount, fstype, *_ = line.split()
            if target.startswith(mount) and len(mount) > len(best):
                best, filesystem = mount, fstype
    except OSError:
        pass
    return {"cpu_model": cpu_model, "cores": os.cpu_count(), "kernel": platform.release(),
            "filesystem": filesystem, "directory": str(directory), "loadavg_1min": os.getloadavg()[0],
            "python": platform.python_version()}
