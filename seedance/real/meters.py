"""Meters of this machine for the host model: the loopback, the loop-to-thread hand-off and a loop's wake-up
(probes), and what runs beside a measurement: the other tenants' busy cores (:class:`TenantMeter`) and the cores'
speed (:class:`SpeedMeter`). ``seedance real profile`` and ``experiment sim-vs-real`` use them.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from seedance.real.launcher import process_cpu_s


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

    from seedance.real.loop_hooks import BusyPeriods

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
