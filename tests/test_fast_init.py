"""The faster generated ``__init__`` of frozen slotted records (seedance.models.protocols.records.fast_init)."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from seedance.models.protocols.contract import Annotate, PersistRecords, StartWork
from seedance.models.protocols.records import fast_init


def _pair() -> tuple[type, type]:
    """The same record twice: one keeps the dataclass's generated __init__, the other gets fast_init's."""
    def make() -> type:
        @dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
        class Rec:
            name: str
            size: int = 64
            put: dict[str, Any] = dataclasses.field(default_factory=dict)
            tags: list[str] = dataclasses.field(default_factory=lambda: ["x"])
        return Rec
    plain, fast = make(), make()
    fast_init(fast)
    return plain, fast


@pytest.mark.parametrize("kwargs", [{"name": "a"}, {"name": "a", "size": 3}, {"name": "a", "put": {"k": 1}},
                                    {"name": "a", "tags": []}, {"name": "b", "size": 0, "put": {}, "tags": ["y"]}])
def test_the_same_fields_as_the_generated_init(kwargs: dict) -> None:
    plain, fast = _pair()
    assert fast.__init__ is not plain.__init__
    a, b = plain(**kwargs), fast(**kwargs)
    assert dataclasses.astuple(a) == dataclasses.astuple(b)
    assert repr(a).split("(", 1)[1] == repr(b).split("(", 1)[1]


def test_a_default_factory_runs_once_per_object_and_only_when_left_out() -> None:
    _, fast = _pair()
    first, second = fast(name="a"), fast(name="a")
    assert first.put == {} and first.put is not second.put  # a fresh dict each time, never one shared default
    assert first.tags == ["x"] and first.tags is not second.tags
    given = {"k": 1}
    assert fast(name="a", put=given).put is given  # what the caller passed is kept as it is, not copied


def test_the_same_errors_as_the_generated_init() -> None:
    plain, fast = _pair()
    for cls in (plain, fast):
        with pytest.raises(TypeError):
            cls()  # a required field left out
        with pytest.raises(TypeError):
            cls(name="a", colour="red")  # no such field
        with pytest.raises(TypeError):
            cls("a")  # keyword-only
        with pytest.raises(dataclasses.FrozenInstanceError):
            cls(name="a").size = 1  # type: ignore[misc]


def test_the_contract_records_with_factories_use_it() -> None:
    for cls in (PersistRecords, Annotate, StartWork):
        assert cls.__init__.__code__.co_filename == "<string>" and "_UNSET" in cls.__init__.__globals__
    write = PersistRecords(table="t", put={"1": (2, 3)}, size_bytes=10)
    assert write == PersistRecords(table="t", put={"1": (2, 3)}, size_bytes=10)
    assert PersistRecords(table="t").put == {} and PersistRecords(table="t").put is not PersistRecords(table="t").put
    assert StartWork(work_id=1, op="sum").params == {}
