"""Node-side fault state of the real backend: the rules the launcher's nemesis sets, applied where they bite.

Rules (the fault table, :mod:`seedance.faults`; its launcher side is :mod:`seedance.real.nemesis`):

* A node holds one :class:`NodeFaults`: ``blocked_from`` (peers whose messages it drops: a partition pair
  ``(a, b)`` "a cannot send to b" is enforced by ``b``), the per-message knobs ``loss_p``, ``duplicate_p``,
  ``reorder_s``, ``spike_p`` / ``spike_s`` (the simulator's network knobs, applied to every node-to-node message
  this node receives), and ``fsync_delay_s`` (slow disk: slept before each group commit's writes, on whatever
  thread performs them). Pause and crash need no node-side state: the launcher SIGSTOPs / SIGKILLs the process group.
* Messages are judged when they arrive (:meth:`NodeFaults.intercept`, called by the runtime's delivery): dropped,
  delivered later (``loop.call_later``), or delivered twice. Messages a node sends to itself, client requests and
  replies are never touched (as in the simulator, whose faults act on node-to-node links).
* The rules come in two ways, both from the launcher: at spawn in ``SEEDANCE_FAULTS`` (JSON, so a restarted node
  starts under the rules in force), and while running as ``ctl`` frames on the node's own listening socket. A
  ``ctl`` connection is an ordinary authenticated transport connection (run key, per-connection nonce, sequence
  numbers) whose frames *also* carry ``HMAC-SHA256(ctl_key, b"seedance-ctl" || receiver_nonce || state)``. The
  control key is a second per-run secret given only to node processes (``SEEDANCE_CTL_KEY_FILE``, a 0600 file), so
  a client holding the run key cannot set fault rules. A frame's state is the node's *whole* rule set (plain
  msgpack data, validated field by field; never pickle), so a lost or repeated frame cannot leave a rule half set;
  the node answers ``ack`` with the state's version and its counts of dropped, duplicated and delayed messages.
* Per-message randomness comes from the node's own generator (seeded from the run's seed, node id and incarnation);
  real runs are not bit-reproducible anyway (wall-clock timing), so nothing else depends on it.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import os
from collections.abc import Callable, Mapping
from hashlib import sha256
from typing import Any

import msgpack
import numpy as np

from seedance.errors import FrameError

log = logging.getLogger("seedance.real.faults")

CTL_KEY_FILE_ENV = "SEEDANCE_CTL_KEY_FILE"
FAULTS_ENV = "SEEDANCE_FAULTS"
CTL_DOMAIN = b"seedance-ctl"
KNOBS = ("loss_p", "duplicate_p", "reorder_s", "spike_p", "spike_s", "fsync_delay_s")
_LIMITS = {"loss_p": 1.0, "duplicate_p": 1.0, "spike_p": 1.0, "reorder_s": 60.0, "spike_s": 60.0,
           "fsync_delay_s": 60.0}


def ctl_mac(ctl_key: bytes, receiver_nonce: bytes, packed_state: bytes) -> bytes:
    return hmac.new(ctl_key, CTL_DOMAIN + receiver_nonce + packed_state, sha256).digest()


def pack_state(state: Mapping[str, Any]) -> bytes:
    return msgpack.packb(dict(state), use_bin_type=True)


def validate_state(state: Any, num_nodes: int) -> dict[str, Any]:
    """A rule set as plain data, checked field by field; :class:`FrameError` on anything else."""
    if not isinstance(state, dict):
        raise FrameError("ctl", f"state is a {type(state).__name__}", "a map of fault rules")
    unknown = set(state) - {"version", "blocked_from", *KNOBS}
    if unknown:
        raise FrameError("ctl", f"unknown rule(s) {sorted(map(str, unknown))}", f"version, blocked_from, {KNOBS}")
    out: dict[str, Any] = {"version": state.get("version", 0)}
    if not isinstance(out["version"], int):
        raise FrameError("ctl", "version is not an integer", "an integer")
    blocked = state.get("blocked_from", [])
    if not isinstance(blocked, list) or not all(isinstance(b, int) and 0 <= b < num_nodes for b in blocked):
        raise FrameError("ctl", f"bad blocked_from {blocked!r}", f"a list of node ids in [0, {num_nodes})")
    out["blocked_from"] = sorted(set(blocked))
    for knob in KNOBS:
        value = state.get(knob, 0.0)
        if not isinstance(value, (int, float)) or not 0.0 <= value <= _LIMITS[knob]:
            raise FrameError("ctl", f"bad {knob} {value!r}", f"a number in [0, {_LIMITS[knob]}]")
        out[knob] = float(value)
    return out


def load_ctl_key(environ: Mapping[str, str] | None = None) -> bytes | None:
    """The control key (None when not launched by our launcher: ctl frames are then refused)."""
    env = os.environ if environ is None else environ
    path = env.get(CTL_KEY_FILE_ENV)
    if not path:
        return None
    try:
        if os.stat(path).st_mode & 0o077:
            log.error("control key file %s is readable by others: control frames refused", path)
            return None
        with open(path) as fh:
            return bytes.fromhex(fh.read().strip())
    except (OSError, ValueError) as err:
        log.error("cannot read the control key: %s", err)
        return None


class NodeFaults:
    """The fault rules one node process applies (all off until the launcher says otherwise)."""

    def __init__(self, node_id: int, num_nodes: int, rng: np.random.Generator | None = None,
                 ctl_key: bytes | None = None, storage: Any = None) -> None:
        self.node_id = node_id
        self.num_nodes = num_nodes
        self.rng = rng if rng is not None else np.random.default_rng()
        self.ctl_key = ctl_key
        self.storage = storage
        self.version = 0
        self.blocked_from: frozenset[int] = frozenset()
        self.loss_p = self.duplicate_p = self.reorder_s = self.spike_p = self.spike_s = self.fsync_delay_s = 0.0
        self.active = False  # any message rule on: the delivery path's one cheap check
        self._passing = False
        self.dropped = self.duplicated = self.delayed = 0

    @classmethod
    def from_env(cls, node_id: int, num_nodes: int, seed: int, incarnation: int, storage: Any = None,
                 environ: Mapping[str, str] | None = None) -> NodeFaults:
        env = os.environ if environ is None else environ
        rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(node_id, incarnation, 0xFA)))
        faults = cls(node_id, num_nodes, rng, load_ctl_key(env), storage)
        if env.get(FAULTS_ENV):
            try:
                faults.update(json.loads(env[FAULTS_ENV]))
            except (ValueError, FrameError) as err:
                log.error("ignoring bad %s: %s", FAULTS_ENV, err)
        return faults

    # --------------------------------------------------------------------------------------------- rules
    def update(self, state: Any) -> None:
        rules = validate_state(state, self.num_nodes)
        self.version = rules["version"]
        self.blocked_from = frozenset(rules["blocked_from"])
        for knob in KNOBS:
            setattr(self, knob, rules[knob])
        self.active = bool(self.blocked_from) or any(getattr(self, k) > 0 for k in KNOBS[:5])
        if self.storage is not None:
            self.storage.sync_delay_s = self.fsync_delay_s
        log.info("fault rules v%d: blocked_from=%s %s", self.version, sorted(self.blocked_from),
                 " ".join(f"{k}={getattr(self, k):g}" for k in KNOBS if getattr(self, k)))

    def state(self) -> dict[str, Any]:
        return {"version": self.version, "blocked_from": sorted(self.blocked_from),
                **{k: getattr(self, k) for k in KNOBS}}

    # ------------------------------------------------------------------------------------------ delivery
    def intercept(self, src: int, message: Any, deliver: Callable[[int, Any], None]) -> bool:
        """Apply the message rules to a message from peer ``src``; True when it was taken (dropped or deferred).

        ``deliver(src, message)`` is the runtime's delivery; deferred and duplicate copies go through it later
        (and are not judged again).
        """
        if not self.active or self._passing or src == self.node_id:
            return False
        if src in self.blocked_from:
            self.dropped += 1
            return True
        rng = self.rng
        if self.loss_p and rng.random() < self.loss_p:
            self.dropped += 1
            return True
        delay = 0.0
        if self.reorder_s:
            delay += float(rng.uniform(0.0, self.reorder_s))
        if self.spike_p and rng.random() < self.spike_p:
            delay += self.spike_s
        copies = 2 if self.duplicate_p and rng.random() < self.duplicate_p else 1
        if copies == 1 and delay == 0.0:
            return False
        loop = asyncio.get_running_loop()
        self.duplicated += copies - 1
        self.delayed += delay > 0
        for copy in range(copies):
            at = delay if copy == 0 else delay + float(rng.uniform(0.0, max(self.reorder_s, 1e-3)))
            loop.call_later(at, self._through, deliver, src, message)
        return True

    def _through(self, deliver: Callable[[int, Any], None], src: int, message: Any) -> None:
        self._passing = True
        try:
            deliver(src, message)
        finally:
            self._passing = False

    # ------------------------------------------------------------------------------------------ control
    async def serve(self, conn: Any) -> None:
        """Handle ``ctl`` frames on an authenticated connection until it closes; :class:`FrameError` if forged."""
        if self.ctl_key is None:
            raise FrameError("ctl", "this node has no control key", "control frames from our launcher only")
        while True:
            frame = await conn.recv()
            message = frame.message
            if frame.kind != "ctl" or not isinstance(message, dict) or not isinstance(message.get("state"), bytes) \
                    or not isinstance(message.get("mac"), bytes):
                raise FrameError("ctl", f"unexpected {frame.kind!r} frame on a control connection", "ctl frames")
            if not hmac.compare_digest(message["mac"], ctl_mac(self.ctl_key, conn.nonce, message["state"])):
                raise FrameError("ctl", "wrong control MAC", "frames signed with this run's control key")
            try:
                state = msgpack.unpackb(message["state"], raw=False, strict_map_key=False)
            except Exception as err:
                raise FrameError("ctl", f"undecodable state: {err}", "a msgpack map") from None
            self.update(state)
            conn.send_nowait("ack", self.node_id, {"version": self.version, "dropped": self.dropped,
                                                   "duplicated": self.duplicated, "delayed": self.delayed})
            await asyncio.wait_for(conn.writer.drain(), 5.0)
