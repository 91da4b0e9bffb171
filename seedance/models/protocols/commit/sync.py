"""Rollback and resynchronisation from the agreeing majority by a full broadcast. Methods of
:class:`~seedance.models.protocols.commit.node.CommitNode`.

* Rollback (a digest mismatch, a collective that failed or timed out, a view change, a peer's higher epoch): the
  epoch goes up, the rank restores its last commit, allgathers ``[epoch, committed_step, d0, d1, boot]`` over the
  view, picks the root among the rows with the latest commit and the most common digest (the agreeing majority,
  lowest rank on ties), and takes the root's full parameters by broadcast (never a partial retransmission); a rank
  whose own commit was older re-commits, then all resume at the root's step. A failed sync retries at a higher
  epoch after a back-off.
"""

from __future__ import annotations

import numpy as np

from seedance.models.protocols.contract import (
    Annotate, Checkpoint, CollectiveDone, Effects, Observe, Restore, SetTimer, StartWork,
)


class Sync:
    """Rollback and resync (a mixin of the node)."""

    __slots__ = ()

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
