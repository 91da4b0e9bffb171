"""EPaxos dependencies as a sparse set (seedance/models/protocols/epaxos/deps.py): the canonical flat tuple, its
merge and equality against the vector with one slot per replica it replaced, the wire codec's refusal of a
malformed ``deps`` field, the durable record's two forms, and the simulated size of what a message carries."""

from __future__ import annotations

import random

import numpy as np
import pytest

from seedance.errors import FrameError, SpecError
from seedance.models.protocols.contract import ClientRequest, DurableState, PersistRecords, Send
from seedance.models.protocols.epaxos import SPEC, EPaxosNode
from seedance.models.protocols.epaxos.deps import (
    NO_DEPS,
    as_dict,
    dep_of,
    from_dense,
    from_dict,
    problem,
    union,
    wire_bytes,
)
from seedance.models.protocols.epaxos.instance import COMMITTED, TABLE, Instance
from seedance.models.protocols.epaxos.messages import (
    HEADER_BYTES,
    Accept,
    Commit,
    PreAccept,
    PreAcceptReply,
    PrepareReply,
    TryPreAccept,
    TryPreAcceptReply,
    Watermark,
)
from seedance.models.protocols.multipaxos.messages import Command
from seedance.models.wire import Codec
from seedance.real.storage import DiskStorage

WRITE = Command(client_id=1, request_id=1, op="write", key="x", value=7)


def _dense(deps, n):
    vector = [0] * n
    for q, j in as_dict(deps).items():
        vector[q] = j
    return vector


def _random_dense(rng, n):
    return [rng.choice((0, 0, rng.randint(1, 50))) for _ in range(n)]


# ------------------------------------------------------------------------------------------------- the form
def test_the_canonical_form_is_sorted_by_replica_without_zeros():
    assert from_dict({3: 5, 0: 2, 7: 1}) == (0, 2, 3, 5, 7, 1)
    assert from_dense([0, 2, 0, 5, 0]) == (1, 2, 3, 5)
    assert from_dense([0, 0, 0]) == NO_DEPS == from_dict({})
    assert as_dict((1, 2, 3, 5)) == {1: 2, 3: 5}
    assert [dep_of((1, 2, 3, 5), q) for q in range(5)] == [0, 2, 0, 5, 0]
    assert dep_of(NO_DEPS, 0) == 0
    assert dep_of((2, 2), 2) == 2 and dep_of((2, 2), 1) == 0  # an instance number equal to a replica id


def test_the_sparse_form_round_trips_and_compares_as_the_vector_did():
    rng = random.Random(7)
    for _ in range(500):
        n = rng.randint(1, 40)
        a, b = _random_dense(rng, n), _random_dense(rng, n)
        sa, sb = from_dense(a), from_dense(b)
        assert problem(sa, n) is None and _dense(sa, n) == a
        assert (sa == sb) == (a == b) and (hash(sa) == hash(sb)) >= (a == b)
        assert from_dict(as_dict(sa)) == sa
        assert all(dep_of(sa, q) == a[q] for q in range(n))


def test_union_is_the_replica_wise_maximum():
    rng = random.Random(11)
    for _ in range(500):
        n = rng.randint(1, 40)
        vectors = [_random_dense(rng, n) for _ in range(rng.randint(1, 4))]
        expected = [max(column) for column in zip(*vectors)]
        merged = union(from_dense(vectors[0]), [from_dense(v) for v in vectors[1:]])
        assert merged == from_dense(expected) and problem(merged, n) is None
    own = (0, 3, 4, 1)
    assert union(own, [(0, 2), (4, 1), ()]) is own  # nothing added: the same object


def test_problem_names_what_is_wrong():
    assert problem((0, 1, 4, 9), 5) is None and problem((), 3) is None
    for deps, words in [((0, 1, 4), "odd count"), ([0, 1], "a list, not a tuple"),
                        ((1, 1, 0, 2), "replicas must increase"), ((1, 1, 1, 2), "replicas must increase"),
                        ((0, 0), "instance 0"), ((-1, 3), "negative"), ((5, 1), "outside 0..4"),
                        ((0, True), "not two integers"), ((0, "3"), "not two integers"),
                        ((0, 1.0), "not two integers")]:
        found = problem(deps, 5)
        assert found is not None and words in found, (deps, found)
    assert problem((9, 1), None) is None  # no cluster size: any replica


