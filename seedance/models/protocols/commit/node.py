"""The validate-and-commit node: data-parallel training whose replicas are checked identical every k steps.

Rules (one rank; every rank runs the same node):

* Training (phase ``train``): step k is local work ``commit.grad`` on (w, g), an allreduce of g into ``gsum``
  (``result_into``), then work ``commit.apply`` (``w −= lr_k / n · gsum``). The group is the current view.
* Validate and commit every ``commit_every`` steps: :mod:`.vote`; rollback and resynchronisation from the
  agreeing majority: :mod:`.sync`; membership by heartbeats and phi-accrual detectors: :mod:`.membership`.
* Handles: the persistent buffers (w, g, gsum, stage, cmeta, g16) live for the node's life; every temporary one
  (the commit's event, the partial-gradient and sync buffers) is freed on every path, failures included.
* Everything the analysis needs is reported as ``Observe`` replica events (key = the event kind), so the simulator
  and the real backend report the same things.

Scenario variants (``scenario``, ``variant``): :mod:`.scenarios`.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping
from typing import Any

import numpy as np

from seedance.models.phi import PhiAccrualDetector, PhiConfig
from seedance.models.protocols.commit import scenarios
from seedance.models.protocols.commit.config import CommitConfig
from seedance.models.protocols.commit.membership import Membership
from seedance.models.protocols.commit.sync import Sync
from seedance.models.protocols.commit.vote import Vote
from seedance.models.protocols.contract import (
    Annotate, CollectiveDone, CreateBuffer, DurableState, Effects, FreeBuffer, Observe, Restore, SetTimer,
    StartCollective, StartWork, WorkDone,
)

PERSISTENT = ("w", "g", "gsum", "stage", "cmeta", "g16")


class CommitNode(Membership, Vote, Sync):
    """One rank of the validate-and-commit protocol; see the module docstring."""

    # Slots, not an instance dict: with more than 30 attributes CPython 3.11 gives an instance a real dict, and no
    # method call on it is specialised any more
    __slots__ = ("_view_crc", "boot", "cfg", "commit_time_s", "commits", "commits_total", "committed_digest",
                 "committed_step", "counts", "detectors", "epoch", "events", "fired", "handles", "hb_seq", "host_busy",
                 "injection", "live_at_commit", "loss", "node_id", "num_nodes", "peer_boot", "pending", "phase", "rng",
                 "step", "stop_at", "suspected", "sync_since", "t_done", "t_start", "temps", "view", "vote_since")

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
        """CRC-32 of the view's repr, made once per view (O(view) text; every vote and sync row carries it)."""
        view = self.view
        held = getattr(self, "_view_crc", None)
        if held is None or held[0] is not view:
            held = self._view_crc = (view, zlib.crc32(repr(view).encode()))
        return held[1]

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

    def on_client_request(self, request: Any, now: float) -> Effects:
        return []
