"""The real backend's nemesis: the simulator's seeded fault schedule, applied to OS processes and sockets.

Rules (the fault table, :mod:`seedance.faults`; node side: :mod:`seedance.real.faults`; Jepsen's nemeses):

* The schedule is :func:`seedance.faults.draw_schedule` with the simulator's generator (the fourth child of
  ``SeedSequence(seed)``) over the faulty phase ``[0, faulty_fraction · duration)`` of the load, so a real run and a
  simulated run with the same seed, nodes, duration and faults draw the same windows. Window times are seconds
  after the load starts, on the monotonic clock; the nemesis sleeps until each one (applying starts before ends at
  equal times, as the simulator does).
* How each fault is applied and removed (:data:`APPLIERS`):

  - partitions (every variant): a count per directed pair ``(a, b)``; node ``b`` drops frames from ``a`` while the
    count is positive (so overlapping partitions compose, as in the simulator);
  - ``loss`` / ``duplicate`` / ``reorder`` / ``delay``: the simulator's per-message knobs, set on every node;
  - ``pause``: SIGSTOP of the node's process group, SIGCONT at the end;
  - ``crash``: SIGKILL at the start; the node is held down and restarted from its durable state at the end;
  - ``slow-disk``: the chosen nodes sleep ``delay_s`` before each group commit's fsync.

  Rule changes reach nodes as ``ctl`` frames (:class:`Control`), pushed until acknowledged, and re-sent to each new
  incarnation (which also starts under the rules in force, from its environment).
* The kill-rate fault (``--kill-rate``, SIGKILLs per second of random live nodes, each restarted after
  ``restart_delay_s``) runs in the same faulty phase, through the same kill / restart path: a node held down by a
  ``crash`` window is not restarted by the killer, a kill waits (on the event loop, with a timeout) until the old
  process is reaped before anything restarts it, and one lock per node orders kills and restarts.
* At the heal every rule is cleared (and acknowledged by every live node), paused nodes resume, dead nodes restart;
  a ``heal`` trace record marks the start of the healed phase, where liveness is measured.
* Every wait has a timeout: control connections (1 s per step), kills (the launcher's ``kill_timeout_s``), spawns
  (the zygote's 120 s), acknowledgements at the heal (``settle_s``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

import numpy as np

from seedance.errors import FrameError
from seedance.faults import PARTITION_VARIANTS, FaultWindow
from seedance.real.faults import KNOBS, ctl_mac, pack_state
from seedance.real.trace import TraceRecorder
from seedance.real.transport import Connection

log = logging.getLogger("seedance.real.nemesis")

STEP_TIMEOUT_S = 1.0


class Control:
    """The launcher's control connections: keeps each live node's fault rules equal to ``launcher.node_rules``."""

    def __init__(self, launcher: Any) -> None:
        self.launcher = launcher
        self._conns: dict[int, tuple[int, Connection]] = {}  # rank -> (incarnation, connection)
        self._acked: dict[int, tuple[int, int]] = {}  # rank -> (incarnation, version) acknowledged
        self._locks: dict[int, asyncio.Lock] = {}
        self.counts: dict[tuple[int, int], dict[str, int]] = {}  # (rank, incarnation) -> node's message counts
        self._wake = asyncio.Event()
        self._task: asyncio.Task | None = None
        self.version = 0

    def start(self) -> None:
        self._task = asyncio.ensure_future(self._loop())

    def publish(self, rules: dict[int, dict[str, Any]]) -> None:
        """Set every node's rule set (a new version) and wake the pusher."""
        self.version += 1
        for rank in range(self.launcher.num_nodes):
            self.launcher.node_rules[rank] = {"version": self.version, **rules[rank]}
        self._wake.set()

    def _pending(self) -> list[int]:
        launcher = self.launcher
        out = []
        for rank, rules in launcher.node_rules.items():
            node = launcher.nodes.get(rank)
            if node is None or not launcher.alive(rank) or rank in launcher.paused:
                continue
            if self._acked.get(rank) != (node.incarnation, rules["version"]):
                out.append(rank)
        return out

    async def _loop(self) -> None:
        while True:
            pending = self._pending()
            if pending:
                await asyncio.gather(*(self.push(rank) for rank in pending))
                await asyncio.sleep(0.02)  # a failed push (node restarting) is retried soon, not in a hot loop
            else:
                self._wake.clear()
                try:
                    await asyncio.wait_for(self._wake.wait(), 0.1)  # also notices restarts within 100 ms
                except asyncio.TimeoutError:
                    pass

    async def push(self, rank: int) -> bool:
        """Send node ``rank`` its current rules and wait for the acknowledgement; False if that failed."""
        lock = self._locks.setdefault(rank, asyncio.Lock())
        async with lock:
            launcher = self.launcher
            node = launcher.nodes.get(rank)
            rules = launcher.node_rules.get(rank)
            if node is None or rules is None or not launcher.alive(rank) or rank in launcher.paused:
                return False
            incarnation = node.incarnation
            try:
                held = self._conns.get(rank)
                if held is None or held[0] != incarnation:
                    if held is not None:
                        held[1].close()
                        self._conns.pop(rank, None)
                    address = launcher.addresses.lookup(rank)
                    conn = await Connection.open(*address, launcher.key, timeout_s=STEP_TIMEOUT_S)
                    conn.send_nowait("ctl", -1, None)
                    self._conns[rank] = (incarnation, conn)
                else:
                    conn = held[1]
                state = pack_state(rules)
                conn.send_nowait("ctl", -1, {"state": state, "mac": ctl_mac(launcher.ctl_key, conn.peer_nonce, state)})
                await asyncio.wait_for(conn.writer.drain(), STEP_TIMEOUT_S)
                frame = await asyncio.wait_for(conn.recv(), STEP_TIMEOUT_S)
                ack = frame.message if isinstance(frame.message, dict) else {}
                if frame.kind != "ack" or ack.get("version") != rules["version"]:
                    raise FrameError("ctl", f"unexpected answer {frame.kind!r} {ack!r}", "ack of the version sent")
                self._acked[rank] = (incarnation, rules["version"])
                self.counts[(rank, incarnation)] = {k: int(ack.get(k, 0)) for k in ("dropped", "duplicated",
                                                                                      "delayed")}
                return True
            except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError, FrameError, ConnectionError) as err:
                log.debug("control push to node %d failed: %s", rank, err)
                dropped = self._conns.pop(rank, None)
                if dropped is not None:
                    dropped[1].close()
                return False

    async def settle(self, timeout_s: float) -> bool:
        """Wait until every live, running node has acknowledged its current rules (False on timeout)."""
        deadline = time.monotonic() + timeout_s
        while self._pending():
            if time.monotonic() > deadline:
                return False
            self._wake.set()
            await asyncio.sleep(0.02)
        return True

    def totals(self) -> dict[str, int]:
        out = {"dropped": 0, "duplicated": 0, "delayed": 0}
        for counts in self.counts.values():
            for k in out:
                out[k] += counts[k]
        return out

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        for _, conn in self._conns.values():
            conn.close()
        self._conns.clear()