def test_a_message_is_as_large_as_the_pairs_it_carries():
    assert wire_bytes(()) == 0 and wire_bytes((0, 1, 4, 9)) == 32
    node = EPaxosNode(0, 128, np.random.default_rng(0))
    node._register((5, 3), Command(client_id=2, request_id=1, op="write", key="x", value=1), 1)
    request = ClientRequest(client_id=1, request_id=1, op="write", key="x", value=7)
    sends = [e for e in node.on_client_request(request, 0.0) if type(e) is Send]
    assert len(sends) == 127 and sends[0].message.deps == (5, 3)
    assert {s.size_bytes for s in sends} == {HEADER_BYTES + 16 + sends[0].message.command.size_bytes}  # 1 pair


# ------------------------------------------------------------------------------------------------- the merge
def _dense_attributes(node, command, iid, seq, vector):
    """The merge of the tree before (one slot per replica), over the node's sparse knowledge."""
    n = node.num_nodes
    merged = list(vector)
    for key in [command.key]:
        known = node.conf.get(key)
        if known is None:
            seq = max(seq, 1)
            continue
        dense_known = [known.get(q, 0) for q in range(n)]
        before = merged[iid[0]]
        merged = [max(a, b) for a, b in zip(merged, dense_known)]
        if dense_known[iid[0]] == iid[1]:
            merged[iid[0]] = before
        seq = max(seq, 1 + node.key_seq.get(key, 0))
    return seq, merged


def test_the_merge_matches_the_vector_merge_it_replaced():
    rng = random.Random(3)
    for trial in range(300):
        n = rng.randint(1, 12)
        node = EPaxosNode(0, n, np.random.default_rng(trial))
        keys = ("a", "b", "c")
        for _ in range(rng.randint(0, 20)):
            q, i = rng.randrange(n), rng.randint(1, 30)
            node._register((q, i), Command(client_id=q, request_id=i, op="write", key=rng.choice(keys), value=0),
                           rng.randint(1, 9))
        iid = (rng.randrange(n), rng.randint(1, 30))
        if rng.random() < 0.3:  # the instance itself already known: its own replica keeps what it had
            node._register(iid, Command(client_id=0, request_id=0, op="read", key="a"), 1)
        command = Command(client_id=9, request_id=9, op="write", key=rng.choice(keys), value=1)
        vector = _random_dense(rng, n)
        deps = from_dense(vector)
        seq, merged = node._attributes(command, iid, 2, deps)
        assert (seq, _dense(merged, n)) == _dense_attributes(node, command, iid, 2, vector), trial
        assert problem(merged, n) is None
        if _dense(merged, n) == vector:
            assert merged is deps  # nothing added: the same object, so the fast path's comparison is identity


# ------------------------------------------------------------------------------------------------- the wire
@pytest.mark.parametrize("message", [
    PreAccept(ballot=0, replica=1, instance=2, command=WRITE, seq=3, deps=(0, 4, 2, 1)),
    TryPreAccept(ballot=5, replica=1, instance=2, command=WRITE, seq=3, deps=(0, 4)),
    PreAcceptReply(ballot=0, replica=1, instance=2, ok=True, promised=0, seq=3, deps=(2, 9), changed=True),
    Accept(ballot=0, replica=1, instance=2, command=WRITE, seq=3, deps=()),
    Commit(replica=1, instance=2, command=WRITE, seq=3, deps=(0, 1, 1, 1, 2, 1)),
    PrepareReply(ballot=4, replica=1, instance=2, ok=True, promised=4, status=1, command=WRITE, seq=3, deps=(1, 2)),
], ids=lambda m: type(m).__name__)
def test_the_codec_carries_deps_and_refuses_malformed_ones(message):
    codec = Codec(SPEC.message_types, num_nodes=3)
    assert codec.unpack(codec.pack(message)) == message
    name = type(message).__name__
    wire = codec.encode(message)
    position = 1 + [f for f in type(message).__dataclass_fields__].index("deps")
    for bad, words in [([0, 1], "a list"), ({"\x00tu": [0, 1, 2]}, "odd count"),
                       ({"\x00tu": [2, 1, 0, 1]}, "must increase"), ({"\x00tu": [3, 1]}, "outside 0..2"),
                       ({"\x00tu": [1, 0]}, "instance 0"), ({"\x00tu": [1, "x"]}, "not two integers"),
                       (7, "a int")]:
        body = list(wire["\x00dp"])
        body[position] = bad
        with pytest.raises(FrameError, match=rf"^{name}\.deps: .*{words}"):
            codec.decode({"\x00dp": body})
    # without the cluster's size the replica's range is not checked, the rest is
    assert Codec(SPEC.message_types).decode({"\x00dp": [*wire["\x00dp"][:position], {"\x00tu": [3, 1]},
                                                        *wire["\x00dp"][position + 1:]]}).deps == (3, 1)


