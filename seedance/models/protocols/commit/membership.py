"""Validate-and-commit membership: heartbeats, phi-accrual detectors, verdicts and view changes. Methods of
:class:`~seedance.models.protocols.commit.node.CommitNode`.

* Membership: heartbeats every ``heartbeat_s`` to every peer on their own timer; one phi-accrual detector per peer
  (:mod:`seedance.models.phi`, Akka's defaults unless configured). With ``heartbeat_fanout`` k > 0 a rank
  heartbeats only its k ring successors (``rank + 1 .. rank + k`` mod n), so it watches its k predecessors, and
  tells every rank of each verdict it reaches (a :class:`Verdict`: offline, or heard again), which each adopts as
  its own: O(n·k) heartbeats per period instead of O(n²), for clusters of hundreds of ranks (SWIM-style
  dissemination, Das, Gupta & Motivala, DSN 2002, with ring monitoring instead of random probes). A peer whose phi reaches the threshold is
  declared offline and leaves the view (a view change); a suspected peer heard again rejoins (a false offline when
  it heartbeats with the same boot id, i.e. it never restarted). A view must hold a majority of the world; a
  minority waits. Heartbeats carry the epoch: a rank that hears a higher one rolls back to it.
"""

from __future__ import annotations

from typing import Any

from seedance.models.protocols.commit.messages import Heartbeat, Verdict
from seedance.models.protocols.contract import Effects, Observe, Send, SetTimer


class Membership:
    """Who is in the view (a mixin of the node)."""

    __slots__ = ()

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
