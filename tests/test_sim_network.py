"""The fabric model: α–β latency, contended links, placement on topologies, and network faults."""

from __future__ import annotations

import numpy as np
import pytest

from _sim_probe import inputs, probe_spec
from seedance.errors import SpecError
from seedance.models.protocols.contract import Send, SetTimer, StartCollective
from seedance.models.topology import load
from seedance.sim import SimConfig, WorkloadConfig, simulate
from seedance.sim.network import Network, resolve_topology, uniform_topology

SMALL = 64
BULK = 1 << 30  # 1 GiB


def run(react, *, nodes=3, duration_s=0.2, actions=(), **kwargs):
    spec = probe_spec(react)
    config = SimConfig(protocol=spec, nodes=nodes, duration_s=duration_s, workload=WorkloadConfig(clients=0),
                       **kwargs)
    return spec, simulate(config, actions=actions)


def test_uncontended_message_costs_latency_plus_size_over_bandwidth():
    """Hockney's α–β: two 10 µs links at 25 GB/s."""
    network = Network(uniform_topology(3), 3, np.random.default_rng(0))
    assert network.transit(0, 1, SMALL, 0.0) == pytest.approx(20e-6 + SMALL / 25e9)
    assert network.transit(1, 2, 25_000_000, 1.0) == pytest.approx(1.0 + 20e-6 + 1e-3)


def test_bulk_transfer_delays_a_small_message_queued_behind_it():
    """Links are FIFO resources: a 1 GiB send from node 0 holds its uplink ~43 ms; the next small message waits."""
    def react(node, kind, arg, now):
        if kind == "start" and node.node_id == 0:
            return [Send(dst=1, message="bulk", size_bytes=BULK), Send(dst=2, message="vote", size_bytes=SMALL)]
    spec, result = run(react)
    vote = [e for e in inputs(spec, "message", node=2) if e[3][1] == "vote"][0]
    uncontended = result.runtime.network.uncontended_s(0, 2, SMALL)
    assert vote[0] > BULK / 25e9 > 100 * uncontended

    def alone(node, kind, arg, now):
        if kind == "start" and node.node_id == 0:
            return [Send(dst=2, message="vote", size_bytes=SMALL)]
    spec_alone, _ = run(alone)
    (t_alone, *_), = inputs(spec_alone, "message", node=2)
    assert t_alone < 1e-4


def test_bulk_collective_delays_consensus_messages_on_its_links():
    """A 1 GiB allreduce over the ring shares each member's uplink max-min fairly with the protocol's messages
    (seedance.sim.flows): a heartbeat sent during it is slowed (its fair share, behind one slice of the collective) but
    not held until the collective ends, and the collective takes at least its ring share at the link's rate."""
    def react(node, kind, arg, now):
        if kind == "start":
            return [StartCollective(collective_id="grad", op="allreduce", group=(0, 1, 2), payload=np.ones(2),
                                    nominal_size_bytes=BULK)]
        if kind == "collective" and node.node_id == 0:
            return []
    heartbeat_at = 1e-5

    def heartbeat(runtime):
        runtime._send(0, 1, "heartbeat", SMALL, runtime.env.now)
    spec, result = run(react, actions=[(heartbeat_at, heartbeat)])
    hb = [e for e in inputs(spec, "message", node=1) if e[3][1] == "heartbeat"][0]
    ring_share = 2 * 2 / 3 * BULK
    uncontended = result.runtime.network.uncontended_s(0, 1, SMALL)
    assert heartbeat_at + uncontended < hb[0] < ring_share / 25e9 / 100
    done = inputs(spec, "collective")
    assert all(e[3].ok for e in done) and done[0][0] >= ring_share / 25e9


def test_nodes_map_to_topology_devices():
    topo = load("dgx-a100")
    assert resolve_topology("dgx-a100", 5).num_devices == 8
    assert resolve_topology("dgx-a100", 12).num_hosts == 2  # grown to fit
    with pytest.raises(SpecError, match="do not fit"):
        resolve_topology(topo, 9)
    with pytest.raises(SpecError):
        resolve_topology("no-such-preset", 3)


