"""The fast paths of the causal protocol's hot loop, each against the general path it stands for: causal delivery's
clock check, the grid's clock join, a delta read from the wire, one Sync per interval for every peer, the
network's routing rows, and trace.json rendered by a forked child."""

from __future__ import annotations

import os

import numpy as np
import pytest

from seedance.models import clocks
from seedance.models.crdt import GridDelta, PixelGrid
from seedance.models.protocols.causal.messages import Sync
from seedance.models.protocols.causal.node import CausalConfig, CausalNode
from seedance.models.protocols.contract import ClientRequest, Operation, Send
from seedance.sim import chrome_aside
from seedance.sim.network import Network, placement, resolve_topology
from seedance.tracing import Trace


def _general_deliverable(src: int, message: Sync, have: np.ndarray) -> bool:
    """What _deliverable decides, by the general rule: the clock on every entry but the sender's is covered."""
    if message.start is None or (message.start == 0 and message.end == 1):
        return True
    need = np.asarray(message.clock, np.int64).copy()
    if src < need.size:
        need[src] = 0
    return clocks.leq(need, have)


def _no_pixels(clock: np.ndarray) -> GridDelta:
    return GridDelta(idx=np.zeros(0, np.int64), value=np.zeros(0, np.int64), version=np.zeros(0, np.int64),
                     t=np.zeros(0), node=np.zeros(0, np.int32), seq=np.zeros(0, np.int64), clock=clock)


def test_deliverable_fast_path_matches_the_general_rule():
    rng = np.random.default_rng(7)
    node = CausalNode(0, 8, rng, CausalConfig(width=4, height=4))
    for _ in range(2000):
        have = rng.integers(0, 3, 8)
        need = np.maximum(have - rng.integers(0, 2, 8), 0)
        need[rng.integers(0, 8, rng.integers(0, 3))] += rng.integers(0, 2)
        src = int(rng.integers(0, 8))
        message = Sync.of(0, int(rng.integers(0, 3)), int(rng.integers(1, 4)), _no_pixels(need))
        assert node._deliverable(src, message, have) == _general_deliverable(src, message, have)


def test_grid_join_clock_fast_path_matches_clocks_join_and_stays_read_only():
    rng = np.random.default_rng(3)
    grid = PixelGrid(4, 4, 6)
    for clock in (rng.integers(0, 5, 6), rng.integers(0, 5, 6).astype(np.int32), rng.integers(0, 5, 4)):
        before = grid.clock
        expected = clocks.join(before, clock)
        grid.join(_no_pixels(clock))
        assert np.array_equal(grid.clock, expected) and grid.clock.dtype == np.int64
        assert grid.clock is not before and grid.clock is not clock and not grid.clock.flags.writeable
        assert grid.clock.base is None  # owns its data: the monitor's same-object shortcut relies on it


def test_from_wire_fast_path_builds_the_same_delta_as_the_constructor():
    delta = PixelGrid(4, 4, 3).write_delta(1, 2, 9, node=1, t=0.5)
    fast = GridDelta.from_wire(delta.to_wire())
    assert type(fast) is GridDelta and fast.same_as(delta) and vars(fast) == vars(GridDelta(*delta.to_wire()))
    assert all(getattr(fast, n) is getattr(delta, n) for n in vars(delta))  # the arrays as sent, no copies
    with pytest.raises(AttributeError):
        fast.idx = None  # still frozen
    converted = GridDelta.from_wire([a.tolist() for a in delta.to_wire()])  # plain lists (the real wire): converted
    assert converted.same_as(delta) and converted.node.dtype == np.int32


def test_one_sync_per_interval_carries_what_each_peer_would_have_been_sent():
    node = CausalNode(0, 5, np.random.default_rng(0), CausalConfig(width=4, height=4))
    node.on_start(0.0)
    effects = node.on_client_request(ClientRequest(client_id=0, request_id=1, op=Operation.WRITE, key="k3",
                                                   value=5), 0.0)
    sends = [e for e in effects if type(e) is Send]
    assert [s.dst for s in sends] == [1, 2, 3, 4] and len({id(s.message) for s in sends}) == 1
    fresh = Sync.of(node.epoch, 1, node.buffer.counter, node.buffer.span(1))
    for send in sends:
        assert send.message.delta().same_as(fresh.delta()) and (send.message.start, send.message.end) == (1, 2)
        assert send.size_bytes == 32 + fresh.delta().size_bytes
    node.on_client_request(ClientRequest(client_id=0, request_id=2, op=Operation.WRITE, key="k4", value=6), 0.0)
    node.sent[2] = 1  # a peer that lags: the interval from 1 again, over both groups
    again = node._push(2)[0].message
    assert (again.start, again.end) == (1, 3) and again.delta().same_as(node.buffer.span(1))


