"""The validate-and-commit node: data-parallel training whose replicas are checked identical every k steps.

Rules (one rank; every rank runs the same node):

* Training (phase ``train``): step k is local work ``commit.grad`` on (w, g), an allreduce of g into ``gsum``
  (``result_into``), then work ``commit.apply`` (``w −= lr_k / n · gsum``). The group is the current view.
* Validate and commit (every ``commit_every`` steps, at step 0 and at the last step): the rank copies w to a host
  staging buffer, digests it there (work ordered after the copy, so it reads finished data), also digests w itself
  (the true digest, for monitors), then allgathers a fixed-size int64 row ``[epoch, step, d0, d1, view_hash]``. It
  commits only if every row of the view is identical (the same epoch, step, view and digest): an atomic
  ``Checkpoint("commit", (w, cmeta))`` (the real backend writes a fresh folder and publishes a pointer), then goes on.
* Rollback (a digest mismatch, a collective that failed or timed out, a view change, a peer's higher epoch): the
  epoch goes up, the rank restores its last commit, allgathers ``[epoch, committed_step, d0, d1, boot]`` over the
  view, picks the root among the rows with the latest commit and the most common digest (the agreeing majority,
  lowest rank on ties), and takes the root's full parameters by broadcast (never a partial retransmission); a rank
  whose own commit was older re-commits, then all resume at the root's step. A failed sync retries at a higher
  epoch after a back-off.
* Membership: heartbeats every ``heartbeat_s`` to every peer on their own timer; one phi-accrual detector per peer
  (:mod:`seedance.models.phi`, Akka's defaults unless configured). With ``heartbeat_fanout`` k > 0 a rank
  heartbeats only its k ring successors (``rank + 1 .. rank + k`` mod n), so it watches its k predecessors, and
  tells every rank of each verdict it reaches (a :class:`Verdict`: offline, or heard again), which each adopts as
  its own: O(n·k) heartbeats per period instead of O(n²), for clusters of hundreds of ranks (SWIM-style
  dissemination, Das, Gupta & Motivala, DSN 2002, with ring monitoring instead of random probes). A peer whose phi reaches the threshold is
  declared offline and leaves the view (a view change); a suspected peer heard again rejoins (a false offline when
  it heartbeats with the same boot id, i.e. it never restarted). A view must hold a majority of the world; a
  minority waits. Heartbeats carry the epoch: a rank that hears a higher one rolls back to it.
* Handles: the persistent buffers (w, g, gsum, stage, cmeta, g16) live for the node's life; every temporary one
  (the commit's event, the partial-gradient and sync buffers) is freed on every path, failures included.
* Everything the analysis needs is reported as ``Observe`` replica events (key = the event kind), so the simulator
  and the real backend report the same things.

Scenario variants (``scenario``, ``variant``): :mod:`.scenarios`.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from seedance.errors import SpecError
from seedance.models.phi import PhiAccrualDetector, PhiConfig
from seedance.models.protocols.commit import scenarios
from seedance.models.protocols.contract import (
    Annotate, Checkpoint, CollectiveDone, CreateBuffer, DurableState, Effects, FreeBuffer, Observe, Restore, Send,
    SetTimer, StartCollective, StartWork, WorkDone,
)

PERSISTENT = ("w", "g", "gsum", "stage", "cmeta", "g16")


@dataclass(frozen=True, kw_only=True, slots=True)
class Heartbeat:
    epoch: int
    boot: int
    committed: int
    seq: int


@dataclass(frozen=True, kw_only=True, slots=True)
class Verdict:
    """A watcher's verdict on ``peer`` (heartbeat fan-out): offline, or heard again (``offline=False``)."""

    peer: int
    boot: int
    offline: bool
    epoch: int


