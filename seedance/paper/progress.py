"""Progress of the whole paper on stderr: for each item, runs done out of its total, and an ETA from runs done.

Per item the estimate of one run's cost is the mean wall time of its finished runs (those of earlier, resumed
sessions included: their point files record it); the ETA divides the remaining runs' cost by the parallelism the
paper actually gets (the runs' wall time finished in this session over the session's elapsed time, so a Dask
cluster of any size or a loaded machine is measured, not assumed; before the first run finishes, the local
workers). An item without any finished run has no estimate yet: the paper's ETA then says how many items it leaves
out (a lower bound). Lines are at most one every ``every_s`` seconds, plus one at each item's end.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from seedance.progress import say


def duration(seconds: float | None) -> str:
    """``42s``, ``2m50s``, ``1h43m``; a positive time under a second is ``<1s``, never ``0s`` (only nothing left
    is); minutes and hours are whole ones, the rest carried (170 s is 2m50s, not 3m50s)."""
    if seconds is None:
        return "?"
    if seconds <= 0:
        return "0s"
    if seconds < 1:
        return "<1s"
    whole = int(round(seconds))
    if whole < 90:
        return f"{whole}s"
    if whole < 5400:
        return f"{whole // 60}m{whole % 60:02d}s"
    minutes = int(round(seconds / 60))
    return f"{minutes // 60}h{minutes % 60:02d}m"


@dataclass
class ItemCount:
    total: int
    done: int
    walls: list[float] = field(default_factory=list)  # wall times of its finished runs (any session)

    def per_run_s(self) -> float | None:
        return sum(self.walls) / len(self.walls) if self.walls else None


class PaperProgress:
    """Counts and ETAs of every item; :meth:`listener` is passed to each item's sweep."""

    def __init__(self, counts: dict[str, ItemCount], *, workers: int, enabled: bool, every_s: float = 2.0,
                 clock: Any = time.monotonic) -> None:
        self.counts = counts
        self.workers = max(1, workers)
        self.enabled = enabled
        self.every_s = every_s
        self.clock = clock
        self.started = clock()
        self.session_wall = 0.0  # the runs' wall time finished in this session
        self.current: str | None = None
        self._last = 0.0

    def parallelism(self) -> float:
        elapsed = self.clock() - self.started
        if self.session_wall > 0 and elapsed > 0:
            return max(0.1, self.session_wall / elapsed)
        return float(self.workers)

    def item_eta(self, name: str) -> float | None:
        c = self.counts[name]
        per_run = c.per_run_s()
        left = c.total - c.done
        if left == 0:
            return 0.0
        return None if per_run is None else per_run * left / self.parallelism()

    def paper_eta(self) -> tuple[float, int]:
        """(seconds, items without an estimate yet)."""
        known, unknown = 0.0, 0
        for name in self.counts:
            eta = self.item_eta(name)
            if eta is None:
                unknown += 1
            else:
                known += eta
        return known, unknown

    def start(self, name: str) -> None:
        self.current = name
        self.line(force=True)

    def listener(self, task: dict[str, Any], result: dict[str, Any]) -> None:
        """Called after each run's point file is written."""
        c = self.counts[self.current] if self.current is not None else None
        wall = result.get("wall_s")
        if isinstance(wall, (int, float)):
            self.session_wall += float(wall)
        if c is not None and result.get("status") == "ok":
            c.done += 1
            if isinstance(wall, (int, float)):
                c.walls.append(float(wall))
        self.line(force=c is not None and c.done == c.total)

    def text(self) -> str:
        name = self.current
        done = sum(c.done for c in self.counts.values())
        total = sum(c.total for c in self.counts.values())
        eta, unknown = self.paper_eta()
        shown = "?" if unknown and eta == 0 else (">= " if unknown else "") + duration(eta)
        paper = f"paper {done}/{total} runs, ETA {shown}" + \
            (f" ({unknown} item{'s' if unknown > 1 else ''} not yet timed)" if unknown else "")
        if name is None:
            return paper
        c = self.counts[name]
        return f"{name} {c.done}/{c.total} runs, ETA {duration(self.item_eta(name))} | {paper}"

    def line(self, *, force: bool = False) -> None:
        now = self.clock()
        if self.enabled and (force or now - self._last >= self.every_s):
            self._last = now
            say(f"paper: {self.text()}")
