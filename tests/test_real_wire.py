"""The wire codec: plain data only, registered types only, never pickle (seedance/models/wire.py)."""

from __future__ import annotations

import enum
import pickle
from dataclasses import dataclass

import msgpack
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seedance.errors import FrameError
from seedance.models.protocols.contract import ClientRequest, Operation, Reply, Outcome
from seedance.models.wire import Codec


class Role(enum.Enum):
    LEADER = "leader"
    FOLLOWER = "follower"


@dataclass(frozen=True, kw_only=True, slots=True)
class Inner:
    term: int
    blob: bytes


@dataclass(frozen=True, kw_only=True, slots=True)
class Outer:
    role: Role
    entries: tuple[Inner, ...]
    weights: object
    votes: frozenset
    by_node: dict


CODEC = Codec((Outer, Inner))


def test_round_trip_of_nested_dataclasses_enums_tuples_sets_arrays():
    msg = Outer(role=Role.LEADER, entries=(Inner(term=3, blob=b"\x00\xff"),), weights=np.arange(6.0).reshape(2, 3),
                votes=frozenset({1, 2}), by_node={0: (1, "a"), "x": [None, True, 1.5]})
    back = CODEC.unpack(CODEC.pack(msg))
    assert back.role is Role.LEADER and back.entries == msg.entries and back.votes == msg.votes
    assert back.by_node == msg.by_node and isinstance(back.by_node[0], tuple)
    np.testing.assert_array_equal(back.weights, msg.weights)
    assert back.weights.dtype == np.float64 and back.weights.shape == (2, 3)


def test_contract_types_and_their_enums_are_always_known():
    codec = Codec(())
    req = ClientRequest(client_id=1, request_id=2, op=Operation.CAS, key="k", value=[1, 2])
    rep = Reply(client_id=1, request_id=2, outcome=Outcome.FAIL, error="not-leader", leader_hint=0)
    assert codec.unpack(codec.pack(req)) == req and codec.unpack(codec.pack(rep)) == rep
    assert type(codec.unpack(codec.pack(rep)).outcome) is Outcome  # a str-valued enum keeps its type


def test_unknown_type_tag_is_rejected():
    raw = msgpack.packb({"\x00dc": ["os.system", {"command": "true"}]})
    with pytest.raises(FrameError, match="unknown type tag"):
        CODEC.unpack(raw)


def test_unregistered_dataclass_cannot_be_sent():
    @dataclass(frozen=True)
    class Stranger:
        x: int

    with pytest.raises(FrameError, match="not registered"):
        CODEC.pack(Stranger(x=1))


def test_object_arrays_and_arbitrary_objects_are_refused():
    with pytest.raises(FrameError):
        CODEC.pack(np.array([object()], dtype=object))
    with pytest.raises(FrameError):
        CODEC.pack(object())
    bad = msgpack.packb({"\x00nd": ["|O", [1], b"\x00" * 8]})
    with pytest.raises(FrameError, match="not allowed"):
        CODEC.unpack(bad)


def test_pickle_bytes_are_just_bytes_or_garbage():
    payload = pickle.dumps({"a": 1})
    assert CODEC.unpack(CODEC.pack(payload)) == payload  # carried as opaque bytes, never unpickled
    with pytest.raises(FrameError):
        CODEC.unpack(payload)  # a pickle stream is not a msgpack value we accept


def test_bad_fields_for_a_known_type_are_rejected():
    raw = msgpack.packb({"\x00dc": ["Inner", {"term": 1, "blob": b"", "evil": 1}]})
    with pytest.raises(FrameError, match="bad fields"):
        CODEC.unpack(raw)


def test_dataclasses_travel_positionally_and_the_named_form_still_decodes():
    msg = Inner(term=7, blob=b"ab")
    raw = msgpack.unpackb(CODEC.pack(msg), raw=False)
    assert raw == {"\x00dp": ["Inner", 7, b"ab"]}  # field values in declared order, no field names
    assert CODEC.unpack(CODEC.pack(msg)) == msg
    named = msgpack.packb({"\x00dc": ["Inner", {"term": 7, "blob": b"ab"}]}, use_bin_type=True)
    assert CODEC.unpack(named) == msg  # what earlier versions wrote (and durable logs may hold)
    nested = Outer(role=Role.FOLLOWER, entries=(msg, Inner(term=8, blob=b"")), weights=None, votes=frozenset(),
                   by_node={})
    assert CODEC.unpack(CODEC.pack(nested)) == nested