def test_the_codec_refuses_a_malformed_conflict_or_watermark():
    """The other (replica, instance) fields that come off the wire: TryPreAccept's conflict (none or one pair) and a
    Watermark's prefix (one integer >= 0 per replica: a short one would move the global watermark wrongly)."""
    codec = Codec(SPEC.message_types, num_nodes=3)
    reply = TryPreAcceptReply(ballot=5, replica=1, instance=2, ok=True, promised=5, conflict=(2, 4))
    mark = Watermark(prefix=(3, 0, 7))
    for message in (reply, mark, TryPreAcceptReply(ballot=5, replica=1, instance=2, ok=True, promised=5)):
        assert codec.unpack(codec.pack(message)) == message

    def with_field(message, field, value):
        body = list(codec.encode(message)["\x00dp"])
        body[1 + list(type(message).__dataclass_fields__).index(field)] = value
        return {"\x00dp": body}

    for bad, words in [({"\x00tu": [1, 4, 2, 1]}, "2 pairs \\(one at most\\)"), ({"\x00tu": [3, 1]}, "outside 0..2"),
                       ({"\x00tu": [1, 0]}, "instance 0"), ([2, 4], "a list")]:
        with pytest.raises(FrameError, match=rf"^TryPreAcceptReply\.conflict: .*{words}"):
            codec.decode(with_field(reply, "conflict", bad))
    for bad, words in [({"\x00tu": [3, 0]}, "2 entries; one per replica: 3"), ({"\x00tu": [3, -1, 0]}, "-1"),
                       ({"\x00tu": [3, "x", 0]}, "'x'"), ([3, 0, 7], r"\[3, 0, 7\]")]:
        with pytest.raises(FrameError, match=rf"^Watermark\.prefix: .*{words}"):
            codec.decode(with_field(mark, "prefix", bad))


# ------------------------------------------------------------------------------------------------- durability
def _record(deps):
    return [COMMITTED, WRITE.to_plain(), 2, deps, 0, 0, True]


def test_a_durable_record_keeps_the_sparse_tuple_and_reads_the_vector_of_earlier_trees(tmp_path):
    inst = Instance(status=COMMITTED, command=WRITE, seq=2, deps=(0, 3, 2, 1), vbal=0)
    assert inst.plain()[3] is inst.deps  # shared, not copied
    assert Instance.from_plain(inst.plain(), 3).deps == (0, 3, 2, 1)
    assert Instance.from_plain(_record([3, 0, 1]), 3).deps == (0, 3, 2, 1)  # a vector: converted
    assert Instance.from_plain(_record([0, 0, 0]), 3).deps == NO_DEPS
    # through the real backend's storage and codec: a tuple stays a tuple, a list a list
    storage = DiskStorage(tmp_path, Codec(SPEC.message_types, num_nodes=3), fsync=False)
    storage.stage(PersistRecords(table=TABLE, put={"1.1": _record((0, 3, 2, 1)), "2.1": _record([3, 0, 1])}))
    storage.sync()
    storage.close()
    durable = DiskStorage(tmp_path, Codec(SPEC.message_types, num_nodes=3), fsync=False).load()
    node = EPaxosNode(0, 3, np.random.default_rng(0))
    node.on_recover(durable, 0.0)
    assert node.instances[(1, 1)].deps == node.instances[(2, 1)].deps == (0, 3, 2, 1)


