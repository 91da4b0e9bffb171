"""EPaxos execution shortcuts (seedance/models/protocols/epaxos/execution.py): the committed-prefix test resumes
where it stopped, the two commonest walks (one dependency without any, a cycle of two) run without Tarjan's state
and order as the general walk does, and the node keeps its attributes in slots."""

from __future__ import annotations

import numpy as np

from seedance.models.protocols.epaxos import EPaxosNode
from seedance.models.protocols.epaxos.messages import Commit
from seedance.models.protocols.multipaxos.messages import Command


def _write(client: int, value: int, key: str = "x") -> Command:
    return Command(client_id=client, request_id=1, op="write", key=key, value=value)


def _commit(node: EPaxosNode, replica: int, instance: int, command: Command, seq: int, deps: tuple[int, ...],
            now: float = 0.0) -> None:
    node.on_message(replica, Commit(replica=replica, instance=instance, command=command, seq=seq, deps=deps), now)


def _executed(node: EPaxosNode) -> list[tuple[int, int]]:
    return [iid for _, iid in node.exec_log]


def test_the_committed_prefix_test_resumes_at_the_first_pair_still_missing():
    node = EPaxosNode(0, 4, np.random.default_rng(0))
    _commit(node, 3, 1, _write(3, 3), 5, (1, 1, 2, 2))  # waits for 1.1, then 2.1 and 2.2
    waiting = node.instances[(3, 1)]
    assert waiting.ready == 0 and (3, 1) in node._blocked[(1, 1)]
    _commit(node, 1, 1, _write(1, 1, key="y"), 1, ())  # the pair of replica 1 is seen: the test stops at replica 2
    assert waiting.ready == 2 and (3, 1) in node._blocked[(2, 1)] and not waiting.executed
    _commit(node, 2, 1, _write(2, 1, key="z"), 1, ())
    assert waiting.ready == 2 and (3, 1) in node._blocked[(2, 2)] and not waiting.executed
    _commit(node, 2, 2, _write(2, 2, key="z"), 2, ())
    assert waiting.ready == 4 and waiting.executed
    assert _executed(node) == [(1, 1), (2, 1), (3, 1), (2, 2)]  # the waiting candidate first (another key)


def test_a_cycle_of_two_executes_by_seq_then_instance_whichever_commits_last():
    for first, second in (((1, 1), (2, 1)), ((2, 1), (1, 1))):
        for seqs in ((3, 4), (4, 3), (3, 3)):
            node = EPaxosNode(0, 3, np.random.default_rng(0))
            deps = {(1, 1): (2, 1), (2, 1): (1, 1)}
            seq = dict(zip(((1, 1), (2, 1)), seqs))
            for iid in (first, second):
                _commit(node, iid[0], iid[1], _write(iid[0], iid[1]), seq[iid], deps[iid])
            assert _executed(node) == sorted(deps, key=lambda x: (seq[x], x)), (first, seqs)


def test_a_dependency_without_dependencies_executes_first_and_a_longer_walk_still_orders_by_component():
    node = EPaxosNode(0, 4, np.random.default_rng(0))
    _commit(node, 3, 1, _write(3, 1), 9, (1, 1))  # waits for 1.1
    _commit(node, 1, 1, _write(1, 1), 1, ())
    assert _executed(node) == [(1, 1), (3, 1)]
    # a cycle of three (the general walk): one component, by seq
    node = EPaxosNode(0, 4, np.random.default_rng(0))
    _commit(node, 1, 1, _write(1, 1), 7, (3, 1))
    _commit(node, 2, 1, _write(2, 1), 5, (1, 1))
    _commit(node, 3, 1, _write(3, 1), 6, (2, 1))
    assert _executed(node) == [(2, 1), (3, 1), (1, 1)]


def test_the_node_keeps_its_attributes_in_slots_and_a_subclass_may_add_its_own():
    node = EPaxosNode(0, 3, np.random.default_rng(0))
    assert not hasattr(node, "__dict__")

    class Marked(EPaxosNode):
        pass

    marked = Marked(0, 3, np.random.default_rng(0))
    marked.mark = True  # what a test's subclass may do
    assert marked.mark
