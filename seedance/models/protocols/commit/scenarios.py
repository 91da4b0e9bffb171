"""The seed's failure scenarios F1–F8 as named, seeded injections, each with a ``buggy`` and a ``fixed`` variant.

``buggy`` is the seed's v2.0.2 behaviour, ``fixed`` its remedy (chapters 1, 3 and 4 of the field report). The
injection — which rank, at which steps, with which parameters — is drawn from ``scenario_seed`` alone, so every rank
draws the same one and a run reproduces on demand. An injection fires the first time its rank executes the step
(a replay after a rollback runs clean, as a transient fault would).

| name | injection | buggy (v2.0.2) | fixed |
|---|---|---|---|
| F1 | one rank crosses an epoch boundary (learning-rate decay) one step late | commit when every rank reports the same (epoch, step): false global convergence | commit only on equal parameter digests; mismatch → rollback and resync |
| F2 | the gradient allreduce misses its deadline on every rank, at three steps of one commit interval | resend only a slice of the gradient; the rest is applied locally: replicas drift, the drift accumulates | a timeout rolls every rank back to the last commit and resyncs by a full broadcast |
| F3 | host work (a data-loader stall) on a rank's core | heartbeats share that core: none are sent during the stall → false "offline" | heartbeats on their own timer (their own core) |
| F4 | a digest's host statistics race the device-to-host copy | statistics read before the copy completes → false consistency alarm and global resync | read after the copy (stream order) |
| F5 | a partition cuts a minority off during an allreduce | no view agreement: the minority forms its own view and commits alone (split view) | a view must hold a majority and every commit votes on its view; the minority waits, then resyncs |
| F6 | mixed precision: FP16 gradient reduction for a few steps | the FP32 update is issued without waiting for the reduction (async_op without wait) | the update waits for the reduction |
| F7 | a unified-memory page migrates during the update's atomic adds | adds on the page are lost or applied twice (trace: page_migration_start, atomic_op_epoch) | wait for the prefetch to complete before the atomics |
| F8 | every validate-and-commit creates a temporary event | it is never destroyed: live handles grow per commit | its lifetime is the call's: freed on every path |
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from seedance.errors import SpecError

SCENARIOS: dict[str, str] = {
    "F1": "epoch-boundary misalignment -> false global convergence",
    "F2": "collective timeout with partial retransmission -> accumulating replica drift",
    "F3": "heartbeat starved by host work on the same core -> false offline",
    "F4": "statistics read before the device-to-host copy completes -> false consistency alarm",
    "F5": "partition during an allreduce -> split view",
    "F6": "FP16 gradient reduction racing the FP32 update (no wait) -> replica drift",
    "F7": "unified-memory page migration racing atomic adds -> lost or doubled adds",
    "F8": "event-handle leak in validate-and-commit -> live handles grow",
}
VARIANTS = ("buggy", "fixed")

_STREAM = 0xF417


@dataclass(frozen=True)
class Injection:
    """What a scenario injects: on ``rank``, at ``steps`` (first execution), with ``params``."""

    scenario: str
    rank: int
    steps: tuple[int, ...]
    params: dict[str, Any] = field(default_factory=dict)
    period: int = 0  # > 0: the injection repeats every ``period`` steps (long runs)

    def hits(self, step: int) -> bool:
        if self.period:
            return step % self.period in {s % self.period for s in self.steps}
        return step in self.steps

    def at(self, rank: int, step: int) -> bool:
        return rank == self.rank and self.hits(step)


def check(scenario: str, variant: str) -> None:
    if scenario and scenario not in SCENARIOS:
        raise SpecError("scenario", f"unknown scenario {scenario!r}", f"valid: {', '.join(SCENARIOS)} (or empty)")
    if variant not in VARIANTS:
        raise SpecError("variant", f"unknown variant {variant!r}", f"valid: {', '.join(VARIANTS)}")


def draw(scenario: str, *, seed: int, world: int, steps: int, commit_every: int, dim: int,
         epoch_steps: int, collective_timeout_s: float, heartbeat_s: float, acceptable_pause_s: float,
         period: int = 0) -> Injection | None:
    """The injection of ``scenario`` for this run (None without a scenario); ``period`` > 0: drawn inside the first
    ``period`` steps (pass ``steps=period``) and repeated every ``period`` steps."""
    if not scenario:
        return None
    if period:
        from dataclasses import replace

        once = draw(scenario, seed=seed, world=world, steps=steps, commit_every=commit_every, dim=dim,
                    epoch_steps=epoch_steps, collective_timeout_s=collective_timeout_s, heartbeat_s=heartbeat_s,
                    acceptable_pause_s=acceptable_pause_s)
        return replace(once, period=period) if once is not None else None
    rng = np.random.default_rng([seed, _STREAM, int(scenario[1:])])
    rank = int(rng.integers(0, world))
    # a step inside the run that leaves at least one commit boundary after it
    first = commit_every + 1
    last = max(first, steps - commit_every)
    base = int(rng.integers(first, last + 1)) if last > first else first
    if scenario == "F1":  # an epoch boundary (learning-rate decay) between commits
        boundary = max(epoch_steps, (base // epoch_steps) * epoch_steps)
        if boundary % commit_every == 0:  # not on a commit boundary itself
            boundary += epoch_steps if (boundary + epoch_steps) < steps else 0
        return Injection(scenario, rank, (boundary,), {})
    if scenario == "F2":  # three timed-out allreduces inside one commit interval: the drift accumulates
        start = (base // commit_every) * commit_every + 1
        chosen = tuple(s for s in (start, start + 2, start + 4) if s < steps)
        lo = int(rng.integers(0, dim // 2))
        # every rank's allreduce of those steps misses its deadline (a stalled link: NCCL's watchdog timeout)
        return Injection(scenario, rank, chosen, {"timeout_s": 1e-6, "lo": lo, "hi": lo + dim // 2})
    if scenario == "F3":  # a stall well past what the detector tolerates (pause + ~6 sigma of the 100 ms floor)
        stall = max(3.0 * (acceptable_pause_s + heartbeat_s), acceptable_pause_s + heartbeat_s + 1.0)
        stall = min(stall, 0.8 * collective_timeout_s)  # the training collectives themselves do not time out
        return Injection(scenario, rank, (base,), {"stall_s": stall})
    if scenario == "F4":  # the read races the copy at one commit boundary
        boundary = max(commit_every, (base // commit_every) * commit_every)
        return Injection(scenario, rank, (boundary,), {})
    if scenario == "F5":  # the partition starts during step base's allreduce; a minority of one rank
        return Injection(scenario, rank, (base,), {"heal_after_s": 4.0 * (acceptable_pause_s + 10 * heartbeat_s)})
    if scenario == "F6":  # FP16 reduction for three steps
        return Injection(scenario, rank, tuple(s for s in (base, base + 1, base + 2) if s < steps), {})
    if scenario == "F7":
        lo = int(rng.integers(0, dim - dim // 8))
        mode = "lost" if rng.random() < 0.5 else "doubled"
        return Injection(scenario, rank, (base,), {
            "lo": lo, "hi": lo + dim // 8, "mode": mode,
            # the seed's trace fields (§3.1): the migration's start, and the op's epoch seen across two epochs
            "page_migration_start_ns": int(rng.integers(1_000_000, 9_000_000)),
            "atomic_op_epoch": [3, 2, 4],
            "migration_s": 2 * 1024 * 1024 / 25e9,  # a 2 MiB page over a 25 GB/s link
        })
    if scenario == "F8":  # every commit leaks (buggy); the injection marks no step
        return Injection(scenario, rank, (), {})
    raise SpecError("scenario", f"unknown scenario {scenario!r}", f"valid: {', '.join(SCENARIOS)}")