@dataclass(frozen=True, kw_only=True)
class Holder:
    items: tuple
    note: object = None


@dataclass(kw_only=True)
class Loose:
    n: int


def test_a_nested_frozen_values_encoding_is_reused_only_while_nothing_in_it_can_change():
    codec = Codec((Holder, Inner, Loose))
    entry = Inner(term=1, blob=b"x")
    first = codec.encode(Holder(items=(entry,)))
    assert codec.encode(Holder(items=(entry,)))["\x00dp"][1] == first["\x00dp"][1]
    loose = Loose(n=1)  # not frozen: a field may be reassigned, so it is encoded afresh each time
    codec.encode(Holder(items=(loose,)))
    loose.n = 2
    assert codec.unpack(codec.pack(Holder(items=(loose,)))).items[0].n == 2
    inner_list = [1]  # frozen, but holding a list that can change: encoded afresh too
    held = Holder(items=(), note=inner_list)
    outer = Holder(items=(held,))
    codec.encode(outer)
    inner_list.append(2)
    assert codec.unpack(codec.pack(outer)).items[0].note == [1, 2]
    many = [Inner(term=i, blob=b"") for i in range(20_000)]  # the memo stays bounded
    assert [v.term for v in codec.unpack(codec.pack(Holder(items=tuple(many)))).items] == list(range(20_000))
    assert len(codec._memo) <= 8192


@pytest.mark.parametrize("body, match", [
    (["Inner", 1], "1 field values for Inner"),
    (["Inner", 1, b"", 3], "3 field values for Inner"),
    (["os.system", "true"], "unknown type tag"),
    ([], "empty positional"),
    ("Inner", "empty positional"),
    ([3, 1, b""], "unknown type tag"),
])
def test_bad_positional_values_are_rejected_naming_the_type(body, match):
    with pytest.raises(FrameError, match=match):
        CODEC.unpack(msgpack.packb({"\x00dp": body}, use_bin_type=True))


def test_a_dict_that_looks_like_a_tag_is_escaped():
    tricky = {"\x00dc": ["Inner", {"term": 1, "blob": b""}]}
    assert CODEC.unpack(CODEC.pack(tricky)) == tricky


plain = st.recursive(
    st.none() | st.booleans() | st.integers(-2**63, 2**63 - 1) | st.floats(allow_nan=False) | st.text() | st.binary(),
    lambda children: st.lists(children, max_size=4) | st.tuples(children, children)
    | st.dictionaries(st.text(max_size=5), children, max_size=4)
    | st.dictionaries(st.integers(-5, 5), children, max_size=3),
    max_leaves=20,
)


@settings(max_examples=200, deadline=None)
@given(plain)
def test_plain_data_round_trips_exactly(value):
    assert CODEC.unpack(CODEC.pack(value)) == value


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=64))
def test_garbage_bytes_never_escape_as_anything_but_frame_error(raw):
    try:
        CODEC.unpack(raw)
    except FrameError:
        pass


@dataclass(frozen=True, kw_only=True, slots=True)
class Checked:
    members: tuple

    def wire_check(self, num_nodes):
        if any(m >= (num_nodes or 1 << 30) for m in self.members):
            raise FrameError("Checked.members", f"a member outside 0..{num_nodes - 1}", "node ids")


def test_a_type_checks_what_it_decodes_and_never_what_it_encodes():
    """``wire_check(num_nodes)`` runs on every decoded instance, positional or named form, with the codec's cluster
    size; the error names the field. Encoding does not call it (the simulator never pays for it)."""
    codec = Codec((Checked,), num_nodes=3)
    assert codec.unpack(codec.pack(Checked(members=(0, 2)))) == Checked(members=(0, 2))
    bad = codec.pack(Checked(members=(0, 5)))  # encodes: the sender's own values are not checked
    with pytest.raises(FrameError, match=r"^Checked\.members: a member outside 0\.\.2"):
        codec.unpack(bad)
    with pytest.raises(FrameError, match=r"^Checked\.members"):
        codec.decode({"\x00dc": ["Checked", {"members": {"\x00tu": [7]}}]})
    assert Codec((Checked,)).unpack(bad) == Checked(members=(0, 5))  # no cluster size given: this check has none
