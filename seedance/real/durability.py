"""A real node's durable writes: group commit on the storage thread, off the event loop.

When the engine meets a durable write, the sync is started at the end of the event-loop turn (every durable effect
waiting by then joins it, etcd/raft's ``Ready`` batching) and runs on the node's storage thread, so the loop keeps
receiving and handling inputs while the fsync is in flight; their effects wait in the engine behind the write, in
order. Under the CPU profile each sync's timings are recorded. Methods of
:class:`~seedance.real.runtime.NodeRuntime`."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from seedance.engine.effects import ContractError
from seedance.real.loop_hooks import BusyPeriods

log = logging.getLogger("seedance.real.runtime")


class Durability:
    """The node's syncs (a mixin of the runtime: it uses its engine, storage, storage thread and trace)."""

    __slots__ = ()

    async def _drain(self, timeout_s: float = 60.0) -> None:
        """Wait until no durable write is pending or in flight (bounded: a stuck disk fails the node)."""
        deadline = time.monotonic() + timeout_s
        while self.engine is not None and self.engine.syncing and not self.failed:
            if self._sync_future is None and self._sync_scheduled:
                await asyncio.sleep(0)
                continue
            if time.monotonic() > deadline:
                self._fail(f"node {self.cfg.node_id}: a durable write did not complete within {timeout_s:.0f} s")
                return
            if self._sync_future is not None:
                try:
                    await asyncio.wait_for(asyncio.shield(self._sync_future), max(0.0, deadline - time.monotonic()))
                except Exception:  # noqa: BLE001 - a timeout is handled above, a failure by _synced
                    pass
            await asyncio.sleep(0)

    def _start_sync(self) -> None:
        self._sync_scheduled = False
        if self.failed or self.engine is None:
            return
        try:
            group = self.engine.take_group()
        except ContractError as err:
            self._fail(str(err))
            return
        start = time.monotonic()
        storage = self.storage

        def sync() -> int:
            if profiling:
                ended[4] = time.perf_counter_ns() - submitted  # the first half: submitted -> the thread runs it
            for effect in group:
                storage.stage(effect)
            began = time.perf_counter_ns() if profiling else 0
            cpu = time.thread_time_ns() if profiling else 0
            grown = storage.grown
            count = storage.sync()
            if profiling:
                ended[0] = time.perf_counter_ns()
                ended[1] = ended[0] - began
                ended[2] = time.thread_time_ns() - cpu  # the thread's CPU inside the timed write + fsync
                ended[3] = int(storage.grown > grown)  # it allocated a block: the fsync commits metadata too
            return count

        profiling, ended = self._busy is not None, [0, 0, 0, 0, 0]
        if profiling:
            self._busy.kinds[BusyPeriods.SYNC_STARTS] += 1  # type: ignore[union-attr]

        assert self._loop is not None and self._io is not None
        submitted = time.perf_counter_ns() if profiling else 0
        self._sync_future = asyncio.wrap_future(self._io.submit(sync), loop=self._loop)
        self._sync_future.add_done_callback(lambda fut: self._synced(fut, group, start, ended))

    def _synced(self, future: Any, group: list, start: float, ended: list[int] | None = None) -> None:
        self._sync_future = None
        if self._gc_only:
            self._gc_items += 1
        if self._busy is not None and ended and ended[0] and len(self._sync_stats) < BusyPeriods.LIMIT:
            # (durable effects in the group, storage thread -> loop ns, the write + fsync ns on the thread, the
            # thread's CPU ns inside that write + fsync, whether an append of it reached a new file block, submitted
            # -> the thread runs it ns, the write + fsync's end on the monotonic clock, which every process shares)
            self._sync_stats.append((len(group), time.perf_counter_ns() - ended[0], ended[1], ended[2], ended[3],
                                     ended[4], ended[0]))
            self._busy.items += 1
            self._busy.kinds[BusyPeriods.SYNCED] += 1
        if future.cancelled() or future.exception() is not None:
            if not self.failed:
                log.error("node %d: durable write failed: %r", self.cfg.node_id,
                          None if future.cancelled() else future.exception())
                self.failed = True
                self.stop()
            return
        if self.trace.enabled:
            self.trace.record("persist", self.cfg.node_id, len(group), sum(_size(e) for e in group),
                              self.trace.time_s(), at=start)
        if self.failed or self.engine is None:
            return
        try:
            self.engine.durable(group, 0.0)
        except ContractError as err:
            self._fail(str(err))
        except Exception:
            self._fail(f"node {self.cfg.node_id} failed executing its effects")


def _size(effect: Any) -> int:
    return int(getattr(effect, "size_bytes", 0) or 0)
