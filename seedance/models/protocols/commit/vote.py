"""Validate and commit: digests after the device-to-host copy, an allgather of votes, an atomic commit. Methods of
:class:`~seedance.models.protocols.commit.node.CommitNode`.

* Validate and commit (every ``commit_every`` steps, at step 0 and at the last step): the rank copies w to a host
  staging buffer, digests it there (work ordered after the copy, so it reads finished data), also digests w itself
  (the true digest, for monitors), then allgathers a fixed-size int64 row ``[epoch, step, d0, d1, view_hash]``. It
  commits only if every row of the view is identical (the same epoch, step, view and digest): an atomic
  ``Checkpoint("commit", (w, cmeta))`` (the real backend writes a fresh folder and publishes a pointer), then goes on.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from seedance.models.protocols.contract import (
    Checkpoint, CollectiveDone, Effects, Observe, SetTimer, StartWork, WorkDone,
)


class Vote:
    """The vote and the commit it leads to (a mixin of the node)."""

    __slots__ = ()

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
        # the rows as voted; agreeing rows are one row repeated, stored once: a record is O(1) however large the
        # view (a broadcast of rows[0] itself would keep the whole result alive: 64 records x 1,024 ranks x 40 KB)
        held = np.broadcast_to(rows[0].copy(), rows.shape) if agree and (rows == rows[0]).all() else rows.copy()
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
