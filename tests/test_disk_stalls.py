"""The shared disk's stalls (issue V): found in a profile's fsync records across nodes, drawn as one process of the
device in the simulator (every node's fsyncs held together), and kept in a profile."""

from __future__ import annotations

import numpy as np
import pytest

from _host_helpers import run_on, small_host

from seedance.errors import SpecError
from seedance.models.host import DiskStallProcess, DiskStallProfile, HostProfile, LogNormal, load_profile
from seedance.real.profile_fit import STALL_FACTOR, split_stalls
from seedance.files import atomic_write

MS = 1_000_000  # ns


def _sync(wall_ms: float, end_ms: float, grow: bool = False) -> tuple[int, ...]:
    """One fsync record as the real runtime writes it: (group, hand-back, wall, CPU, grow, submit, end) in ns."""
    return (1, 50_000, int(wall_ms * MS), 20_000, int(grow), 30_000, int(end_ms * MS))


def test_overlapping_slow_fsyncs_of_the_nodes_are_one_stall_of_the_device():
    syncs = [_sync(0.3 + 0.01 * (i % 7), 1.0 * i) for i in range(1, 3000)]  # the body: ~0.33 ms
    syncs += [_sync(0.5, 1.0 * i + 0.5, grow=True) for i in range(1, 300)]  # allocating: ~0.5 ms
    held = [_sync(65.0, 1000.0), _sync(63.0, 1001.0), _sync(66.0, 1002.5, grow=True),  # three nodes at once
            _sync(39.0, 2000.0)]  # one node, alone
    syncs += held
    stalled, stalls, record = split_stalls(syncs, seconds=3.0)
    assert stalled == set(range(len(syncs) - 4, len(syncs)))
    assert record["events"] == 2 and record["fsyncs_held"] == 4 and record["factor"] == STALL_FACTOR
    # the union of the overlapping three: from the earliest start (1000 - 65) to the latest end (1002.5)
    assert stalls.durations_s == pytest.approx((0.0675, 0.039))
    assert stalls.rate_per_s == pytest.approx(2 / 3.0)
    # an allocating fsync is judged against its own kind's median: 9 ms is slow for neither at 20x
    assert split_stalls(syncs[:-4] + [_sync(9.0, 5000.0, grow=True)], 3.0)[1] is None
    # records without the clock (an older runtime): no stalls split off, nothing left out
    assert split_stalls([s[:6] for s in syncs], 3.0) == (set(), None, {"events": None})


def test_a_stall_holds_an_fsync_for_its_overlap_and_is_a_pure_function_of_its_seed():
    stalls = DiskStallProfile(2.0, (0.05, 0.08))
    a = DiskStallProcess(stalls, np.random.default_rng(3))
    assert not a._windows  # drawn as far as asked only
    assert a.hold(0.0, 1e-4) >= 1e-4
    begin, end = a._windows[0]
    # an fsync running across the first stall's start is held for all of it; one inside it for the rest
    assert a.hold(begin - 1e-4, begin + 2e-4) == pytest.approx(end + 2e-4)
    assert a.hold(begin + 0.01, begin + 0.0103) == pytest.approx(end + 3e-4)
    assert a.hold(end + 1e-6, end + 2e-6) == end + 2e-6  # after it, before the next (seed 3): untouched
    b = DiskStallProcess(stalls, np.random.default_rng(3))
    assert [b.hold(t, t + 3e-4) for t in np.arange(0, 5, 0.01)] == [a.hold(t, t + 3e-4) for t in np.arange(0, 5, 0.01)]
    assert DiskStallProcess(DiskStallProfile(0.0, ()), np.random.default_rng(1)).hold(1.0, 1.5) == 1.5


def _longest(result, after_s: float = 0.5) -> float:
    """The longest operation invoked after ``after_s`` (the election and the connections before it)."""
    invoked, longest = {}, 0.0
    for event in result.history:
        kind = getattr(event.type, "value", event.type)
        if kind == "invoke":
            invoked[event.process] = event.time
        elif kind == "ok" and invoked[event.process] > after_s:
            longest = max(longest, event.time - invoked[event.process])
    return longest


def test_the_simulator_holds_every_nodes_fsyncs_in_a_stall():
    plain = run_on(small_host())
    stalled = small_host(disk_stalls=DiskStallProfile(2.0, (0.06,)))  # ~4 stalls of 60 ms in 2 s: ~12 % of the time
    a, b = run_on(stalled), run_on(stalled)
    assert (a.throughput_ops_s, a.latency_ms_p99) == (b.throughput_ops_s, b.latency_ms_p99)
    assert a.throughput_ops_s < 0.95 * plain.throughput_ops_s
    # the operations waiting through a stall: one per client each time (closed loop), too few to move the p99
    assert _longest(a) > 0.05 > 0.01 > _longest(plain)
    # with fsync off the writes reach the page cache only: the device's stalls do not hold them
    from seedance.sim.config import StorageConfig

    runs = [run_on(h, storage=StorageConfig(fsync=False))
            for h in (small_host(write=LogNormal(1.5e-5)),
                      small_host(write=LogNormal(1.5e-5), disk_stalls=DiskStallProfile(2.0, (0.06,))))]
    assert runs[0].throughput_ops_s == runs[1].throughput_ops_s


def test_a_profile_keeps_its_stalls_and_rejects_bad_ones(tmp_path):
    host = small_host(disk_stalls=DiskStallProfile(0.33, (0.039, 0.0685)))
    path = tmp_path / "host.yaml"
    atomic_write(path, host.to_yaml().encode())
    assert load_profile(path) == host
    assert host.scaled_cpu(1.3).disk_stalls == host.disk_stalls  # a device's event, not CPU
    data = host.to_dict()
    for bad, field in (({"rate_per_s": -1, "durations_s": [0.05]}, "rate_per_s"),
                       ({"rate_per_s": 1.0, "durations_s": []}, "durations_s"),
                       ({"rate_per_s": 1.0, "durations_s": "50ms"}, "durations_s"),
                       ({"rate_per_s": 1.0}, "rate_per_s, durations_s")):
        with pytest.raises(SpecError, match=field):
            HostProfile.from_dict({**data, "disk_stalls": bad})
