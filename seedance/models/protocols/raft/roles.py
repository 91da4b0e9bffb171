"""Raft's server roles (§5.1) and the names a node uses with its runtime: timers and durable keys."""

from __future__ import annotations

import enum

ELECTION = "election"
HEARTBEAT = "heartbeat"
VOTE_RETRY = "vote-retry"
FLUSH = "flush"  # zero-delay timer: the leader sends the client entries queued in this turn (group commit)
WRITE = "write"  # zero-delay timer armed by the flush: the leader writes its unwritten entries (next turn)
LOG_NOTICE = "log"  # durability notice ("log", term, index) of a leader's own PersistLog (on_persisted)
HARD_STATE_KEY = "hard_state"
LOG_KEY = "log"
SNAPSHOT_KEY = "snapshot"  # [last included index, its term, the state machine's snapshot] (§7)


class Role(str, enum.Enum):
    FOLLOWER = "follower"
    CANDIDATE = "candidate"
    LEADER = "leader"


# The roles as plain module constants, for the tests a node makes on every input: in Python 3.11 reading an attribute
# of an Enum class (``Role.LEADER``) goes through the Enum metaclass's ``__getattr__`` hook, several times the cost
# of reading a global.
FOLLOWER, CANDIDATE, LEADER = Role.FOLLOWER, Role.CANDIDATE, Role.LEADER
