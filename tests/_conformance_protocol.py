"""A scripted protocol for the conformance suite: every node walks the same script, waiting for each step's input.

Each node records every input it gets, as plain JSON-able data (kinds, payload values, shapes and dtypes, the order
of durability notices), to ``config["record_dir"]/node-<id>.jsonl`` (a real run) or ``config["record"][id]`` (a
list, in the simulator). The script makes each node's input sequence a function of the contract alone — no timing
races — so the two runtimes must record identical sequences:

1. four durable writes (Persist, PersistRecords, PersistLog, CompactLog) in one list, each with a notice;
2. timers: two armed, one cancelled, one replaced; then two more at different delays;
3. device buffers and work: create, axpy, digest (sha256 of the bytes), norm;
4. collectives of every op, dtype and shape the rules cover (reducescatter with an uneven split of a 2-D payload,
   a handle payload with ``result_into``), then misuse: an unknown op and a bad dtype (local failures), and a shape
   disagreement (every member fails with the same text);
5. a checkpoint of a buffer, free it, restore it, digest it;
6. a barrier, then a token passed twice around the ring of nodes (messages), then ``finished``. A barrier's end
   reaches its members at different moments in a real run, so a token that arrives before its node heard of the
   barrier's end waits for it (and is recorded then): the script, not the runtime, removes that race.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, is_dataclass
from pathlib import Path
from typing import Any

import numpy as np

from seedance.models.protocols.contract import (
    CancelTimer, Checkpoint, CollectiveDone, CompactLog, CreateBuffer, FreeBuffer, Observe, Persist, PersistLog,
    PersistRecords, ProtocolSpec, Restore, Send, SetTimer, StartCollective, StartWork, WorkDone,
)


@dataclass(frozen=True, kw_only=True, slots=True)
class Token:
    round: int
    hops: int


def plain(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return {"dtype": value.dtype.name, "shape": list(value.shape), "values": value.tolist()}
    if isinstance(value, np.generic):
        return value.item()
    if is_dataclass(value):
        return {"type": type(value).__name__, **{k: plain(v) for k, v in asdict(value).items()}}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    return value


def _collective_steps(me: int, n: int) -> list[tuple[str, dict]]:
    group = tuple(range(n))
    base = np.arange(6, dtype=np.float32).reshape(2, 3)
    return [
        ("c-ar-int", dict(op="allreduce", payload=np.array([me, 2 * me, 3, -me], dtype=np.int32))),
        ("c-ar-float", dict(op="allreduce", payload=base + me)),
        ("c-ag", dict(op="allgather", payload=np.full((3, 2), me, dtype=np.float32))),
        ("c-rs", dict(op="reducescatter", payload=np.arange(10, dtype=np.int64).reshape(5, 2) * (me + 1))),
        ("c-bc", dict(op="broadcast", payload=np.full((2, 2), 10.0 * me), root=1 % n)),
        ("c-red", dict(op="reduce", payload=np.array([1.5, me], dtype=np.float64), root=(n - 1))),
        ("c-bar", dict(op="barrier", payload=None)),
        ("c-handle", dict(op="allreduce", payload="w", result_into="w-sum")),
        ("c-bad-op", dict(op="allgatherz", payload=np.zeros(2))),
        ("c-bad-dtype", dict(op="allreduce", payload=np.zeros(2, dtype=np.complex64))),
        ("c-disagree", dict(op="allreduce", payload=np.zeros(2 if me == 0 else 3, dtype=np.float32))),
    ], group


class ScriptNode:
    def __init__(self, node_id: int, num_nodes: int, rng: np.random.Generator, config: Mapping[str, Any]) -> None:
        self.node_id = node_id
        self.num_nodes = num_nodes
        self.rng = rng
        self.draw = int(rng.integers(1 << 30))  # the node RNG: the same (seed, node, boot) in both runtimes
        record_dir = config.get("record_dir")
        self._file = None
        if record_dir:
            self._file = open(Path(record_dir) / f"node-{node_id}.jsonl", "a", encoding="utf-8")
            self._list = None
        else:
            self._list = config["record"].setdefault(node_id, [])
        steps, self.group = _collective_steps(node_id, num_nodes)
        self.collectives = steps
        self.step = 0
        self.awaiting: set[Any] = set()
        self.rounds = int(config.get("rounds", 2))
        self.timeout_s = float(config.get("collective_timeout_s", 60.0))
        self.barrier_done = False
        self.early: list[tuple[int, Any]] = []

    # ------------------------------------------------------------------------------------------------ record
    def _record(self, *item: Any) -> None:
        row = plain(list(item))
        if self._file is not None:
            self._file.write(json.dumps(row) + "\n")
            self._file.flush()
        else:
            self._list.append(json.loads(json.dumps(row)))

    # ------------------------------------------------------------------------------------------------ script
    def on_start(self, now: float) -> list:
        self._record("start", self.draw)
        self.awaiting = {"p-value", "p-records", "p-log", "p-compact"}
        return [Persist(key="a", value=[self.node_id, "x"], notify="p-value"),
                PersistRecords(table="inst", put={"1": {"ballot": 3}, "2": None}, delete=("9",), notify="p-records"),
                PersistLog(key="log", start=0, entries=({"i": 1}, {"i": 2}), notify="p-log"),
                CompactLog(key="log", first=1, notify="p-compact")]

    def on_recover(self, durable: Any, now: float) -> list:
        self._record("recover")
        return []

    def on_persisted(self, token: Any, now: float) -> list:
        self._record("persisted", token)
        self.awaiting.discard(token)
        if token == "ck":
            return [FreeBuffer(handle="w"), Restore(name="ck"),
                    StartWork(work_id="digest-restored", op="digest", buffers=("w",))]
        if not self.awaiting and token == "p-compact":  # step 2: timers
            return [SetTimer(name="t1", delay_s=0.05), SetTimer(name="t2", delay_s=0.02), CancelTimer(name="t1"),
                    SetTimer(name="t2", delay_s=0.01)]
        return []

    def on_timer(self, name: Any, now: float) -> list:
        self._record("timer", name)
        if name == "t2":
            return [SetTimer(name="t4", delay_s=0.04), SetTimer(name="t3", delay_s=0.01)]
        if name == "t4":  # step 3: buffers and work
            data = np.arange(12, dtype=np.float32).reshape(4, 3) + self.node_id
            return [CreateBuffer(handle="w", data=data), CreateBuffer(handle="g", shape=(4, 3), dtype="float32",
                                                                         fill=0.5),
                    StartWork(work_id="axpy", op="axpy", buffers=("w", "g"), params={"a": 2.0}, flops=24),
                    StartWork(work_id="digest", op="digest", buffers=("w", "g")),
                    StartWork(work_id="norm", op="norm", buffers=("g",))]
        return []

    def on_work_done(self, done: WorkDone, now: float) -> list:
        self._record("work", done.work_id, done.ok, done.error, done.result)
        if done.work_id == "norm":
            return self._next_collective()
        if done.work_id == "digest-sum":
            return [Checkpoint(name="ck", buffers=("w",), notify="ck")]
        if done.work_id == "digest-restored":
            return [StartCollective(collective_id="final-barrier", op="barrier", group=self.group, payload=None,
                                    nominal_size_bytes=0, timeout_s=self.timeout_s)]
        return []

    def _next_collective(self) -> list:
        if self.step >= len(self.collectives):
            return [StartWork(work_id="digest-sum", op="digest", buffers=("w-sum",))]
        cid, args = self.collectives[self.step]
        self.step += 1
        args = dict(args)
        return [StartCollective(collective_id=cid, group=self.group, nominal_size_bytes=1 << 20,
                                timeout_s=self.timeout_s, **args)]

    def on_collective_done(self, done: CollectiveDone, now: float) -> list:
        self._record("collective", done.collective_id, done.ok, done.error, done.result)
        if done.collective_id == "final-barrier":
            self.barrier_done = True
            if self.node_id == 0:
                return [Send(dst=1 % self.num_nodes, message=Token(round=0, hops=1), size_bytes=32)]
            out: list = []
            for src, message in self.early:
                out.extend(self._token(src, message))
            self.early.clear()
            return out
        return self._next_collective()

    def on_message(self, src: int, message: Any, now: float) -> list:
        if not self.barrier_done:
            self.early.append((src, message))
            return []
        return self._token(src, message)

    def _token(self, src: int, message: Any) -> list:
        self._record("message", src, message)
        hops = message.hops + 1
        rnd = message.round + (1 if self.node_id == 0 else 0)
        if self.node_id == 0 and rnd >= self.rounds:
            return self._finish()
        out: list = [Observe(what="apply", key="token", value=hops)]
        out.append(Send(dst=(self.node_id + 1) % self.num_nodes, message=Token(round=rnd, hops=hops), size_bytes=32))
        if self.node_id != 0 and message.round == self.rounds - 1:
            out.extend(self._finish())
        return out

    def _finish(self) -> list:
        self._record("finished")
        return [Persist(key="finished", value=True)]

    def on_client_request(self, request: Any, now: float) -> list:
        return []


SPEC = ProtocolSpec(name="conformance", factory=ScriptNode, message_types=(Token,), checker=None, routing="any",
                    operations=())


class TickerNode:
    """Starts ``work_s`` of work, ticks a timer every 20 ms meanwhile, records both (is the loop free?)."""

    def __init__(self, node_id: int, num_nodes: int, rng: np.random.Generator, config: Mapping[str, Any]) -> None:
        self.node_id = node_id
        self.config = config
        self.ticks = 0
        self.path = Path(config["record_dir"]) / f"ticker-{node_id}.json" if config.get("record_dir") else None
        self.result: dict[str, Any] = config.get("result", {}) if not self.path else {}

    def on_start(self, now: float) -> list:
        return [StartWork(work_id="long", op="idle", params={"duration_s": float(self.config.get("work_s", 1.0))}),
                SetTimer(name="tick", delay_s=0.02)]

    def on_recover(self, durable: Any, now: float) -> list:
        return []

    def on_timer(self, name: Any, now: float) -> list:
        self.ticks += 1
        return [SetTimer(name="tick", delay_s=0.02)]

    def on_work_done(self, done: WorkDone, now: float) -> list:
        self.result.update({"ticks_during_work": self.ticks, "ok": done.ok})
        if self.path is not None:
            self.path.write_text(json.dumps(self.result))
        return [CancelTimer(name="tick")]

    def on_message(self, src: int, message: Any, now: float) -> list:
        return []

    def on_client_request(self, request: Any, now: float) -> list:
        return []

    def on_collective_done(self, done: Any, now: float) -> list:
        return []


TICKER = ProtocolSpec(name="ticker", factory=TickerNode, message_types=(), checker=None, operations=())


# --- Raft under both runtimes: the first election and the leader's first durable writes ----------------------------
from seedance.models.protocols.raft import SPEC as RAFT_SPEC  # noqa: E402
from seedance.models.protocols.raft import RaftConfig, RaftNode  # noqa: E402


class RecordingRaft(RaftNode):
    """Raft, unchanged, recording its election timeouts, leaderships and durability notices (the first ``limit``)."""

    def __init__(self, node_id: int, num_nodes: int, rng: np.random.Generator, config: Mapping[str, Any]) -> None:
        record_dir = config.get("record_dir")
        self._sink = (open(Path(record_dir) / f"raft-{node_id}.jsonl", "a", encoding="utf-8") if record_dir
                      else config["record"].setdefault(node_id, []))
        self._limit = int(config.get("limit", 6))
        super().__init__(node_id, num_nodes, rng, RaftConfig.from_mapping(
            {k: v for k, v in config.items() if k not in ("record_dir", "record", "limit")}))

    def _note(self, *row: Any) -> None:
        if self._limit <= 0:
            return
        self._limit -= 1
        row = plain(list(row))
        if isinstance(self._sink, list):
            self._sink.append(json.loads(json.dumps(row)))
        else:
            self._sink.write(json.dumps(row) + "\n")
            self._sink.flush()

    def on_timer(self, name: Any, now: float) -> list:
        role = self.role
        out = super().on_timer(name, now)
        if self.role is not role:
            self._note("role", self.role.value, self.current_term)
        return out

    def on_message(self, src: int, message: Any, now: float) -> list:
        role = self.role
        out = super().on_message(src, message, now)
        if self.role is not role:
            self._note("role", self.role.value, self.current_term)
        return out

    def on_persisted(self, token: Any, now: float) -> list:
        self._note("persisted", token)
        return super().on_persisted(token, now)


RAFT = ProtocolSpec(name="raft-recording", factory=RecordingRaft, message_types=RAFT_SPEC.message_types,
                    default_config=RAFT_SPEC.default_config, operations=RAFT_SPEC.operations,
                    checker=RAFT_SPEC.checker, monitor=RAFT_SPEC.monitor, routing=RAFT_SPEC.routing)
