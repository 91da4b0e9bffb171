"""A measured host's storage thread, in the simulator: a node process runs its event loop and its storage thread in
one interpreter, so the thread's steps before and after its write (+ fsync) wait for the interpreter's lock, and
its own CPU holds the loop. Methods of :class:`~seedance.sim.runtime.Runtime` (the path a host profile takes)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from seedance.sim.host import Host
from seedance.sim.kernel import Call

# CPython's switch interval (sys.getswitchinterval(), 5 ms by default): a thread that has waited this long for the
# interpreter's lock makes the running thread drop it at its next check
SWITCH_INTERVAL_S = 0.005


class StorageThread:
    """The storage thread's steps (a mixin of the runtime: it uses its clock, host model, cores and disk)."""

    __slots__ = ()

    def with_lock(self, host: Host, ready_at: float, fn: Callable[..., None], args: tuple[Any, ...]) -> None:
        """Run ``fn(*args)`` once the node's storage thread, ready at ``ready_at``, holds the interpreter's lock.

        A node process runs its event loop and its storage thread in one interpreter: the thread runs Python only
        while it holds the lock, and the loop thread holds it for as long as it handles inputs, letting go when it
        blocks in ``select`` (its inbox empty) or after the thread has waited :data:`SWITCH_INTERVAL_S`. Measured
        here: an executor job submitted at the start of 100 / 300 / 1,000 / 3,000 us of loop work started
        147 / 338 / 1,066 / 3,176 us later (38 us with the loop idle). So a write requested early in a busy stretch
        waits for the stretch to end, twice (before the syscall and after it, to hand the result back)."""
        self._lock_seq += 1
        host.lock_waiters.append((self._lock_seq, ready_at, fn, args))
        self._at(ready_at, self._lock_try, (host, host.incarnation, None))
        self._at(ready_at + SWITCH_INTERVAL_S, self._lock_try, (host, host.incarnation, self._lock_seq))

    def _lock_try(self, event: Call) -> None:
        host, incarnation, forced = event.args
        if host.incarnation != incarnation or not host.lock_waiters:
            return
        now = self.env._now
        seq, ready_at, fn, args = host.lock_waiters[0]
        if ready_at > now or (forced is not None and forced != seq):
            return  # its own attempt comes later; or this is an older wait's deadline
        if host.paused:
            return  # stopped with its process (resume tries again)
        if forced is None and (host.inbox or host.busy_until > now):
            # the loop holds the lock: try again once its current input is done (just after a wake-up due now)
            self._at(max(host.busy_until, self._ready_at(host), now + 1e-9), self._lock_try,
                     (host, incarnation, None))
            return
        host.lock_waiters.popleft()
        fn(*args)

    def _sync_thread(self, host: Host, incarnation: int, group: list[Any], handoff: float,
                     requested: float) -> None:
        """The storage thread holds the lock: its own CPU (the loop waits for the lock meanwhile), then the write
        (+ fsync) with the lock let go; an fsync that allocates a file block commits the allocation's metadata too
        (its own measured kind, where the profile has it)."""
        model, cores = self.host, self.cores
        assert model is not None and cores is not None  # a measured host's path only
        storage = host.storage
        rng = self._host_rng
        now = self.env._now
        if not self._fsync:
            service = model.write
        elif storage.grows and model.fsync_grow is not None:
            service = model.fsync_grow
        else:
            service = model.fsync
        syscall = service.draw(rng)  # type: ignore[union-attr]  # write is set where fsync can be off
        cursor = now
        if model.sync_cpu is not None:  # its Python, with or without the fsync
            cursor = cores.take_background(now, model.sync_cpu.draw(rng))
            if cursor > host.busy_until:
                host.busy_until = cursor
        # with fsync on, the device's stalls hold it (the page cache alone does not wait for them)
        done = storage.sync_done_s(cursor, syscall, self._disk_stalls.hold if self._fsync and self._disk_stalls
                                   is not None else None)
        inside = model.fsync_cpu if self._fsync else model.write_cpu
        if inside is not None:  # its CPU inside the write (+ fsync): a core held during the wait
            held = cores.take_background(cursor, inside.draw(rng))
            if held > done:
                done = held
        self._at(done, self._sync_returned, (host, incarnation, group, handoff, requested))

    def _sync_returned(self, event: Call) -> None:
        """The syscall returned: the thread needs the lock again to hand the result to the loop."""
        host, incarnation, group, handoff, requested = event.args
        if host.incarnation == incarnation:
            self.with_lock(host, self.env._now, self._sync_handed, (host, incarnation, group, handoff, requested))

    def _sync_handed(self, host: Host, incarnation: int, group: list[Any], handoff: float, requested: float) -> None:
        """The thread hands the result back through the loop's self-pipe: the loop has it after its wake-up (as
        the real backend's trace, the write is recorded then, from its request to the loop having it)."""
        model = self.host
        assert model is not None  # a measured host's path only
        done = self.env._now + (model.handback.draw(self._host_rng) if model.handback is not None else handoff / 2)
        if self._tracing:
            storage = host.storage
            self._record((requested, "persist", host.node_id, len(storage.staged), storage.staged_bytes, done))
        self._at(done, self._persisted, (host, incarnation, group))
