"""Stopping asyncio tasks for sure.

On Python 3.11, ``asyncio.wait_for`` swallows a cancellation that arrives in the loop turn in which its inner
awaitable completes: it returns the result instead of raising ``CancelledError`` (CPython issue gh-86296, fixed
by 3.12's rewrite of ``wait_for`` on top of ``asyncio.timeout``). A task cancelled once at that moment goes on
running; a node's peer sender, cancelled at shutdown just as its ``drain()`` finished, went back to waiting on its
queue, the shutdown's ``gather`` waited for it forever, and the launcher SIGKILLed the node after its 5 s grace
(losing the node's CPU profile and the clean-stop line in its log). :func:`cancel_all` cancels again until every
task is done, within a bound.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable

log = logging.getLogger(__name__)


async def cancel_all(tasks: Iterable[asyncio.Task], *, grace_s: float = 2.0, every_s: float = 0.05) -> int:
    """Cancel ``tasks`` and wait until all are done, cancelling the survivors again every ``every_s``, for at most
    ``grace_s``; return how many are still running then (each logged)."""
    pending = {t for t in tasks if not t.done()}
    deadline = time.monotonic() + grace_s
    while pending:
        for task in pending:
            task.cancel()
        left = deadline - time.monotonic()
        if left <= 0:
            break
        _, pending = await asyncio.wait(pending, timeout=min(every_s, left))
    for task in pending:
        log.warning("task %s still running %.1f s after its cancellation", task.get_name(), grace_s)
    return len(pending)
