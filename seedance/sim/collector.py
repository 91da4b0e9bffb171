"""The cyclic garbage collector during a simulation: off while the simulation runs, since a simulation allocates
fast and frees almost nothing that is cyclic.

CPython starts a young-generation collection every 700 net allocations, and every tenth of those a middle one;
a simulation allocates an event, a message and a trace record per delivery and keeps many of them (node state,
buffers, the chunks of history and trace not yet spilled), so every collection traverses objects that are still
alive, to find cycles that a run does not make: with the collector off during the loop and one collection at its
end, the garbage found was at most 31 objects (Raft, Multi-Paxos, EPaxos and causal runs, with and without crashes).
Measured: Raft at 128 nodes, 32 clients, 0.3 simulated s: 6.15 CPU s with the default thresholds, 4.26 s with a
young generation of 50,000 allocations, 3.89 s with the collector off. Causal at 1,024 replicas spent 3.8 s of a
0.3 simulated s run in 1,729 young collections of 50,000 that found nothing. Collection never changes what a run
computes (the same trace_sha256).

Inside :func:`bulk` the automatic collector is therefore off, the objects alive at its start frozen. A protocol
that did make cyclic garbage would then grow without bound, so the loop calls :func:`valve` between its chunks:
once :data:`VALVE_OBJECTS` container objects more are alive than at the last collection, it collects and freezes
the survivors (each is traversed once, never again during the block). The runs measured stay far below it.

A process that runs many simulations (a campaign, a sweep worker, a notebook) gets the previous runs' garbage back
with :func:`reclaim` at the start of each: a run's objects hang off a few reference cycles (the runtime and its
hosts, the engines and their drivers, the event queue and its callbacks), so they are freed only by a collection
of the oldest generation, which CPython starts rarely once the heap is large. Without it a loop of 200 EPaxos
campaign runs grew to 2.3 GB (about 11 MB per run). A full collection traverses every live object (20-100 ms in a
test process), so it runs only once the resident set has grown by :data:`RECLAIM_GROWTH_BYTES` since the last one:
the garbage kept is bounded by that, and a loop of small runs pays a collection every few runs, not every run.
The first simulation of a process (the command line's) pays nothing.

:func:`skip_final_collection`: a process about to exit after a large run need not traverse its heap once more
(CPython's finalisation collects the oldest generation: 1-2.4 s after a causal run of 0.3 simulated s at 1,024
replicas or an EPaxos run of 1 s); the command line calls it once its outputs are written.
"""

from __future__ import annotations

import ctypes
import gc
import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

VALVE_OBJECTS = 8_000_000  # container objects allocated (net) since the last collection that start the next one
RECLAIM_GROWTH_BYTES = 64 << 20  # resident-set growth since the last collection that starts the next one
TRIM_GROWTH_BYTES = 4 << 20  # resident-set growth since the last trim that starts the next one (:func:`trim`)
_last: list[int | None] = [None]  # the resident set after the last collection (None: no simulation ran yet)


def _resident_bytes() -> int:
    """This process's resident set (``/proc/self/statm``; 0 where there is none: then every run collects)."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def reclaim() -> None:
    """At the start of a simulation: collect every generation if earlier runs of this process left the resident set
    :data:`RECLAIM_GROWTH_BYTES` larger than after the last collection (module docstring). Collection never changes
    what a run computes."""
    now = _resident_bytes()
    if _last[0] is None:  # the process's first simulation: nothing of an earlier run to collect
        _last[0] = now
    elif now == 0 or now - _last[0] >= RECLAIM_GROWTH_BYTES:
        gc.collect()
        _last[0] = _resident_bytes()
    elif now < _last[0]:
        _last[0] = now


@contextmanager
def bulk() -> Iterator[None]:
    """The automatic collector off inside the block, with the objects alive at its start frozen (left out of every
    collection: the imported modules, the run's set-up); the collector is as it was after the block. Code inside
    that allocates a great deal calls :func:`valve` now and then.

    Only when garbage cycles are found changes; nothing a run computes does (the same trace_sha256). Nested blocks
    keep the outer one's setting."""
    enabled = gc.isenabled()
    gc.freeze()
    gc.disable()
    try:
        yield
    finally:
        # what the block made and kept joins the oldest generation with the frozen start (freeze, then unfreeze),
        # instead of waiting in the youngest for a collection that would traverse all of it at the next allocation
        gc.freeze()
        gc.unfreeze()
        if enabled:
            gc.enable()


def valve() -> bool:
    """Inside :func:`bulk`: collect once :data:`VALVE_OBJECTS` container objects more are alive than after the last
    collection, then freeze the survivors (the module docstring); whether it collected. Either way, memory the
    allocator holds free goes back to the system once the resident set has grown (:func:`trim`)."""
    trim()
    if gc.get_count()[0] < VALVE_OBJECTS:
        return False
    gc.collect()
    gc.freeze()
    return True


def trim() -> bool:
    """Hand the C allocator's free memory back to the system (glibc's ``malloc_trim``) once the resident set has
    grown by :data:`TRIM_GROWTH_BYTES` since the last time; whether it did. A long simulation frees and allocates
    in a steady churn, and the allocator kept what it freed: Raft at 5 nodes, 16 clients, grew from 134 to 150 MB
    between 3 and 27 simulated seconds with a flat Python heap; trimmed, from 120 to 129 MB. Nothing a run computes
    changes. Elsewhere than glibc, nothing happens."""
    if _malloc_trim is None:
        return False
    now = _resident_bytes()
    if _trimmed[0] is not None and now - _trimmed[0] < TRIM_GROWTH_BYTES:
        if now < _trimmed[0]:
            _trimmed[0] = now
        return False
    _malloc_trim(0)
    _trimmed[0] = _resident_bytes()
    return True


def _libc_malloc_trim() -> Any:
    try:
        return ctypes.CDLL(None).malloc_trim  # the process's C library: glibc has it, others do not
    except (OSError, AttributeError):
        return None


_malloc_trim = _libc_malloc_trim()
_trimmed: list[int | None] = [None]  # the resident set after the last trim


def skip_final_collection() -> None:
    """The process ends soon: freeze the heap, so that the interpreter's last collection at exit skips it. Objects
    alive now are not finalised by the collector (their memory goes back with the process, as it would)."""
    gc.freeze()
