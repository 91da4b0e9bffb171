"""The causal clock-honesty monitor (seedance.models.protocols.causal.invariants.Monitor) reports exactly what the
monitor before its holder-count skip reported (tests/causal_monitor_reference.py, main 047768f verbatim): the same
breaches, in the same order, after every input — over campaign runs with and without the planted bugs (run past
their first breach, so the checks after a breach are compared too), on larger grids (the vectorised paths), on
random states with dishonest clocks and entries, and on breaches planted by hand (the skip is off after one)."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import numpy as np
import pytest

import causal_mutants
from causal_monitor_reference import ReferenceMonitor
from seedance.models.crdt import PixelGrid
from seedance.models.protocols.causal import SPEC, invariants
from seedance.sim import SimConfig, simulate
from test_causal_campaign import campaign_config, judge


class Tee:
    """The reference monitor and the new one told the same inputs; every answer must be the same."""

    def __init__(self, small: int | None = None) -> None:
        self.old, self.new = ReferenceMonitor(), invariants.Monitor()
        if small is not None:
            self.new.small = small  # how many pixels the plain-Python paths take at most (0: always numpy)
        self.calls = 0

    def observe_node(self, node):
        old, new = self.old.observe_node(node), self.new.observe_node(node)
        assert new == old, f"input {self.calls} at node {node.node_id}: {new} != {old}"
        self.calls += 1
        return new

    def observe(self, nodes):
        old, new = self.old.observe(nodes), self.new.observe(nodes)
        assert new == old
        return new

    def forget(self, node_id):
        self.old.forget(node_id)
        self.new.forget(node_id)

    def finish(self, nodes):
        old, new = self.old.finish(nodes), self.new.finish(nodes)
        assert new == old and self.new.violations == self.old.violations
        return new


def teed(config: SimConfig, *, small: int | None = None, stop: bool = False):
    """Simulate ``config`` with both monitors side by side (``stop``: stop at the first breach, as runs do)."""
    tees: list[Tee] = []

    def make() -> Tee:
        tees.append(Tee(small))
        return tees[-1]

    spec = config.protocol if not isinstance(config.protocol, str) else SPEC
    config = dataclasses.replace(config, protocol=dataclasses.replace(spec, monitor=make))
    result = simulate(config, liveness=False, stop_on_violation=stop)
    (tee,) = tees
    assert tee.calls > 0
    return result, tee


def _mutant(seed: int, name: str | None) -> SimConfig:
    config = campaign_config(seed)
    return config if name is None else dataclasses.replace(config, protocol=causal_mutants.spec(name))


@pytest.mark.parametrize("name", [None, *sorted(causal_mutants.MUTANTS)])
def test_the_same_reports_on_campaign_runs(name):
    """Campaign seeds, run to their end: blending-merge and eager-delivery breach the clock honesty again and again
    once they start (so the checks after the first breach, made in full, are compared too); the others never."""
    breaches = 0
    for seed in (0, 3, 7, 11):
        _result, tee = teed(_mutant(seed, name))
        breaches += len(tee.new.violations)
    assert breaches > 1 if name in ("blending-merge", "eager-delivery") else breaches == 0


@pytest.mark.slow
@pytest.mark.parametrize("name", [None, *sorted(causal_mutants.MUTANTS)])
def test_the_same_reports_on_every_mutant_seed(name):
    """Seeds 0-59 (the seeds a planted bug must be caught within), each run to its end past every breach."""
    for seed in range(60):
        teed(_mutant(seed, name))


def _wide(seed: int, faults: tuple[str, ...]) -> SimConfig:
    config = campaign_config(seed)
    return dataclasses.replace(
        config, nodes=9, protocol_config={**config.protocol_config, "width": 8, "height": 6},
        workload=dataclasses.replace(config.workload, keys=48, clients=4),
        nemesis=dataclasses.replace(config.nemesis, faults=faults))


@pytest.mark.parametrize("small", [0, 8, 10**6])
def test_the_same_reports_on_a_larger_grid_whichever_path(small):
    """48 pixels and 9 replicas under crashes and partitions: syncs and restarts change many pixels at once."""
    for seed, name in ((1, None), (2, "eager-delivery"), (4, "blending-merge")):
        config = _wide(seed, ("crash", "partition", "duplicate"))
        if name is not None:
            config = dataclasses.replace(config, protocol=causal_mutants.spec(name))
        teed(config, small=small)


@pytest.mark.parametrize("seed, name", [(7, None), (0, "blending-merge")])
def test_the_trace_is_the_same_with_either_monitor(seed, name):
    """The monitor computes nothing the run depends on: the same trace with main's monitor, with the new one and
    with none (a breach stops both monitored runs at the same input)."""
    config = dataclasses.replace(_mutant(seed, name), trace=True)
    spec = config.protocol if name is not None else SPEC
    new = simulate(config, liveness=False)
    old = simulate(dataclasses.replace(config, protocol=dataclasses.replace(spec, monitor=ReferenceMonitor)),
                   liveness=False)
    assert new.trace_sha256 == old.trace_sha256 and new.violations == old.violations
    assert bool(new.violations) == (name is not None)
    if name is None:
        assert simulate(dataclasses.replace(config, monitor=False), liveness=False).trace_sha256 == new.trace_sha256


def test_the_first_seed_that_catches_each_mutant_is_the_same():
    def first_caught(name, monitor):
        spec = dataclasses.replace(causal_mutants.spec(name), monitor=monitor)
        for seed in range(60):
            _summary, problems = judge(dataclasses.replace(campaign_config(seed), protocol=spec))
            if problems:
                return seed, problems
        return None, []

    for name in ("blending-merge", "eager-delivery"):
        seed, problems = first_caught(name, invariants.Monitor)
        assert seed is not None and (seed, problems) == first_caught(name, ReferenceMonitor)


# --- breaches planted by hand ----------------------------------------------------------------------------------------
def _set_clock(grid: PixelGrid, entry: int, value: int) -> None:
    """A clock entry set by hand (a grid's clock is read-only: it is replaced)."""
    clock = grid.clock.copy()
    clock[entry] = value
    grid.clock = clock


def _nodes(n: int, width: int = 2) -> list[SimpleNamespace]:
    return [SimpleNamespace(node_id=i, num_nodes=n, grid=PixelGrid(width, 1, n)) for i in range(n)]


def test_a_planted_breach_is_reported_in_the_same_words_and_the_skip_is_off_after_it():
    a, b, c = _nodes(3)
    tee = Tee()
    assert tee.observe([a, b, c]) == []
    delta = a.grid.write(0, 0, 7, node=0, t=0.5)
    assert tee.observe_node(a) == []
    _set_clock(b.grid, 0, 1)  # b claims a's write without holding it
    assert tee.observe_node(b) == ["node 1's clock [1, 0, 0] covers write (node 0, dot 1) at pixel 0 held by node 0, "
                                   "but node 1 holds an older entry there"]
    # c receives the entry a holds: while every pair was clean, a's check stood for c's; now b's breach against it
    # is reported for c too (the skip would miss it)
    c.grid.join(delta)
    assert tee.observe_node(c) == ["node 1's clock [1, 0, 0] covers write (node 0, dot 1) at pixel 0 held by node 2, "
                                   "but node 1 holds an older entry there"]
    assert tee.new.violations == tee.old.violations and len(tee.new.violations) == 2


def test_an_entry_another_replica_holds_is_still_checked_against_its_own_clock():
    a, b, c = _nodes(3)
    tee = Tee()
    tee.observe([a, b, c])
    delta = a.grid.write(1, 0, 5, node=0, t=0.25)
    b.grid.join(delta)
    assert tee.observe_node(a) == [] and tee.observe_node(b) == []
    # c takes the entry but not the clock that covers it
    c.grid.overwrite(1, **{name: getattr(delta, name)[0] for name in c.grid.f})
    assert tee.observe_node(c) == ["node 2 holds pixel 1 written by node 0 (dot 1) beyond its own clock [0, 0, 0]"]


def test_a_writer_outside_the_clock_turns_the_skip_off():
    """An entry whose writer is outside the clock is compared with the last clock entry, but its dot is noted under
    its writer, so a clock newly covering it there is not looked up: that breach stays unseen, and the next replica
    taking the entry must still be checked against every other one (as the reference does)."""
    a, b, c = _nodes(3)
    tee = Tee()
    tee.observe([a, b, c])
    a.grid.write(0, 0, 4, node=0, t=0.5)
    a.grid.overwrite(0, node=5)  # a writer no clock has (compared with clock entry 2)
    _set_clock(a.grid, 2, 1)
    assert tee.observe_node(a) == []
    _set_clock(b.grid, 2, 1)  # b's clock now covers (writer 5 -> entry 2, dot 1) without holding it: not looked up
    assert tee.observe_node(b) == []
    c.grid.overwrite(0, **{name: a.grid.f[name][0] for name in a.grid.f})
    c.grid.clock = a.grid.clock
    assert tee.observe_node(c) == ["node 1's clock [0, 0, 1] covers write (node 5, dot 1) at pixel 0 held by node 2, "
                                   "but node 1 holds an older entry there"]


def test_honest_replication_reports_nothing_and_uses_the_skip():
    nodes = _nodes(4, width=3)
    tee = Tee()
    tee.observe(nodes)
    for step in range(12):
        writer = nodes[step % 4]
        delta = writer.grid.write(step % 3, 0, step, node=writer.node_id, t=float(step))
        tee.observe_node(writer)
        for other in nodes:
            if other is not writer:
                other.grid.join(delta)
                assert tee.observe_node(other) == []
    assert tee.new.violations == [] and tee.new._clean


def _random_step(rng, nodes, tee, n, width, dishonest):
    """One random input at one replica: a write, a join of another's state, a crash and restart (its own state joined
    with a peer's); ``dishonest``: also
    joins of one pixel under the whole clock, clocks ticked and values changed by hand."""
    i = int(rng.integers(n))
    node, kind = nodes[i], rng.random()
    if kind < 0.3:
        node.grid.write(int(rng.integers(width)), 0, int(rng.integers(1, 4)), node=i, t=float(rng.integers(3)))
    elif kind < 0.8:
        source = nodes[int(rng.integers(n))].grid.full_delta()
        if dishonest and len(source) and rng.random() < 0.3:
            k = int(rng.integers(len(source)))
            source = dataclasses.replace(source, **{f: getattr(source, f)[k:k + 1] for f in (
                "idx", "value", "version", "t", "node", "seq")})
        node.grid.join(source)
    elif kind < 0.9 or not dishonest:
        tee.forget(i)
        grid = node.grid.copy()  # what it persisted, and a peer's state at its restart
        grid.join_grid(nodes[int(rng.integers(n))].grid)
        nodes[i] = node = SimpleNamespace(node_id=i, num_nodes=n, grid=grid)
    elif kind < 0.95:
        j = int(rng.integers(n))
        _set_clock(node.grid, j, int(node.grid.clock[j]) + 1)
    else:
        p = int(rng.integers(width))
        node.grid.overwrite(p, value=node.grid.f["value"][p] + 1)
    assert node.grid.written_count == len(node.grid.written())
    tee.observe_node(node)


@pytest.mark.parametrize("small", [0, 8])
def test_random_inputs_with_and_without_dishonest_replicas_give_the_same_reports(small):
    rng = np.random.default_rng(small)
    outcomes = {True: set(), False: set()}
    for trial in range(80):
        n, width, dishonest = int(rng.integers(2, 6)), int(rng.integers(1, 12)), trial % 2 == 1
        nodes = _nodes(n, width)
        for node in nodes[:trial % 3]:  # some replicas already hold writes when first seen
            node.grid.write(int(rng.integers(width)), 0, 1, node=node.node_id, t=0.0)
        tee = Tee(small)
        tee.observe(nodes)
        for _ in range(40):
            _random_step(rng, nodes, tee, n, width, dishonest)
        tee.finish(nodes)
        outcomes[dishonest].add(bool(tee.new.violations))
    assert outcomes == {False: {False}, True: {True, False}}


def test_a_grid_replaced_under_the_same_node_is_compared_whole_and_then_followed():
    a, b = _nodes(2, width=3)
    tee = Tee()
    tee.observe([a, b])
    a.grid.write(0, 0, 4, node=0, t=0.5)
    assert tee.observe_node(a) == []
    grid = a.grid.copy()  # a new grid object the monitor has not watched: found by comparing it whole
    grid.overwrite(2, version=1, node=1, seq=1, value=3)  # b's write, which a's clock does not cover
    a.grid = grid
    assert tee.observe_node(a) == ["node 0 holds pixel 2 written by node 1 (dot 1) beyond its own clock [1, 0]"]
    grid.overwrite(1, version=1, node=1, seq=2, value=6)  # then followed through the grid's notes
    assert tee.observe_node(a) == ["node 0 holds pixel 1 written by node 1 (dot 2) beyond its own clock [1, 0]"]


def test_finish_drops_the_grid_copies_before_the_full_check_and_observing_again_starts_over():
    a, b, c = _nodes(3)
    monitor = invariants.Monitor()
    assert monitor.observe([a, b, c]) == []
    delta = a.grid.write(0, 0, 7, node=0, t=0.5)
    c.grid.join(delta)
    assert monitor.observe_node(a) == [] and monitor.observe_node(c) == []
    assert monitor._g.size and a.grid.watched_by(monitor._token)
    assert monitor.finish([a, b, c]) == []
    assert monitor._g.size == 0 and not any(n.grid.watched_by(monitor._token) for n in (a, b, c))
    _set_clock(b.grid, 0, 1)  # after the end: a breach is still found, from the nodes' states alone
    assert monitor.observe([a, b, c]) == [
        "node 1's clock [1, 0, 0] covers write (node 0, dot 1) at pixel 0 held by node 0, "
        "but node 1 holds an older entry there",
        "node 1's clock [1, 0, 0] covers write (node 0, dot 1) at pixel 0 held by node 2, "
        "but node 1 holds an older entry there"]
