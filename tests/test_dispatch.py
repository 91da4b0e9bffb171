"""The consensus nodes' shared input routing (seedance.models.protocols.dispatch)."""

from __future__ import annotations

import pytest

from seedance.models.protocols.dispatch import Dispatching
from seedance.models.protocols.epaxos.node import EPaxosNode
from seedance.models.protocols.multipaxos.node import MultiPaxosNode
from seedance.models.protocols.raft.messages import RequestVote
from seedance.models.protocols.raft.node import RaftNode


class Ping:
    pass


class Pong:
    pass


class Node(Dispatching):
    MESSAGE_HANDLERS = {Ping: "_on_ping", Pong: "_on_pong"}
    TIMER_HANDLERS = {"tick": "_on_tick"}

    def _on_ping(self, src, message, now):
        return [("ping", src, now)]

    def _on_pong(self, src, message, now):
        return [("pong", src, now)]

    def _on_tick(self, now):
        return [("tick", now)]


def test_inputs_reach_their_handlers_and_unknown_ones_are_ignored():
    node = Node()
    assert node.on_message(2, Ping(), 1.5) == [("ping", 2, 1.5)]
    assert node.on_message(3, Pong(), 2.0) == [("pong", 3, 2.0)]
    assert node.on_timer("tick", 4.0) == [("tick", 4.0)]
    assert node.on_message(1, object(), 0.0) == [] and node.on_timer("other", 0.0) == []


def test_a_subclass_override_is_dispatched_to():
    class Mutant(Node):
        def _on_ping(self, src, message, now):
            return [("mutant", src)]

    assert Mutant().on_message(1, Ping(), 0.0) == [("mutant", 1)]
    assert Node().on_message(1, Ping(), 0.0) == [("ping", 1, 0.0)]


def test_a_table_naming_no_method_fails_when_the_class_is_made():
    with pytest.raises(TypeError, match="Broken: its dispatch table names '_on_missing'"):
        class Broken(Dispatching):
            MESSAGE_HANDLERS = {Ping: "_on_missing"}


@pytest.mark.parametrize("cls", [RaftNode, MultiPaxosNode, EPaxosNode], ids=lambda c: c.__name__)
def test_the_consensus_nodes_route_through_the_table(cls):
    assert issubclass(cls, Dispatching) and "on_message" not in vars(cls) and "on_timer" not in vars(cls)
    assert cls.MESSAGE_HANDLERS and cls.TIMER_HANDLERS


def test_a_raft_node_answers_a_vote_request_through_the_table():
    import numpy as np

    node = RaftNode(0, 3, np.random.default_rng(0))
    out = node.on_message(1, RequestVote(term=5, candidate_id=1, last_log_index=0, last_log_term=0), 0.0)
    assert node.current_term == 5 and out
