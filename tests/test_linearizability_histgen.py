"""The synthetic history generator: well-formed, reproducible, linearizable by construction; planted violations."""

from __future__ import annotations

import numpy as np
import pytest

from seedance.analysis.histgen import GeneratorConfig, atomic_history, plant_stale_read
from seedance.history.events import EventType, HistoryValidator, Operation
from seedance.history.jsonl import event_to_json
from seedance.history.linearizability import check


def test_well_formed_reproducible_and_shaped_by_the_config():
    config = GeneratorConfig(ops=2000, clients=16, keys=4, cas_fraction=0.2, info_fraction=0.05, fail_fraction=0.02)
    events = atomic_history(config, np.random.default_rng(11))
    validator = HistoryValidator()
    for index, event in enumerate(events, start=1):
        validator.add(event, f"line {index}")
    assert [event_to_json(e) for e in events] == [
        event_to_json(e) for e in atomic_history(config, np.random.default_rng(11))]
    assert events != atomic_history(config, np.random.default_rng(12))
    invokes = [e for e in events if e.type is EventType.INVOKE]
    assert len(invokes) == 2000 and {e.key for e in invokes} == {"k0", "k1", "k2", "k3"}
    infos = sum(e.type is EventType.INFO for e in events)
    assert 40 < infos < 160  # ~5 %
    assert max(e.process for e in events) >= 16  # clients continue as new processes after info
    reads = sum(e.f is Operation.READ for e in invokes)
    assert 800 < reads < 1200
    assert check(events, "kv").valid is True


def test_planted_stale_read_is_not_linearizable_and_none_when_impossible():
    events = atomic_history(GeneratorConfig(ops=500, clients=8), np.random.default_rng(3))
    planted, where = plant_stale_read(events, np.random.default_rng(4))
    assert planted[where["read_event"] - 1].value == where["stale_value"]
    result = check(planted, "register")
    assert result.valid is False
    assert result.first_violation["op"]["return_line"] == where["read_event"]
    only_writes = atomic_history(GeneratorConfig(ops=50, read_fraction=0.0), np.random.default_rng(3))
    assert plant_stale_read(only_writes, np.random.default_rng(4)) is None


def test_config_is_validated():
    with pytest.raises(ValueError):
        GeneratorConfig(clients=0)
    with pytest.raises(ValueError):
        GeneratorConfig(read_fraction=0.8, cas_fraction=0.5)