@dataclass(frozen=True, kw_only=True)
class CommitConfig:
    dim: int = 64  # parameters of the model (real arrays)
    batch: int = 32
    lr: float = 0.05
    lr_decay: float = 0.5  # the learning rate is multiplied by this at every epoch boundary
    epoch_steps: int = 15  # steps per data epoch (learning-rate boundary)
    steps: int = 60
    commit_every: int = 10
    seed: int = 0  # data, initial parameters and the scenario's injection
    scenario: str = ""
    variant: str = "fixed"
    heartbeat_s: float = 0.05
    phi_threshold: float = 8.0
    phi_min_std_s: float = 0.1
    phi_acceptable_pause_s: float = 0.5
    phi_max_samples: int = 1000
    heartbeat_fanout: int = 0  # 0: heartbeat every peer; k > 0: the k ring successors, verdicts told to all
    collective_timeout_s: float = 3.0
    step_flops: float = 1.5e9  # what one training step of the modelled model costs (simulator)
    grad_bytes: int = 4_000_000  # what its gradient allreduce moves (simulator)
    observe_params: bool = True  # votes report the parameters too (replica L2 distances); off for large models
    # long runs (`seedance real test-consensus` / `soak`): train until the runtime's clock reads deadline_s (one
    # clock for every rank and incarnation: the real backend's is the machine's monotonic clock, the simulator's its
    # virtual time; 0: train for `steps`); the ranks stop together at the first commit whose vote carries a rank's
    # "time is up" flag. The scenario's injection repeats every inject_period steps (0: once); the learning rate
    # cycles through lr_cycle epochs (0: decays for ever), so a long run keeps training and an injection keeps biting.
    deadline_s: float = 0.0
    inject_period: int = 0
    lr_cycle: int = 0

    @classmethod
    def from_mapping(cls, config: Mapping[str, Any]) -> CommitConfig:
        known = {f.name: f for f in fields(cls)}
        values = {}
        for key, value in config.items():
            if key not in known:
                raise SpecError(f"--set {key}", "unknown commit option", f"valid: {', '.join(sorted(known))}")
            values[key] = value
        out = cls(**values)
        out.validate()
        return out

    def validate(self) -> None:
        ints = {"dim": 2, "batch": 1, "epoch_steps": 1, "steps": 1, "commit_every": 1, "seed": 0,
                "phi_max_samples": 1, "grad_bytes": 0, "inject_period": 0, "lr_cycle": 0, "heartbeat_fanout": 0}
        for name, lo in ints.items():
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < lo:
                raise SpecError(f"--set {name}", f"must be an integer >= {lo}, got {value!r}")
        positive = ("lr", "heartbeat_s", "phi_threshold", "phi_min_std_s", "collective_timeout_s")
        for name in (*positive, "lr_decay", "phi_acceptable_pause_s", "step_flops", "deadline_s"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
                    or value < 0 or (value == 0 and name in positive):
                raise SpecError(f"--set {name}", f"must be a finite number {'> 0' if name in positive else '>= 0'}, "
                                f"got {value!r}")
        if self.dim > 1_000_000:
            raise SpecError("--set dim", f"{self.dim} parameters is more than this model is for", "2 .. 1000000")
        if not isinstance(self.observe_params, bool):
            raise SpecError("--set observe_params", f"must be true or false, got {self.observe_params!r}")
        if not isinstance(self.scenario, str) or not isinstance(self.variant, str):
            raise SpecError("--set scenario", "scenario and variant are strings",
                            f"scenarios: {', '.join(scenarios.SCENARIOS)}; variants: {', '.join(scenarios.VARIANTS)}")
        scenarios.check(self.scenario, self.variant)

    @property
    def buggy(self) -> bool:
        return self.variant == "buggy"


class CommitNode:
    """One rank of the validate-and-commit protocol; see the module docstring."""

    def __init__(self, node_id: int, num_nodes: int, rng: np.random.Generator, config: Mapping[str, Any]) -> None:
        self.node_id = node_id
        self.num_nodes = num_nodes
        self.rng = rng
        self.cfg = cfg = config if isinstance(config, CommitConfig) else CommitConfig.from_mapping(config)
        self.boot = int(rng.integers(1, 1 << 62))
        phi = PhiConfig(threshold=cfg.phi_threshold, max_sample_size=cfg.phi_max_samples,
                        min_std_deviation_s=cfg.phi_min_std_s, acceptable_heartbeat_pause_s=cfg.phi_acceptable_pause_s,
                        first_heartbeat_estimate_s=cfg.heartbeat_s)
        k = cfg.heartbeat_fanout
        watched = [p for p in range(num_nodes) if p != node_id] if k <= 0 or k >= num_nodes - 1 else \
            sorted((node_id - i) % num_nodes for i in range(1, k + 1))  # fan-out: the predecessors heartbeat me
        self.detectors = {p: PhiAccrualDetector(phi) for p in watched}
        self.peer_boot: dict[int, int] = {}
        self.suspected: dict[int, int | None] = {}  # peer -> its boot id when it was declared offline
        self.injection = scenarios.draw(cfg.scenario, seed=cfg.seed, world=num_nodes,
                                        steps=cfg.inject_period or cfg.steps, commit_every=cfg.commit_every,
                                        dim=cfg.dim, epoch_steps=cfg.epoch_steps,
                                        collective_timeout_s=cfg.collective_timeout_s, heartbeat_s=cfg.heartbeat_s,
                                        acceptable_pause_s=cfg.phi_acceptable_pause_s, period=cfg.inject_period)
        self.stop_at: int | None = None  # deadline_s: the step of the commit that ended the run
        self.fired: set[tuple[str, int]] = set()
        self.view: tuple[int, ...] = tuple(range(num_nodes))
        self.epoch = 0
        self.step = 0
        self.phase = "boot"  # boot | train | vote | commit | sync | wait | done
        self.committed_step = -1
        self.committed_digest = (0, 0)
        self.handles: set[str] = set()
        self.temps: set[str] = set()
        self.events: set[str] = set()  # the commits' temporary events (F8)
        self.hb_seq = 0
        self.host_busy = 0
        self.pending: dict[str, Any] = {}
        self.loss: float | None = None
        # what monitors and the analysis read: the latest commits (bounded, a long run must not grow) and their count
        self.commits: list[dict[str, Any]] = []
        self.commits_total = 0
        self.counts = {"commits": 0, "rollbacks": 0, "alarms": 0, "offline": 0, "false_offline": 0, "resyncs": 0,
                       "leak_alarms": 0, "split_views": 0, "steps_run": 0}
        self.commit_time_s = 0.0
        self.t_start: float | None = None
        self.t_done: float | None = None
        self.sync_since: float | None = None
        self.vote_since: float | None = None
        self.live_at_commit: list[int] = []

    # ------------------------------------------------------------------------------------------------ helpers
    def _injected(self, scenario: str, step: int) -> bool:
        inj = self.injection
        if inj is None or inj.scenario != scenario or not inj.at(self.node_id, step):
            return False
        return self._fire(scenario, step)

    def _window(self, scenario: str, step: int) -> bool:
        """A global injection (every rank): True the first time this rank runs ``step`` of the window."""
        inj = self.injection
        if inj is None or inj.scenario != scenario or not inj.hits(step):
            return False
        return self._fire(scenario, step)

    def _fire(self, scenario: str, step: int) -> bool:
        if (scenario, step) in self.fired:
            return False
        self.fired.add((scenario, step))
        if self.cfg.inject_period:  # a replay never goes back further than a period: forget older firings
            self.fired = {f for f in self.fired if f[1] >= step - 2 * self.cfg.inject_period}
        return True

    def _lr(self, step: int) -> float:
        epoch = step // self.cfg.epoch_steps
        return self.cfg.lr * self.cfg.lr_decay ** (epoch % self.cfg.lr_cycle if self.cfg.lr_cycle else epoch)

    def _view_hash(self) -> int:
        return zlib.crc32(repr(self.view).encode())

    def _create(self, handle: str, **kw: Any) -> CreateBuffer:
        self.handles.add(handle)
        return CreateBuffer(handle=handle, **kw)

    def _free(self, handle: str) -> FreeBuffer:
        self.handles.discard(handle)
        self.temps.discard(handle)
        self.events.discard(handle)
        return FreeBuffer(handle=handle)

    def _release_temps(self) -> Effects:
        """Free every temporary handle (the buggy F8 variant keeps its events: the leak)."""
        keep = self.events if (self.cfg.scenario == "F8" and self.cfg.buggy) else set()
        return [self._free(h) for h in sorted(self.temps | self.events) if h not in keep and h in self.handles]

    @property
    def live_handles(self) -> int:
        return len(self.handles)

    @property
    def leaked_handles(self) -> int:
        return len(self.handles - set(PERSISTENT))

    def _quorum(self) -> bool:
        if self.cfg.scenario == "F5" and self.cfg.buggy:  # v2.0.2: any view goes on (no view agreement)
            return True
        return 2 * len(self.view) > self.num_nodes

    def _collective(self, cid: Any, op: str, payload: Any, *, timeout_s: float, nominal: int, root: int | None = None,
                    result_into: str | None = None) -> StartCollective:
        return StartCollective(collective_id=cid, op=op, group=self.view, payload=payload, nominal_size_bytes=nominal,
                               timeout_s=timeout_s, root=root, result_into=result_into)

    @property
    def _gpart(self) -> str:
        return f"gpart-{self.epoch}-{self.step}"

    @property
    def _sync_timeout(self) -> float:
        return 3.0 * self.cfg.collective_timeout_s

    # ---------------------------------------------------------------------------------------------- lifecycle
    def on_start(self, now: float) -> Effects:
        self.t_start = now
        dim = self.cfg.dim
        effects: Effects = [self._create("w", shape=(dim,)), self._create("g", shape=(dim,)),
                            self._create("gsum", shape=(dim,)), self._create("stage", shape=(dim,)),
                            self._create("cmeta", shape=(4,), dtype="int64"),
                            self._create("g16", shape=(dim,), dtype="float16"),
                            StartWork(work_id=("init", 0), op="commit.init", buffers=("w",),
                                      params={"seed": self.cfg.seed}),
                            SetTimer(name="hb", delay_s=self.cfg.heartbeat_s)]
        self.phase = "boot"
        return effects

    def on_recover(self, durable: DurableState, now: float) -> Effects:
        self.t_start = now
        dim = self.cfg.dim
        effects: Effects = [self._create("g", shape=(dim,)), self._create("gsum", shape=(dim,)),
                            self._create("stage", shape=(dim,)), self._create("g16", shape=(dim,), dtype="float16"),
                            SetTimer(name="hb", delay_s=self.cfg.heartbeat_s)]
        if "commit" in durable.checkpoints:
            self.handles.update(("w", "cmeta"))
            effects += [Restore(name="commit"), StartWork(work_id=("meta", 0), op="to_host", buffers=("cmeta",))]
        else:
            effects += [self._create("w", shape=(dim,)), self._create("cmeta", shape=(4,), dtype="int64"),
                        StartWork(work_id=("init", 0), op="commit.init", buffers=("w",),
                                  params={"seed": self.cfg.seed})]
        self.phase = "boot"
        effects.append(Annotate(name="recover", attrs={"checkpoint": "commit" in durable.checkpoints}))
        return effects

    # ------------------------------------------------------------------------------------------- membership
    def _heartbeats(self) -> Effects:
        self.hb_seq += 1
        beat = Heartbeat(epoch=self.epoch, boot=self.boot, committed=self.committed_step, seq=self.hb_seq)
        return [Send(dst=p, message=beat, size_bytes=40) for p in self._targets]

    @property
    def _targets(self) -> list[int]:
        n, k = self.num_nodes, self.cfg.heartbeat_fanout
        if k <= 0 or k >= n - 1:
            return [p for p in range(n) if p != self.node_id]
        return [(self.node_id + i) % n for i in range(1, k + 1)]

    def _tell(self, peer: int, offline: bool) -> Effects:
        """Heartbeat fan-out: every other rank adopts this verdict (it does not watch ``peer`` itself)."""
        if self.cfg.heartbeat_fanout <= 0:
            return []
        verdict = Verdict(peer=peer, boot=self.peer_boot.get(peer, 0), offline=offline, epoch=self.epoch)
        return [Send(dst=p, message=verdict, size_bytes=32) for p in range(self.num_nodes)
                if p not in (self.node_id, peer)]

    def on_timer(self, name: Any, now: float) -> Effects:
        if name == "hb":
            effects: Effects = [SetTimer(name="hb", delay_s=self.cfg.heartbeat_s)]
            starved = self.cfg.scenario == "F3" and self.cfg.buggy and self.host_busy > 0
            if not starved:  # F3 buggy: the heartbeat shares its core with the host work, which holds it
                effects += self._heartbeats()
            effects += self._check_peers(now)
            return effects
        if isinstance(name, tuple) and name[0] == "retry":
            if self.phase in ("sync", "wait") and name[1] == self.epoch:
                return self._enter_sync(self.epoch + 1, now, "retry")
            return []
        return []

    def _check_peers(self, now: float) -> Effects:
        effects: Effects = []
        changed = False
        for peer, detector in self.detectors.items():
            if peer in self.suspected or detector.last is None:
                continue
            if not detector.available(now):
                self.suspected[peer] = self.peer_boot.get(peer)
                self.counts["offline"] += 1
                effects.append(Observe(what="observe", key="offline",
                                       value={"peer": peer, "phi": round(detector.phi(now), 3), "t": now}))
                effects += self._tell(peer, True)
                changed = changed or peer in self.view
        if changed:
            effects += self._view_change(now, "offline")
        return effects

    def _alive_view(self) -> tuple[int, ...]:
        """Me and every peer not suspected (a peer never heard from is available, as in Akka)."""
        return tuple(p for p in range(self.num_nodes) if p == self.node_id or p not in self.suspected)

    def _view_change(self, now: float, reason: str) -> Effects:
        new = self._alive_view()
        if new == self.view:
            return []
        self.view = new
        if self.phase == "boot":
            return []
        return self._enter_sync(self.epoch + 1, now, reason)

    def on_message(self, src: int, message: Any, now: float) -> Effects:
        if type(message) is Verdict and 0 <= src < self.num_nodes:
            return self._adopt(message, now)
        if type(message) is not Heartbeat or src not in self.detectors:
            return []
        self.detectors[src].heartbeat(now)
        effects: Effects = []
        if src in self.suspected:
            old_boot = self.suspected.pop(src)
            if old_boot is not None and old_boot == message.boot:
                self.counts["false_offline"] += 1
                effects.append(Observe(what="observe", key="false-offline", value={"peer": src, "t": now}))
            self.peer_boot[src] = message.boot
            effects += self._tell(src, False)
        self.peer_boot[src] = message.boot
        if src not in self.view and self.phase != "boot":
            effects += self._view_change(now, "rejoin")
            if self.phase == "sync" and message.epoch <= self.epoch:
                return effects
        if message.epoch > self.epoch and self.phase != "boot":
            effects += self._enter_sync(message.epoch, now, "epoch")
        elif message.epoch > self.epoch:
            self.epoch = message.epoch
        return effects

    def _adopt(self, verdict: Verdict, now: float) -> Effects:
        """A watcher's verdict (heartbeat fan-out): suspect or clear ``peer`` as if my own detector had."""
        peer = verdict.peer
        if peer == self.node_id or not 0 <= peer < self.num_nodes:
            return []
        effects: Effects = []
        if verdict.offline and peer not in self.suspected:
            self.suspected[peer] = verdict.boot
            effects += self._view_change(now, "offline")
        elif not verdict.offline and peer in self.suspected:
            self.suspected.pop(peer)
            self.peer_boot[peer] = verdict.boot
            if self.phase != "boot":
                effects += self._view_change(now, "rejoin")
        if verdict.epoch > self.epoch and self.phase != "boot":
            effects += self._enter_sync(verdict.epoch, now, "epoch")
        elif verdict.epoch > self.epoch:
            self.epoch = verdict.epoch
        return effects

    # --------------------------------------------------------------------------------------------- training
    def _start_step(self, now: float) -> Effects:
        cfg = self.cfg
        k = self.step
        if not self._quorum():
            self.phase = "wait"
            return [SetTimer(name=("retry", self.epoch), delay_s=4 * cfg.heartbeat_s)]
        self.phase = "train"
        self.pending = {"step": k}
        effects: Effects = []
        params: dict[str, Any] = {"seed": cfg.seed, "rank": self.node_id, "step": k, "batch": cfg.batch}
        if self._injected("F3", k):  # host work on this rank's core before the step
            self.host_busy += 1
            effects.append(StartWork(work_id=("host", self.epoch, k), op="idle",
                                     params={"duration_s": self.injection.params["stall_s"]}))
        fp16 = self._window("F6", k)
        self.pending["fp16"] = fp16
        effects.append(StartWork(work_id=("grad", self.epoch, k), op="commit.grad",
                                 buffers=("w", "g16" if fp16 else "g"), params=params, flops=cfg.step_flops,
                                 bytes_moved=3 * cfg.grad_bytes))
        return effects

    def _after_grad(self, done: WorkDone, now: float) -> Effects:
        cfg = self.cfg
        k = self.step
        self.loss = float(done.result) if done.ok and done.result is not None else self.loss
        n = len(self.view)
        if self.pending.get("fp16"):
            if cfg.buggy:  # v2.0.2: async_op=True without wait(): the update reads g16 while it is being reduced
                self.pending["waiting"] = {"ar", "apply"}
                return [self._collective(("ar", self.epoch, k), "allreduce", "g16", timeout_s=cfg.collective_timeout_s,
                                         nominal=cfg.grad_bytes // 2, result_into="g16"),
                        StartWork(work_id=("apply", self.epoch, k), op="commit.apply", buffers=("w", "g16"),
                                  params={"scale": self._lr(k) / n}, bytes_moved=3 * cfg.grad_bytes)]
            self.pending["waiting"] = {"ar"}
            return [self._collective(("ar", self.epoch, k), "allreduce", "g16", timeout_s=cfg.collective_timeout_s,
                                     nominal=cfg.grad_bytes // 2, result_into="g16")]
        self.pending["waiting"] = {"ar"}
        timeout = cfg.collective_timeout_s
        if self._window("F2", k):  # the network stalls this allreduce past its deadline (on every rank)
            timeout = self.injection.params["timeout_s"]
            self.pending["deadline_injected"] = True
        return [self._collective(("ar", self.epoch, k), "allreduce", "g", timeout_s=timeout,
                                 nominal=cfg.grad_bytes, result_into="gsum")]

    def _apply(self, now: float, grad: str) -> Effects:
        cfg = self.cfg
        k = self.step
        lr = self._lr(k)
        if self._injected("F1", k):  # this rank crosses the epoch boundary one step late
            lr = self._lr(k - 1)
        params: dict[str, Any] = {"scale": lr / len(self.view)}
        effects: Effects = []
        if self._injected("F7", k):
            inj = self.injection.params
            effects.append(Annotate(name="page-migration", attrs={
                "page_migration_start": inj["page_migration_start_ns"], "atomic_op_epoch": inj["atomic_op_epoch"],
                "mode": inj["mode"], "variant": cfg.variant}))
            if cfg.buggy:  # atomics on the page while it migrates: lost (x0) or applied twice (x2)
                params["fault"] = [inj["lo"], inj["hi"], 0.0 if inj["mode"] == "lost" else 2.0]
            else:  # wait until the prefetch completed, then add
                params["duration_s"] = inj["migration_s"]
        effects.append(StartWork(work_id=("apply", self.epoch, k), op="commit.apply", buffers=("w", grad),
                                 params=params, bytes_moved=3 * cfg.grad_bytes))
        return effects

    def _step_done(self, now: float) -> Effects:
        self.step += 1
        self.counts["steps_run"] += 1
        self.pending = {}
        if self.step % self.cfg.commit_every == 0 or self.step >= self.cfg.steps:
            return self._start_vote(now)
        return self._start_step(now)

    def on_work_done(self, done: WorkDone, now: float) -> Effects:
        wid = done.work_id
        kind = wid[0]
        if kind == "host":
            self.host_busy = max(0, self.host_busy - 1)
            return []
        if kind in ("init", "meta"):
            return self._booted(done, now)
        if kind == "final":
            if not done.ok:
                return []
            return [Observe(what="observe", key="final", value={
                "step": self.step, "epoch": self.epoch, "loss": self.loss, "params": done.result,
                "live_handles": self.live_handles, "leaked_handles": self.leaked_handles,
                "commit_time_s": self.commit_time_s, "train_time_s": (now - self.t_start) if self.t_start is not None else None,
                "counts": dict(self.counts), "t": now})]
        if len(wid) > 1 and wid[1] != self.epoch:
            return []  # work of an abandoned epoch: its results are ignored
        if not done.ok:
            return self._enter_sync(self.epoch + 1, now, f"work-failed: {done.error}")
        if kind == "grad" and self.phase == "train" and wid[2] == self.step:
            return self._after_grad(done, now)
        if kind == "apply" and self.phase == "train" and wid[2] == self.step:
            waiting = self.pending.get("waiting", set())
            waiting.discard("apply")
            if waiting:
                return []
            return self._step_done(now)
        if kind == "apply-partial" and self.phase == "train" and wid[2] == self.step:
            return [self._free(self._gpart)] + self._step_done(now)
        if kind == "slice" and self.phase == "train" and wid[2] == self.step:
            return [self._resend(0)]
        if kind in ("stats", "true") and self.phase == "vote" and wid[2] == self.step:
            return self._vote_digest(kind, done, now)
        if kind == "adopt" and self.phase == "sync":
            return self._adopted(now)
        return []

    def _booted(self, done: WorkDone, now: float) -> Effects:
        if done.work_id[0] == "meta" and done.ok:
            meta = [int(x) for x in done.result]
            self.epoch = max(self.epoch, meta[0] + 1)
            self.committed_step = meta[1]
            self.committed_digest = (meta[2], meta[3])
            self.step = meta[1]
            return self._enter_sync(self.epoch, now, "recovered")
        # first boot: vote on the initial parameters (step 0)
        self.view = self._alive_view()
        return self._start_vote(now)

    # -------------------------------------------------------------------------------------- validate, commit
    def _start_vote(self, now: float) -> Effects:
        cfg = self.cfg
        if not self._quorum():
            self.phase = "wait"
            return [SetTimer(name=("retry", self.epoch), delay_s=4 * cfg.heartbeat_s)]
        self.phase = "vote"
        self.vote_since = now
        k = self.step
        self.pending = {"step": k, "digests": {}}
        effects: Effects = []
        if cfg.scenario == "F8":  # validate-and-commit creates a temporary event and records it on the stream
            event = f"event-{self.epoch}-{k}"
            effects += [self._create(event, shape=(1,)),
                        StartWork(work_id=("event", self.epoch, k), op="commit.record_event", buffers=(event,),
                                  params={"step": float(k)})]
            self.events.add(event)
        copy = StartWork(work_id=("d2h", self.epoch, k), op="copy", buffers=("stage", "w"),
                         bytes_moved=4 * cfg.dim)
        stats = StartWork(work_id=("stats", self.epoch, k), op="commit.digest", buffers=("stage",),
                          bytes_moved=4 * cfg.dim)
        if self._injected("F4", k) and cfg.buggy:  # the statistics are read before the D2H copy completes
            effects += [stats, copy]
        else:
            effects += [copy, stats]
        effects.append(StartWork(work_id=("true", self.epoch, k), op="commit.digest", buffers=("w",),
                                 params={"with_values": cfg.observe_params}, bytes_moved=4 * cfg.dim))
        return effects

    def _vote_digest(self, kind: str, done: WorkDone, now: float) -> Effects:
        self.pending["digests"][kind] = done.result
        if len(self.pending["digests"]) < 2:
            return []
        k = self.step
        voted = self.pending["digests"]["stats"]["digest"]
        true = self.pending["digests"]["true"]
        self.pending["true"] = true
        row = [self.epoch, k, voted[0], voted[1], self._view_hash()]
        if self.cfg.deadline_s:  # not agreed on: a sixth column, "my time is up" (any rank's flag ends the run)
            row.append(int(now >= self.cfg.deadline_s))
        return [self._collective(("vote", self.epoch, k), "allgather", np.array(row, dtype=np.int64),
                                 timeout_s=self._sync_timeout, nominal=40)]

    def _voted(self, done: CollectiveDone, now: float) -> Effects:
        cfg = self.cfg
        k = self.step
        rows = np.asarray(done.result)
        if cfg.scenario == "F1" and cfg.buggy:  # v2.0.2: every rank at the same epoch and step is enough
            agree = bool((rows[:, [0, 1, 4]] == rows[0, [0, 1, 4]]).all())
        else:
            agree = bool((rows[:, :5] == rows[0, :5]).all())
        true = self.pending.get("true", {})
        mine = [int(x) for x in rows[self.view.index(self.node_id)]]
        observe = Observe(what="observe", key="vote", value={
            "epoch": self.epoch, "step": k, "view": list(self.view), "agree": agree,
            "voted": mine[2:4], "true": true.get("digest"), "params": true.get("values"), "t": now})
        if not agree:
            self.counts["alarms"] += 1
            return [observe, Observe(what="observe", key="alarm", value={"epoch": self.epoch, "step": k, "t": now})] \
                + self._enter_sync(self.epoch + 1, now, "mismatch")
        self.phase = "commit"
        self.committed_step = k  # every later effect waits until the checkpoint is durable (a crash loses the node)
        self.committed_digest = (mine[2], mine[3])
        # the rows as voted; agreeing rows are one row repeated (stored once: a record is O(1) however large the view)
        held = np.broadcast_to(rows[0], rows.shape) if agree and (rows == rows[0]).all() else rows.copy()
        record = {"epoch": self.epoch, "step": k, "view": self.view, "rows": held,
                  "voted": tuple(mine[2:4]), "true": tuple(true.get("digest") or mine[2:4]), "t": now}
        self.commits = [*self.commits[-63:], record]
        self.commits_total += 1
        if rows.shape[1] > 5 and rows[:, 5].any():  # deadline_s: time is up, every rank of the view stops here
            self.stop_at = k
        effects: Effects = [observe, self._free("cmeta"),
                            self._create("cmeta", data=np.array([self.epoch, k, mine[2], mine[3]], dtype=np.int64)),
                            Checkpoint(name="commit", buffers=("w", "cmeta"), notify=("commit", self.epoch, k))]
        if not (cfg.scenario == "F8" and cfg.buggy):  # the event's lifetime is the call's
            effects += [self._free(e) for e in sorted(self.events)]
        return effects

    def on_persisted(self, token: Any, now: float) -> Effects:
        kind, epoch, k = token
        if kind == "commit":  # durable whatever happened since: report it; go on only if nothing changed
            record = next(r for r in reversed(self.commits) if r["epoch"] == epoch and r["step"] == k)
            self.counts["commits"] += 1
            if self.vote_since is not None:
                self.commit_time_s += now - self.vote_since
                self.vote_since = None
            effects: Effects = [Observe(what="apply", key="commit", value={
                "epoch": epoch, "step": k, "digest": list(record["true"]), "view": list(record["view"]),
                "live_handles": self.live_handles, "t": now})]
            effects += self._memcheck(now)
            if epoch == self.epoch and self.phase == "commit" and k == self.step:
                effects += self._resume(now)
            return effects
        if epoch != self.epoch:
            return []
        if kind == "resync" and self.phase == "sync":
            return self._resume(now)
        return []

    def _memcheck(self, now: float) -> Effects:
        """The leak check (chapter 4's memory sampling): live handles must not grow from commit to commit."""
        self.live_at_commit = [*self.live_at_commit[-2:], self.live_handles]
        last = self.live_at_commit
        if len(last) == 3 and last[0] < last[1] < last[2] and self.counts["leak_alarms"] == 0:
            self.counts["leak_alarms"] += 1
            return [Observe(what="observe", key="leak", value={"live_handles": last, "t": now})]
        return []

    def _resume(self, now: float) -> Effects:
        if self.step >= self.cfg.steps or (self.stop_at is not None and self.step >= self.stop_at):
            self.phase = "done"
            if self.t_done is None:
                self.t_done = now
            return [StartWork(work_id=("final", self.epoch), op="to_host", buffers=("w",))]
        return self._start_step(now)

    # ----------------------------------------------------------------------------------------- collectives
    def on_collective_done(self, done: CollectiveDone, now: float) -> Effects:
        cid = done.collective_id
        kind, epoch = cid[0], cid[1]
        if epoch != self.epoch or (kind == "ar-part" and cid[2] != self.step):
            # a collective of an abandoned epoch; one that wrote a temporary buffer created it: free it now
            stale = {"bcast": f"wsync-{epoch}", "ar-part": f"gpart-{epoch}-{cid[2] if len(cid) > 2 else 0}"}.get(kind)
            if done.ok and stale is not None and stale not in self.handles:
                return [FreeBuffer(handle=stale)]
            return []
        if kind == "ar" and self.phase == "train" and cid[2] == self.step:
            if not done.ok:
                if self.cfg.scenario == "F2" and self.cfg.buggy and done.error == "timeout":
                    return self._partial_retransmit(now)
                return self._enter_sync(self.epoch + 1, now, f"allreduce: {done.error}")
            waiting = self.pending.get("waiting", set())
            waiting.discard("ar")
            effects: Effects = []
            if self.pending.get("deadline_injected"):  # the real collective finished before its 1 µs deadline fired
                effects.append(Observe(what="observe", key="injection-missed", value={"step": self.step, "t": now}))
            if self.pending.get("fp16"):
                if self.cfg.buggy:
                    return effects + (self._step_done(now) if not waiting else [])
                return effects + self._apply(now, "g16")
            return effects + self._apply(now, "gsum")
        if kind == "ar-part" and self.phase == "train" and cid[2] == self.step:
            if not done.ok:
                if cid[3] < 3:  # v2.0.2 resends the slice until it goes through (the group may be re-forming)
                    return [self._resend(cid[3] + 1)]
                return self._enter_sync(self.epoch + 1, now, f"allreduce: {done.error}")
            inj = self.injection.params
            return [StartWork(work_id=("apply-partial", self.epoch, self.step), op="commit.apply_partial",
                              buffers=("w", "g", self._gpart),
                              params={"scale": self._lr(self.step) / len(self.view), "n": len(self.view),
                                      "lo": inj["lo"], "hi": inj["hi"]})]
        if kind == "vote" and self.phase == "vote" and cid[2] == self.step:
            if not done.ok:
                return self._enter_sync(self.epoch + 1, now, f"vote: {done.error}")
            return self._voted(done, now)
        if kind == "view" and self.phase == "sync":
            if not done.ok:
                return self._sync_failed(now, done.error)
            return self._choose_root(done, now)
        if kind == "bcast" and self.phase == "sync":
            if not done.ok:
                return self._sync_failed(now, done.error)
            wsync = f"wsync-{self.epoch}"
            self.handles.add(wsync)
            self.temps.add(wsync)
            return [StartWork(work_id=("adopt", self.epoch), op="copy", buffers=("w", wsync),
                              bytes_moved=8 * self.cfg.dim)]
        return []

    def _resend(self, attempt: int) -> StartCollective:
        return self._collective(("ar-part", self.epoch, self.step, attempt), "allreduce", self._gpart,
                                timeout_s=self._sync_timeout, nominal=self.cfg.grad_bytes // 2,
                                result_into=self._gpart)

    def _partial_retransmit(self, now: float) -> Effects:
        """v2.0.2 (F2 buggy): resend only slice [lo, hi) of the gradient; apply the rest locally."""
        inj = self.injection.params
        self.temps.add(self._gpart)
        return [self._create(self._gpart, shape=(inj["hi"] - inj["lo"],)),
                StartWork(work_id=("slice", self.epoch, self.step), op="commit.slice", buffers=(self._gpart, "g"),
                          params={"lo": inj["lo"], "hi": inj["hi"]}),
                Annotate(name="partial-retransmission", attrs={"step": self.step, "lo": inj["lo"], "hi": inj["hi"]})]

    # ---------------------------------------------------------------------------------------- rollback, sync
    def _enter_sync(self, epoch: int, now: float, reason: str) -> Effects:
        self.epoch = max(epoch, self.epoch)
        was = self.phase
        effects: Effects = self._release_temps()
        self.pending = {}
        if was not in ("sync", "wait"):  # a rollback (a retry of a sync is not another one)
            self.counts["rollbacks"] += 1
            self.sync_since = now
            effects.append(Observe(what="observe", key="rollback", value={
                "epoch": self.epoch, "reason": reason, "from_step": self.step, "to_step": self.committed_step,
                "view": list(self.view), "t": now}))
        elif self.sync_since is None:
            self.sync_since = now
        self.phase = "sync"
        if self.committed_step >= 0:
            effects.append(Restore(name="commit"))
            self.step = self.committed_step
        if not self._quorum():
            self.phase = "wait"
            effects.append(SetTimer(name=("retry", self.epoch), delay_s=4 * self.cfg.heartbeat_s))
            return effects
        row = [self.epoch, self.committed_step, self.committed_digest[0], self.committed_digest[1],
               self._view_hash()]
        if self.cfg.deadline_s:  # whether my last commit ended the run (a rank that missed that vote learns it here)
            row.append(int(self.stop_at is not None and self.stop_at == self.committed_step))
        row = np.array(row, dtype=np.int64)
        effects.append(self._collective(("view", self.epoch), "allgather", row, timeout_s=self._sync_timeout,
                                        nominal=40))
        return effects

    def _sync_failed(self, now: float, error: str | None) -> Effects:
        delay = self.cfg.heartbeat_s * (2.0 + 4.0 * float(self.rng.random()))
        return [Annotate(name="sync-failed", attrs={"epoch": self.epoch, "error": str(error)}),
                SetTimer(name=("retry", self.epoch), delay_s=delay)]

    def _choose_root(self, done: CollectiveDone, now: float) -> Effects:
        rows = np.asarray(done.result)
        hashes = {int(r[4]) for r in rows}
        if len(hashes) > 1:  # the members do not hold the same view: try again at a higher epoch
            return self._sync_failed(now, "views differ")
        latest = int(rows[:, 1].max())
        candidates = [i for i, r in enumerate(rows) if int(r[1]) == latest]
        digests: dict[tuple[int, int], list[int]] = {}
        for i in candidates:
            digests.setdefault((int(rows[i, 2]), int(rows[i, 3])), []).append(i)
        split = len({(int(r[1]), int(r[2]), int(r[3])) for r in rows if int(r[1]) >= 0}) > 1 and \
            any(int(a[1]) == int(b[1]) and (int(a[2]), int(a[3])) != (int(b[2]), int(b[3]))
                for a in rows for b in rows)
        effects: Effects = []
        if split:  # two commits of one step with different states: the view was split
            self.counts["split_views"] += 1
            effects.append(Observe(what="observe", key="split-view", value={
                "epoch": self.epoch, "rows": [[int(x) for x in r] for r in rows], "t": now}))
        best = max(digests.items(), key=lambda item: (len(item[1]), -min(item[1])))
        root = self.view[min(best[1])]
        self.pending = {"target": (latest, best[0]), "root": root,
                        "stop": bool(rows.shape[1] > 5 and any(int(r[5]) for r in rows if int(r[1]) == latest))}
        if latest < 0:  # nothing committed anywhere yet: every rank starts from the same initial parameters
            return effects + self._restart()
        return effects + [self._collective(("bcast", self.epoch), "broadcast", "w", timeout_s=self._sync_timeout,
                                           nominal=4 * self.cfg.dim, root=root, result_into=f"wsync-{self.epoch}")]

    def _restart(self) -> Effects:
        """No commit anywhere: re-initialise and vote on step 0 again."""
        self.phase = "boot"
        self.step = 0
        return [StartWork(work_id=("init", self.epoch), op="commit.init", buffers=("w",),
                          params={"seed": self.cfg.seed})]

    def _adopted(self, now: float) -> Effects:
        latest, digest = self.pending["target"]
        if self.pending.get("stop"):
            self.stop_at = latest
        effects: Effects = [self._free(f"wsync-{self.epoch}")]
        stale = (self.committed_step, tuple(self.committed_digest)) != (latest, tuple(digest))
        self.step = latest
        self.committed_step = latest
        self.committed_digest = digest
        self.counts["resyncs"] += 1
        recovery = now - self.sync_since if self.sync_since is not None else 0.0
        self.sync_since = None
        effects.append(Observe(what="observe", key="resync", value={
            "epoch": self.epoch, "step": latest, "root": self.pending["root"], "view": list(self.view),
            "recovery_s": recovery, "stale": stale, "t": now}))
        if stale:  # my own commit was older (or another state): make the root's mine
            effects += [self._free("cmeta"),
                        self._create("cmeta", data=np.array([self.epoch, latest, digest[0], digest[1]],
                                                            dtype=np.int64)),
                        Checkpoint(name="commit", buffers=("w", "cmeta"), notify=("resync", self.epoch, latest))]
            return effects
        return effects + self._resume(now)

    def on_client_request(self, request: Any, now: float) -> Effects:
        return []
