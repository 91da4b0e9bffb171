"""Flow-level bulk traffic (seedance.sim.flows): max-min fair sharing of links, one event per phase."""

import numpy as np
import pytest
import simpy

from seedance.sim.collectives import Collectives
from seedance.sim.flows import SLICE_BYTES, FlowModel, max_min_rates
from seedance.sim.network import Network, uniform_topology

GB = 1e9


def fabric(devices=3):
    env = simpy.Environment()
    network = Network(uniform_topology(devices), devices, np.random.default_rng(0))
    return env, network, FlowModel(env, network)


def test_two_flows_on_one_link_each_get_half_and_a_finished_flow_frees_its_share():
    env, _network, flows = fabric()
    ends = {}
    # 0 -> 2 and 1 -> 2 share the switch's 25 GB/s link into device 2
    a = flows.start(*flows.path_links(0, 2), 1.0 * GB, on_done=lambda t: ends.setdefault("a", t))
    b = flows.start(*flows.path_links(1, 2), 0.5 * GB, on_done=lambda t: ends.setdefault("b", t))
    assert a.rate_Bps == pytest.approx(12.5 * GB) and b.rate_Bps == pytest.approx(12.5 * GB)
    env.run()
    assert ends["b"] == pytest.approx(0.5 / 12.5)  # at half the link
    # a moved 0.5 GB by then and the rest alone at the full 25 GB/s
    assert ends["a"] == pytest.approx(0.5 / 12.5 + 0.5 / 25)
    assert flows.active == [] and not flows.load.any()


def test_flows_on_disjoint_links_do_not_slow_each_other_and_a_cap_holds():
    env, _network, flows = fabric(4)
    ends = {}
    flows.start(*flows.path_links(0, 1), 1.0 * GB, on_done=lambda t: ends.setdefault("x", t))
    flows.start(*flows.path_links(2, 3), 1.0 * GB, cap_Bps=10 * GB, latency_s=1e-3,
                on_done=lambda t: ends.setdefault("y", t))
    env.run()
    assert ends["x"] == pytest.approx(1 / 25)
    assert ends["y"] == pytest.approx(1 / 10 + 1e-3)  # its demand cap, then the latency term


def test_a_capped_flow_leaves_its_unused_share_to_the_other():
    capacity = np.array([10.0])
    env, _network, flows = fabric()
    one, two = (flows.start(np.array([0]), np.array([1]), 1.0, cap_Bps=cap, on_done=lambda t: None)
                for cap in (2.0, np.inf))
    assert list(max_min_rates(capacity, [one, two])) == pytest.approx([2.0, 8.0])


def test_a_cancelled_flow_frees_bandwidth_at_once():
    env, _network, flows = fabric()
    ends = {}
    a = flows.start(*flows.path_links(0, 2), 1.0 * GB, on_done=lambda t: ends.setdefault("a", t))
    b = flows.start(*flows.path_links(1, 2), 1.0 * GB, on_done=lambda t: ends.setdefault("b", t))
    env.run(until=0.02)  # each moved 0.25 GB
    flows.cancel(b)
    env.run()
    assert "b" not in ends and ends["a"] == pytest.approx(0.02 + 0.75 / 25)
    assert a.done


def test_messages_get_a_fair_share_and_wait_behind_a_slice_while_flows_run():
    env, network, flows = fabric()
    idle = network.uncontended_s(0, 2, 1000)
    phase = flows.start(*flows.path_links(1, 2), 1.0 * GB, on_done=lambda t: None)
    busy = network.uncontended_s(0, 2, 1000)
    assert busy == pytest.approx(idle + 1000 / 25e9 + SLICE_BYTES / 25e9)
    flows.cancel(phase)
    assert network.uncontended_s(0, 2, 1000) == pytest.approx(idle)


class _Runtime:
    def __init__(self, env, network):
        self.env, self.network, self.hosts, self._tracing = env, network, [], False


def test_a_ring_collective_is_one_phase_with_the_cost_models_time_alone_and_slower_when_shared():
    env, network, _ = fabric(8)
    collectives = Collectives(_Runtime(env, network))
    devices = tuple(range(8))
    collectives.background("allreduce", 1 << 30, devices, 0.0)
    env.run()
    alone = collectives.background_times["allreduce:1073741824"][0]
    ring = 2 * 7 / 8 * (1 << 30) / 25e9
    assert alone >= ring and collectives.flows.phases_started == 1
    start = env.now
    collectives.background("allreduce", 1 << 30, devices, start)
    collectives.background("allreduce", 1 << 30, devices, start)
    env.run()
    shared = collectives.background_times["allreduce:1073741824"][1:]
    assert shared[0] == pytest.approx(shared[1])
    assert shared[0] == pytest.approx(alone + ring, rel=0.05)  # the link-bound part takes twice as long
