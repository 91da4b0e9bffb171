"""Stopping tasks whose cancellation ``asyncio.wait_for`` swallowed (Python 3.11), as a node's shutdown must."""

from __future__ import annotations

import asyncio
import sys

from seedance.real.aio import cancel_all


async def _sender_like(box: list) -> None:
    """A peer sender's shape: wait on something, then wait_for the write's drain, forever."""
    loop = asyncio.get_running_loop()
    while True:
        fut = loop.create_future()
        box.append(fut)
        await asyncio.wait_for(fut, 5.0)


def _cancel_as_drain_completes(box: list, task: asyncio.Task) -> None:
    box[-1].set_result(None)  # the drain completes ...
    task.cancel()  # ... in the same loop turn as the shutdown's cancel


def test_a_single_cancel_can_be_swallowed_and_cancel_all_stops_the_task_anyway():
    async def main() -> tuple[bool, int, bool]:
        box: list = []
        task = asyncio.ensure_future(_sender_like(box))
        await asyncio.sleep(0)
        _cancel_as_drain_completes(box, task)
        done, _ = await asyncio.wait({task}, timeout=0.2)
        survived_one_cancel = not done
        box[-1].set_result(None)
        left = await cancel_all([task], grace_s=2.0)
        return survived_one_cancel, left, task.cancelled()

    survived, left, cancelled = asyncio.run(main())
    if sys.version_info < (3, 12):
        assert survived  # the CPython bug this guards against (gh-86296)
    assert left == 0 and cancelled


def test_cancel_all_gives_up_after_its_grace_and_names_the_survivor(caplog):
    async def main() -> int:
        async def deaf() -> None:
            while True:
                try:
                    await asyncio.sleep(10)
                except asyncio.CancelledError:
                    pass

        task = asyncio.ensure_future(deaf())
        task.set_name("deaf-task")
        await asyncio.sleep(0)
        return await cancel_all([task], grace_s=0.2)

    loop = asyncio.new_event_loop()
    try:
        assert loop.run_until_complete(main()) == 1
    finally:
        for t in asyncio.all_tasks(loop):
            t.get_coro().close()
        loop.close()
    assert "deaf-task" in caplog.text and "still running" in caplog.text


def test_cancel_all_with_nothing_running_returns_at_once():
    async def main() -> int:
        done = asyncio.ensure_future(asyncio.sleep(0))
        await done
        return await cancel_all([done])

    assert asyncio.run(main()) == 0
