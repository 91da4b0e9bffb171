"""``trace.json`` written by a forked child while the run's other outputs are written (:func:`write_chrome_aside`).

Rendering a long run's first million trace events to the Chrome format takes seconds of one core and reads
nothing the other outputs change: the child renders them from a copy-on-write image of the finished trace while
the parent writes ``history.jsonl``, ``trace.msgpack`` and the summary. The file is the one
:meth:`~seedance.tracing.Trace.write_chrome` writes in the parent (the same call, on the same records); what it
says of itself (``last_chrome``: events, truncated, until_s) comes back through a pipe. The child reads the
trace's spill file through a descriptor of its own (``/proc/self/fd``), so the parent's reads of it
(``trace.msgpack``) keep their file offset. Where a fork is unsafe or unavailable (another thread runs, no
``/proc``, not POSIX), and whenever the child fails, the parent writes the file itself when asked for the result:
the same bytes either way.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from seedance.tracing import Trace


def write_chrome_aside(trace: Trace, path: str | Path, *, limit: int | None,
                       rest: str = "") -> Callable[[], dict[str, Any]]:
    """Start ``trace.write_chrome(path, limit=limit, rest=rest)`` in a child process; returns the function that
    waits for it and returns ``trace.last_chrome`` (set in this process too). Call it exactly once."""

    def here() -> dict[str, Any]:
        trace.write_chrome(path, limit=limit, rest=rest)
        return trace.last_chrome  # type: ignore[return-value]

    spill = getattr(trace, "_spill", None)
    if (not hasattr(os, "fork") or threading.active_count() > 1 or not os.path.isdir("/proc/self/fd")
            or (spill is not None and not os.path.exists(f"/proc/self/fd/{spill.fileno()}"))):
        return here
    if spill is not None:
        spill.flush()  # nothing of the spill file left in a buffer both processes would hold
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: render, hand back what it wrote, leave without running any of the parent's exit code
        _child(trace, path, limit, rest, spill, read_fd, write_fd)
    os.close(write_fd)

    def wait() -> dict[str, Any]:
        with os.fdopen(read_fd, "rb") as fh:
            data = fh.read()
        _, status = os.waitpid(pid, 0)
        if os.waitstatus_to_exitcode(status) == 0 and data:
            trace.last_chrome = json.loads(data)
            return trace.last_chrome
        return here()  # the child failed: the file is written here (the same bytes)

    return wait


def _child(trace: Trace, path: str | Path, limit: int | None, rest: str, spill: Any, read_fd: int,
           write_fd: int) -> None:
    code = 1
    try:
        os.close(read_fd)
        if spill is not None:  # a descriptor of its own, with its own offset (the parent's object is kept, unused)
            trace._spill = open(f"/proc/self/fd/{spill.fileno()}", "rb")  # noqa: SIM115
        trace.write_chrome(path, limit=limit, rest=rest)
        data = json.dumps(trace.last_chrome, allow_nan=False).encode()
        view = memoryview(data)
        while view:
            view = view[os.write(write_fd, view):]
        code = 0
    finally:
        os._exit(code)