def test_routing_rows_give_the_topology_routes():
    topo = resolve_topology("dgx-a100", 24)
    network = Network(topo, 24, np.random.default_rng(0), devices=placement(topo, 24))
    for dst in range(1, 24):  # past ROW_AFTER peers node 0's whole row is routed at once
        network.transit(0, dst, 100, 0.0)
    assert network._rows[0] is not None
    for dst in range(1, 24):
        links = topo.routes[(network.devices[0], network.devices[dst])]
        assert network._route(0, dst) == tuple(network._link_index[link] for link in links)
    assert network._rows[0][0] is None


def _trace(records: int) -> Trace:
    trace = Trace(num_nodes=3, spill_records=100)
    for k in range(records):
        trace.records.append((k * 1e-6, "send", k % 3, "Sync", (k + 1) % 3, 72, k * 1e-6 + 5e-6))
        trace.records.append((k * 1e-6, "deliver", k % 3, "Ack", (k + 2) % 3))
        if len(trace.records) >= trace.spill_records:
            trace.spill()
    return trace


@pytest.mark.parametrize("fork", [True, False])
def test_chrome_aside_writes_the_file_write_chrome_writes(tmp_path, monkeypatch, fork):
    if not fork:
        monkeypatch.setattr(chrome_aside.threading, "active_count", lambda: 2)  # a thread runs: no fork
    trace = _trace(700)
    expected_path = trace.write_chrome(tmp_path / "a.json", limit=1000, rest="r")
    expected = dict(trace.last_chrome, path=None)
    wait = chrome_aside.write_chrome_aside(trace, tmp_path / "b.json", limit=1000, rest="r")
    records = b"".join(trace._canonical_chunks())  # the parent reads the spill file meanwhile
    shown = wait()
    assert dict(shown, path=None) == expected and shown is trace.last_chrome and shown["truncated"]
    assert (tmp_path / "b.json").read_bytes() == expected_path.read_bytes()
    assert records == b"".join(trace._canonical_chunks())


def test_chrome_aside_falls_back_to_writing_here_when_the_child_fails(tmp_path, monkeypatch):
    trace = _trace(50)
    expected = trace.write_chrome(tmp_path / "a.json").read_bytes()
    monkeypatch.setattr(chrome_aside, "_child", lambda *args: os._exit(3))
    assert chrome_aside.write_chrome_aside(trace, tmp_path / "b.json", limit=None)()["events"] > 0
    assert (tmp_path / "b.json").read_bytes() == expected


def test_monitor_remembers_each_clock_entry_by_entry_as_the_whole_clock_would_be():
    from seedance.models.protocols.causal.invariants import Monitor, check

    rng = np.random.default_rng(11)
    nodes = [CausalNode(i, 12, rng, CausalConfig(width=3, height=3)) for i in range(12)]  # > small entries move
    monitor = Monitor()
    for step in range(400):
        node = nodes[int(rng.integers(0, 12))]
        if rng.random() < 0.4:
            x, y = int(rng.integers(0, 3)), int(rng.integers(0, 3))
            node.grid.write(x, y, step, node=node.node_id, t=step * 1e-3)
        else:  # a delivery of another replica's state
            node.grid.join(nodes[int(rng.integers(0, 12))].grid.full_delta())
        assert monitor.observe_node(node) == []
        assert np.array_equal(monitor._clock[node.node_id], node.grid.clock)
    assert check(nodes) == []


def test_a_node_routing_to_a_few_peers_of_many_keeps_no_row():
    """Past a sixteenth of the nodes (at least 8) a node's whole row is routed; below it its routes are kept one by
    one (at 1,024 replicas each acknowledging 16 writers, a row each had cost 1.2 s and 90 MB)."""
    topo = resolve_topology("dgx-a100", 256)
    network = Network(topo, 256, np.random.default_rng(0), devices=placement(topo, 256))
    peers = range(100, 116)
    for dst in peers:  # 16 peers: 256 // 16, not past it
        network.transit(3, dst, 100, 0.0)
    assert network._rows[3] is None and len(network._routes) == 16
    network.transit(3, 200, 100, 0.0)  # the 17th
    assert network._rows[3] is not None
    for dst in (*peers, 200, 250):
        links = topo.routes[(network.devices[3], network.devices[dst])]
        assert network._route(3, dst) == tuple(network._link_index[link] for link in links)