def test_messages_over_a_preset_topology_use_its_routes():
    topo = load("dgx-a100", nodes=2)
    network = Network(topo, 16, np.random.default_rng(0))
    inside = network.uncontended_s(0, 1, SMALL)
    across = network.uncontended_s(0, 8, SMALL)
    assert across > inside > 0
    assert across == pytest.approx(topo.latency_us[0, 8] * 1e-6, rel=0.05)


def _echo_pairs():
    """Node 0 sends 200 numbered messages to node 1 at 1 ms (after the test's actions at time 0)."""
    def react(node, kind, arg, now):
        if kind == "start" and node.node_id == 0:
            return [SetTimer(name="go", delay_s=0.001)]
        if kind == "timer":
            return [Send(dst=1, message=k, size_bytes=SMALL) for k in range(200)]
    return react


@pytest.mark.parametrize("fault, value, check", [
    ("loss_p", 1.0, lambda got, trace: got == [] and {r[5] for r in trace.of_kind("drop")} == {"loss"}),
    ("duplicate_p", 1.0, lambda got, trace: len(got) == 400),
    ("reorder_s", 0.01, lambda got, trace: [e[3][1] for e in got] != list(range(200))
     and sorted(e[3][1] for e in got) == list(range(200))),
])
def test_network_faults(fault, value, check):
    spec, result = run(_echo_pairs(), actions=[(0.0, lambda rt: rt.network.set_fault(fault, value))])
    assert check(inputs(spec, "message", node=1), result.trace)


def test_partition_drops_only_blocked_directions():
    def react(node, kind, arg, now):
        if kind == "start" and node.node_id in (0, 1):
            return [Send(dst=1 - node.node_id, message="hi", size_bytes=SMALL)]
    spec, result = run(react, duration_s=0.01)  # without a fault both arrive
    assert len(inputs(spec, "message")) == 2

    def react_later(node, kind, arg, now):
        if kind == "start" and node.node_id in (0, 1):
            return [SetTimer(name="go", delay_s=0.001)]
        if kind == "timer":
            return [Send(dst=1 - node.node_id, message="hi", size_bytes=SMALL)]
    spec, result = run(react_later, duration_s=0.01, actions=[(0.0, lambda rt: rt.network.block([(0, 1)], +1))])
    got = inputs(spec, "message")
    assert [(e[1], e[3][0]) for e in got] == [(0, 1)]  # 1 -> 0 still flows (one-way partition)
    assert [r[5] for r in result.trace.of_kind("drop")] == ["partition"]


def test_delay_spike_delays_messages():
    spec, _ = run(_echo_pairs(), actions=[(0.0, lambda rt: (rt.network.set_fault("spike_s", 0.05),
                                                             rt.network.set_fault("spike_p", 1.0)))])
    assert min(e[0] for e in inputs(spec, "message", node=1)) >= 0.05


def test_nodes_per_host_places_nodes_across_servers():
    """One node per DGX server: consensus messages cross the inter-host fabric, not NVLink."""
    from seedance.sim.network import placement

    topo = resolve_topology("dgx-a100", 5, nodes_per_host=1)
    assert topo.num_hosts == 5 and placement(topo, 5, 1) == [0, 8, 16, 24, 32]
    spread = Network(topo, 5, np.random.default_rng(0), devices=placement(topo, 5, 1))
    packed = Network(load("dgx-a100"), 5, np.random.default_rng(0))
    assert spread.uncontended_s(0, 1, SMALL) > packed.uncontended_s(0, 1, SMALL)
    with pytest.raises(SpecError, match="per host"):
        placement(load("dgx-a100"), 5, 1)
    with pytest.raises(SpecError, match="nodes_per_host"):
        resolve_topology(None, 3, nodes_per_host=2)
