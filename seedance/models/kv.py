"""The replicated key-value state machine: deterministic read / write / cas with client-request deduplication.

Rules:

* A key's initial value is ``None``; the key ``None`` is the single register of register histories.
* ``write`` stores ``value``; ``read`` returns the current value; ``cas`` takes ``[expected, new]`` and stores
  ``new`` iff the current value equals ``expected``. A failed cas is a definite non-effect: ``FAIL`` with error
  ``"cas-mismatch"``.
* Deduplication (Raft §8, "Client interaction"): the machine remembers, per client, the highest request id it applied
  and that request's result. Re-applying the same ``(client_id, request_id)`` returns the remembered result without
  executing it again, so a retried write takes effect once. An *older* request id than the remembered one is not
  executed either (its result is forgotten): it gets ``INFO`` with error ``"stale-request"``. This assumes each
  client issues requests one at a time with increasing ids, as the workload clients do.
* Deterministic: the same sequence of commands from the same state gives the same results and state.
* ``snapshot()`` / ``restore()`` exchange plain data (lists, no tuples-as-keys), so a snapshot can be persisted or
  sent on the wire.

Used by Raft and meant for Multi-Paxos and EPaxos too: anything that agrees on an order of commands applies them
here.
"""

from __future__ import annotations

from dataclasses import dataclass
from collections.abc import Iterable
from typing import Any

from seedance.models.protocols.contract import Operation, Outcome
from seedance.models.protocols.records import fast_init_module


@dataclass(frozen=True, kw_only=True, slots=True)
class Result:
    """What applying one command gave: the client's outcome, the value read (reads only) and an error string."""

    outcome: Outcome
    value: Any = None
    error: str | None = None


def validate(op: Operation | str, value: Any) -> str | None:
    """Why ``(op, value)`` is malformed (an error string for a ``FAIL`` reply), or None when it is well formed."""
    # Operation is a str enum: its members compare equal to their names, so one comparison serves both forms
    if op == "read" or op == "write":
        return None
    if op == "cas":
        return None if isinstance(value, _PAIRS) and len(value) == 2 else "bad-cas-value"
    return "unknown-op"


_PAIRS = (list, tuple)
_OK_OUTCOME, _FAIL_OUTCOME = Outcome.OK, Outcome.FAIL  # globals: an Enum class's attribute costs more to read
# results that carry nothing of their own are shared (Result is frozen): a write or cas that took effect, or not
_OK = Result(outcome=Outcome.OK)
_CAS_MISMATCH = Result(outcome=Outcome.FAIL, error="cas-mismatch")
_STALE = Result(outcome=Outcome.INFO, error="stale-request")


class KVStore:
    """A dict of keys to values plus the per-client deduplication table."""

    __slots__ = ("_data", "_sessions", "applied_count")

    def __init__(self) -> None:
        self._data: dict[Any, Any] = {}
        self._sessions: dict[int, tuple[int, Result]] = {}  # client_id -> (request_id, result)
        self.applied_count = 0  # commands executed (deduplicated ones excluded)

    # ------------------------------------------------------------------------------------------------ queries
    def read(self, key: Any) -> Any:
        """The current value of ``key`` (``None`` when never written)."""
        return self._data.get(key)

    def cached(self, client_id: int, request_id: int) -> Result | None:
        """The remembered result of ``(client_id, request_id)`` if that request was already applied."""
        session = self._sessions.get(client_id)
        if session is not None and session[0] == request_id:
            return session[1]
        return None

    # -------------------------------------------------------------------------------------------- transitions
    def apply(self, client_id: int | None, request_id: int, op: Operation | str, key: Any, value: Any) -> Result:
        """Apply one command once; a repeated ``(client_id, request_id)`` returns the first result unchanged."""
        if client_id is not None:
            session = self._sessions.get(client_id)
            if session is not None:
                if session[0] == request_id:
                    return session[1]
                if request_id < session[0]:
                    return _STALE
        if op == "write":  # the most frequent command: _execute's first case, without its call
            self._data[key] = value
            result = _OK
        else:
            result = self._execute(op, key, value)
        self.applied_count += 1
        if client_id is not None:
            self._sessions[client_id] = (request_id, result)
        return result

    def apply_commands(self, commands: Iterable[Any]) -> None:
        """:meth:`apply` each of ``commands`` in order, discarding the results (a replica that answers no client):
        each command has ``client_id``, ``request_id``, ``op``, ``key`` and ``value`` attributes (a Raft log
        entry); one whose ``op`` is None (a no-op entry) is skipped. The same effect as one :meth:`apply` per
        command, deduplication included, in one loop."""
        sessions, data, execute = self._sessions, self._data, self._execute
        applied = 0
        for command in commands:
            op = command.op
            if op is None:
                continue
            client_id = command.client_id
            if client_id is not None:
                request_id = command.request_id
                session = sessions.get(client_id)
                if session is not None and request_id <= session[0]:
                    continue  # applied already (its result is remembered), or stale: no effect either way
                if op == "write":
                    data[command.key] = command.value
                    sessions[client_id] = (request_id, _OK)
                else:
                    sessions[client_id] = (request_id, execute(op, command.key, command.value))
            elif op == "write":
                data[command.key] = command.value
            else:
                execute(op, command.key, command.value)
            applied += 1
        self.applied_count += applied

    def _execute(self, op: Operation | str, key: Any, value: Any) -> Result:
        # Operation is a str enum, so comparing with the names serves both forms of ``op``
        if op == "write":
            self._data[key] = value
            return _OK
        if op == "read":
            return Result(outcome=_OK_OUTCOME, value=self._data.get(key))
        if op == "cas":
            if not isinstance(value, _PAIRS) or len(value) != 2:  # validate's verdict on a cas
                return Result(outcome=_FAIL_OUTCOME, error="bad-cas-value")
            expected, new = value
            if self._data.get(key) == expected:
                self._data[key] = new
                return _OK
            return _CAS_MISMATCH
        return Result(outcome=Outcome.FAIL, error="unknown-op")

    # ----------------------------------------------------------------------------------------------- snapshot
    def snapshot(self) -> dict[str, Any]:
        """The whole state as plain data (keys in insertion order, so equal histories give equal snapshots)."""
        return {
            "data": [[key, value] for key, value in self._data.items()],
            "sessions": [
                [client, request, result.outcome.value, result.value, result.error]
                for client, (request, result) in self._sessions.items()
            ],
            "applied_count": self.applied_count,
        }

    @classmethod
    def restore(cls, snapshot: dict[str, Any]) -> KVStore:
        """A store equal to the one that produced ``snapshot``."""
        store = cls()
        store._data = {_plain_key(key): value for key, value in snapshot["data"]}
        store._sessions = {
            client: (request, Result(outcome=Outcome(outcome), value=value, error=error))
            for client, request, outcome, value, error in snapshot["sessions"]
        }
        store.applied_count = snapshot.get("applied_count", 0)
        return store

    def __eq__(self, other: object) -> bool:
        return isinstance(other, KVStore) and self.snapshot() == other.snapshot()

    __hash__ = None  # type: ignore[assignment]


def _plain_key(key: Any) -> Any:
    # A key that went through a wire codec may come back as a list; keys must be hashable.
    return tuple(key) if isinstance(key, list) else key


fast_init_module(globals())  # Result's generated __init__, at half the cost
