"""The objects a simulation touches per input keep CPython's fast attribute layout.

CPython 3.11 stores a plain instance's attributes as inline values under keys shared by the class, and specialises
attribute reads and method calls (``self._handle(...)``) on that layout. Past 30 attributes the shared keys are
full: the instance gets a dict of its own, and no method call on it is specialised any more (Multi-Paxos 8 ran 3 %
more instructions with the runtime and the node in that state; EPaxos's 54-attribute node 3 %). Classes that need
more attributes declare ``__slots__``. These tests run each protocol briefly and look at every object of the run's
per-input path.
"""

from __future__ import annotations

import pytest

from seedance.sim import SimConfig, WorkloadConfig, simulate

LIMIT = 30  # CPython's largest shared-keys table (SHARED_KEYS_MAX_SIZE)


def _per_input_objects(result):
    runtime = result.runtime
    yield "Runtime", runtime
    yield "Clients", result.clients
    yield "Network", runtime.network
    yield "Trace", runtime.trace
    for host in runtime.hosts:
        yield "Host", host
        yield "Storage", host.storage
        if host.engine is not None:
            yield "EffectEngine", host.engine
        if host.node is not None:
            yield type(host.node).__name__, host.node


def _oversized(result) -> list[str]:
    found = set()
    for name, obj in _per_input_objects(result):
        attrs = getattr(obj, "__dict__", None)
        if attrs is not None and len(attrs) > LIMIT:
            found.add(f"{name}: {len(attrs)} attributes in an instance dict")
    return sorted(found)


@pytest.mark.parametrize("protocol", ["raft", "multipaxos", "epaxos", "echo"])
def test_consensus_runs_keep_inline_attributes(protocol):
    result = simulate(SimConfig(protocol=protocol, nodes=5, duration_s=0.3, seed=1,
                                workload=WorkloadConfig(clients=8), monitor=True))
    assert result.runtime.messages_delivered > 100
    assert _oversized(result) == []


def test_causal_runs_keep_inline_attributes():
    result = simulate(SimConfig(protocol="causal", nodes=4, duration_s=0.2, seed=1,
                                protocol_config={"width": 8, "height": 8},
                                workload=WorkloadConfig(mode="frame", clients=4, keys=64, frame_rate_hz=60.0)))
    assert result.runtime.messages_delivered > 10
    assert _oversized(result) == []


def test_a_training_run_keeps_inline_attributes():
    from seedance.experiments.training_run import sim_config

    result = simulate(sim_config(world=4, steps=20, commit_every=5), liveness=False)
    assert all(host.node.phase == "done" for host in result.runtime.hosts)
    assert _oversized(result) == []


def test_the_check_sees_an_oversized_instance():
    """The check itself: an object with more attributes than the limit is reported by name."""
    class Wide:
        def __init__(self):
            for i in range(LIMIT + 1):
                setattr(self, f"a{i}", i)

    class Fake:
        runtime = type("R", (), {"network": None, "trace": None, "hosts": []})()
        clients = Wide()

    assert _oversized(Fake()) == [f"Clients: {LIMIT + 1} attributes in an instance dict"]