Applier = Callable[["RealNemesis", FaultWindow], Awaitable[None]]


class RealNemesis:
    """Runs a fault schedule (and the kill-rate fault) against a :class:`~seedance.real.launcher.LocalLauncher`."""

    def __init__(self, launcher: Any, schedule: list[FaultWindow], *, faulty_end_s: float, trace: TraceRecorder,
                 restart_delay_s: float = 0.3, settle_s: float = 5.0) -> None:
        self.launcher = launcher
        self.schedule = schedule
        self.faulty_end_s = faulty_end_s
        self.trace = trace
        self.restart_delay_s = restart_delay_s
        self.settle_s = settle_s
        n = launcher.num_nodes
        self.cut = [[0] * n for _ in range(n)]  # cut[a][b] > 0: a cannot send to b
        self.knobs = {k: 0.0 for k in KNOBS if k != "fsync_delay_s"}
        self.disk_delay_s = [0.0] * n
        self.held = [0] * n  # crash windows holding each node down
        self.control = Control(launcher)
        self._locks = [asyncio.Lock() for _ in range(n)]
        self.applied = 0
        self.kills = 0
        self.restarts = 0
        self.healed_at_monotonic: float | None = None
        self._uses_rules = any(w.name not in ("crash", "pause") for w in schedule)

    # ------------------------------------------------------------------------------------------ processes
    async def kill(self, rank: int, why: str, *, unless_healed: bool = False) -> bool:
        async with self._locks[rank]:
            if not self.launcher.alive(rank) or (unless_healed and self.healed_at_monotonic is not None):
                return False
            await self.launcher.akill(rank)
            self.kills += 1
            self.trace.record("crash", rank, why)
            return True

    async def restart(self, rank: int) -> bool:
        async with self._locks[rank]:
            if self.launcher.alive(rank) or self.held[rank] > 0:
                return False
            await asyncio.to_thread(self.launcher.spawn, rank)
            self.restarts += 1
            return True

    def _trace_at(self) -> float:
        return time.monotonic()

    # ------------------------------------------------------------------------------------------- rules
    def _rules(self) -> dict[int, dict[str, Any]]:
        n = self.launcher.num_nodes
        return {b: {"blocked_from": [a for a in range(n) if self.cut[a][b] > 0], **self.knobs,
                    "fsync_delay_s": self.disk_delay_s[b]} for b in range(n)}

    def publish(self) -> None:
        self.control.publish(self._rules())

    # --------------------------------------------------------------------------------------------- run
    async def run(self, t_start: float) -> None:
        """Apply the schedule (window times after ``t_start``, a ``time.monotonic()`` value), then heal."""
        if self._uses_rules:
            self.control.start()
        events = sorted([(w.start_s, 0, w.fault_id, w) for w in self.schedule]
                        + [(w.end_s, 1, w.fault_id, w) for w in self.schedule], key=lambda e: e[:3])
        try:
            for at_s, phase, _, window in events:
                await asyncio.sleep(max(0.0, t_start + at_s - time.monotonic()))
                if phase == 0:
                    self.applied += 1
                    self.trace.record("fault-start", -1, window.fault_id, window.name,
                                      {k: window.params[k] for k in sorted(window.params)})
                    await APPLIERS[window.name][0](self, window)
                else:
                    self.trace.record("fault-end", -1, window.fault_id, window.name)
                    await APPLIERS[window.name][1](self, window)
            await asyncio.sleep(max(0.0, t_start + self.faulty_end_s - time.monotonic()))
        finally:
            await self.heal()

    async def kill_loop(self, rate: float, rng: np.random.Generator, t_start: float) -> None:
        """SIGKILL a random live node at Poisson times (``rate`` per second) until the heal; restart each later."""
        restarts: list[asyncio.Task] = []

        async def strike(rank: int) -> None:  # a task per kill: the Poisson clock never waits on a reaping
            # no kill once healed (the heal may run between the draw and this task's turn), and a node this task
            # killed always comes back, healed or not: the heal's restarts may have passed it before the kill
            if await self.kill(rank, "SIGKILL", unless_healed=True):
                log.info("SIGKILLed node %d (incarnation %d)", rank, self.launcher.nodes[rank].incarnation)
                await asyncio.sleep(self.restart_delay_s)
                await self.restart(rank)

        until = t_start + self.faulty_end_s
        try:
            while True:
                wait = float(rng.exponential(1.0 / rate))
                if time.monotonic() + wait >= until:
                    break
                await asyncio.sleep(wait)
                live = [r for r in range(self.launcher.num_nodes) if self.launcher.alive(r)]
                if not live:
                    continue
                rank = live[int(rng.integers(len(live)))]
                restarts.append(asyncio.ensure_future(strike(rank)))
        finally:
            await asyncio.gather(*restarts, return_exceptions=True)

    async def heal(self) -> None:
        """Remove every fault: rules cleared (and acknowledged), paused nodes resumed, dead nodes restarted."""
        if self.healed_at_monotonic is not None:
            return
        self.healed_at_monotonic = time.monotonic()
        n = self.launcher.num_nodes
        self.held = [0] * n
        for rank in sorted(self.launcher.paused):
            if self.launcher.resume(rank):
                self.trace.record("resume", rank)
        for rank in range(n):
            if await self.restart(rank):
                self.trace.record("restart", rank, self.launcher.nodes[rank].incarnation)
        if self._uses_rules:
            self.cut = [[0] * n for _ in range(n)]
            self.knobs = dict.fromkeys(self.knobs, 0.0)
            self.disk_delay_s = [0.0] * n
            self.publish()
            if not await self.control.settle(self.settle_s):
                log.warning("not every node acknowledged the healed rules within %.1f s", self.settle_s)
        self.trace.record("heal", -1)

    async def close(self) -> None:
        await self.control.close()


