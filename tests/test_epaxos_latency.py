"""EPaxos's commit/execution latency samples (seedance/models/protocols/epaxos/latency.py): the latest
``capacity`` pairs, oldest first, in 16 bytes a sample (a deque of tuples had held about 110 and had grown a
5-replica run's peak RSS by about 2 MB per simulated second until it was full)."""

from __future__ import annotations

import sys

import pytest

from scripted_driver import Driver
from seedance.models.protocols.epaxos import SPEC
from seedance.models.protocols.epaxos.latency import LatencySamples
from seedance.models.protocols.epaxos.node import LATENCY_SAMPLES


def test_the_ring_keeps_the_latest_samples_oldest_first():
    ring = LatencySamples(4)
    assert len(ring) == 0 and list(ring) == []
    for k in range(3):
        ring.add(k, 10 * k)
    assert len(ring) == 3 and list(ring) == [(0, 0), (1, 10), (2, 20)]
    for k in range(3, 11):
        ring.add(k, 10 * k)
        assert len(ring) == 4 and list(ring) == [(j, 10 * j) for j in range(k - 3, k + 1)]
    with pytest.raises(ValueError, match="capacity"):
        LatencySamples(0)


def test_a_full_ring_holds_16_bytes_a_sample():
    ring = LatencySamples(1 << 12)
    for k in range(3 << 12):
        ring.add(0.001 * k, 0.002)
    held = sys.getsizeof(ring._commit) + sys.getsizeof(ring._execute)
    assert len(ring) == 1 << 12 and held <= 16 * (1 << 12) * 1.15, held


def test_a_leader_keeps_one_sample_per_own_command_executed():
    d = Driver(SPEC, 3).start()
    for c in range(6):
        d.request(c % 3, "write", f"k{c % 2}", c, client_id=100 + c, request_id=1)
        d.deliver_all()
    assert [len(d.nodes[q].latencies) for q in range(3)] == [2, 2, 2]
    assert all(commit >= 0 and execute >= 0 for q in range(3) for commit, execute in d.nodes[q].latencies)
    assert d.nodes[0].latencies.capacity == LATENCY_SAMPLES