@pytest.mark.parametrize("deps, words", [
    ((0, 3, 2), "odd count"), ((2, 1, 0, 3), "must increase"), ((0, 0), "instance 0"), ((4, 1), "outside 0..2"),
    ([0, 1], "list of 2 slots"), ([0, -1, 2], "list of 3 slots"), ({"0": 1}, "a dict"), ("0,1", "a str"),
])
def test_a_malformed_durable_record_is_refused_naming_it(deps, words):
    node = EPaxosNode(0, 3, np.random.default_rng(0))
    with pytest.raises(SpecError, match=rf"^epaxos durable record inst/1\.4: deps: .*{words}"):
        node.on_recover(DurableState(records={TABLE: {"1.4": _record(deps)}}), 0.0)


def test_the_canonical_knowledge_stays_in_step_and_answers_the_common_merges():
    """``_known_flat[key]`` is ``conf[key]`` in the canonical form after any registrations; a proposal equal to it
    comes back as the same object, one whose every pair is known here comes back as the replica's own tuple."""
    rng = random.Random(5)
    for trial in range(200):
        n = rng.randint(1, 40)
        node = EPaxosNode(0, n, np.random.default_rng(trial))
        for _ in range(rng.randint(1, 60)):
            q, i = rng.randrange(n), rng.randint(1, 50)
            node._register((q, i), Command(client_id=q, request_id=i, op="write", key=rng.choice("ab"), value=0), 1)
        for key, known in node.conf.items():
            replicas, flat = node._known_flat[key][:2]
            assert tuple(flat) == from_dict(known) and replicas == sorted(known), trial
        key = rng.choice(sorted(node.conf))
        mine = from_dict(node.conf[key])
        command = Command(client_id=99, request_id=1, op="read", key=key)
        iid = (rng.randrange(n), 1000)  # not known here: no replica is skipped
        same = tuple(mine)  # an equal tuple, not the node's object
        assert node._attributes(command, iid, 0, same)[1] is same
        pairs = [mine[k:k + 2] for k in range(0, len(mine), 2)]
        part = from_dict(dict(rng.sample(pairs, rng.randint(0, len(pairs)))))
        assert node._attributes(command, iid, 0, part)[1] == mine, trial


def test_an_instance_blocked_on_a_commit_tests_its_dependencies_again_until_all_are_committed():
    """``Instance.ready`` is set once every dependency pair is committed here, never before: a commit waiting for
    another is not marked, and runs (after it) once that one commits."""
    node = EPaxosNode(0, 3, np.random.default_rng(0))
    write = Command(client_id=1, request_id=1, op="write", key="x", value=1)
    later = Command(client_id=2, request_id=1, op="write", key="x", value=2)
    node.on_message(1, Commit(replica=1, instance=1, command=later, seq=2, deps=(2, 1)), 0.0)
    waiting = node.instances[(1, 1)]
    assert not waiting.executed and not waiting.ready and (1, 1) in node._blocked[(2, 1)]
    node.on_message(1, Commit(replica=1, instance=1, command=later, seq=2, deps=(2, 1)), 0.1)  # a duplicate
    assert not waiting.ready
    node.on_message(2, Commit(replica=2, instance=1, command=write, seq=1, deps=()), 0.2)
    assert waiting.executed and waiting.ready and node.instances[(2, 1)].executed
    assert [iid for _, iid in node.exec_log] == [(2, 1), (1, 1)]


def test_a_proposal_equal_to_an_earlier_form_of_the_knowledge_merges_to_what_is_known_now():
    """``_known_flat[key][3]`` keeps the canonical tuples made earlier: knowledge only grows, so a proposal equal to
    one of them is at most what is known, and the union is the replica's tuple, as the pair-by-pair test finds."""
    node = EPaxosNode(0, 5, np.random.default_rng(0))
    command = Command(client_id=9, request_id=1, op="write", key="x", value=1)
    node._register((1, 4), command, 3)
    earlier = node._attributes(command, (4, 1), 0, ())[1]  # the tuple made now, kept
    assert earlier == (1, 4) and earlier in node._known_flat["x"][3]
    node._register((1, 6), command, 5)
    node._register((2, 2), command, 6)
    now = node._attributes(command, (4, 2), 0, earlier)[1]
    assert now == (1, 6, 2, 2) and now is node._known_flat["x"][2]
    other = (1, 5, 2, 1)  # at most what is known, never a form of it: the pairs are compared
    assert other not in node._known_flat["x"][3] and node._attributes(command, (4, 3), 0, other)[1] == now