# ------------------------------------------------------------------------------------------------ appliers
def _cut(sign: int) -> Applier:
    async def apply(nemesis: RealNemesis, window: FaultWindow) -> None:
        for a, b in window.params["pairs"]:
            nemesis.cut[a][b] += sign
        nemesis.publish()
    return apply


def _knobs(**settings: str | float) -> Applier:
    """Set per-message knobs: a string value names the window parameter, a float is literal."""
    async def apply(nemesis: RealNemesis, window: FaultWindow) -> None:
        for knob, value in settings.items():
            nemesis.knobs[knob] = float(window.params[value] if isinstance(value, str) else value)
        nemesis.publish()
    return apply


async def _crash(nemesis: RealNemesis, window: FaultWindow) -> None:
    for rank in window.params["nodes"]:
        nemesis.held[rank] += 1
        await nemesis.kill(rank, "crash")


async def _uncrash(nemesis: RealNemesis, window: FaultWindow) -> None:
    for rank in window.params["nodes"]:
        nemesis.held[rank] = max(0, nemesis.held[rank] - 1)
        if await nemesis.restart(rank):
            nemesis.trace.record("restart", rank, nemesis.launcher.nodes[rank].incarnation)


async def _pause(nemesis: RealNemesis, window: FaultWindow) -> None:
    for rank in window.params["nodes"]:
        if nemesis.launcher.pause(rank):
            nemesis.trace.record("pause", rank)


async def _resume(nemesis: RealNemesis, window: FaultWindow) -> None:
    for rank in window.params["nodes"]:
        if nemesis.launcher.resume(rank):
            nemesis.trace.record("resume", rank)


def _disk(sign: int) -> Applier:
    async def apply(nemesis: RealNemesis, window: FaultWindow) -> None:
        for rank in window.params["nodes"]:
            nemesis.disk_delay_s[rank] = max(0.0, nemesis.disk_delay_s[rank] + sign * window.params["delay_s"])
        nemesis.publish()
    return apply


#: How the real backend applies (start) and removes (end) each fault of the table that names ``real``.
APPLIERS: dict[str, tuple[Applier, Applier]] = {
    **{variant: (_cut(+1), _cut(-1)) for variant in PARTITION_VARIANTS},
    "crash": (_crash, _uncrash),
    "pause": (_pause, _resume),
    "loss": (_knobs(loss_p="p"), _knobs(loss_p=0.0)),
    "duplicate": (_knobs(duplicate_p="p"), _knobs(duplicate_p=0.0)),
    "reorder": (_knobs(reorder_s="max_s"), _knobs(reorder_s=0.0)),
    "delay": (_knobs(spike_p="p", spike_s="spike_s"), _knobs(spike_p=0.0, spike_s=0.0)),
    "slow-disk": (_disk(+1), _disk(-1)),
}
