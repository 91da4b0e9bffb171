"""Traces: determinism (same seed, same sha256, byte for byte), Chrome Trace Event Format export."""

from __future__ import annotations

import json

import pytest

from seedance.sim import NemesisConfig, SimConfig, WorkloadConfig, simulate

FAULTS = ("partition", "crash", "pause", "loss", "duplicate", "reorder", "delay", "skew", "cpu-hog")


def config(seed, protocol="echo"):
    return SimConfig(protocol=protocol, nodes=3, duration_s=0.3, seed=seed,
                     protocol_config={},
                     workload=WorkloadConfig(clients=3, op_timeout_s=0.05, think_s=0.001),
                     nemesis=NemesisConfig(faults=FAULTS))


def test_same_seed_same_trace_bytes_and_hash():
    a, b = simulate(config(7)), simulate(config(7))
    assert a.trace.canonical_bytes() == b.trace.canonical_bytes()
    assert a.trace_sha256 == b.trace_sha256
    assert [e.to_dict() for e in a.history] == [e.to_dict() for e in b.history]


def test_another_seed_another_hash():
    assert simulate(config(7)).trace_sha256 != simulate(config(8)).trace_sha256


def test_raft_runs_are_deterministic_too():
    pytest.importorskip("seedance.models.protocols.raft")
    a, b = simulate(config(2, "raft")), simulate(config(2, "raft"))
    assert a.trace_sha256 == b.trace_sha256 and a.ops_ok == b.ops_ok


def test_chrome_trace_is_valid_trace_event_format(tmp_path):
    result = simulate(config(1))
    path = result.trace.write_chrome(tmp_path / "trace.json")
    document = json.loads(path.read_text())
    events = document["traceEvents"]
    assert events and document["displayTimeUnit"] == "ms"
    phases = {e["ph"] for e in events}
    assert phases <= {"X", "i", "M"} and {"X", "i", "M"} <= phases
    for event in events:
        assert isinstance(event["pid"], int) and "name" in event and "tid" in event
        if event["ph"] != "M":
            assert isinstance(event["ts"], (int, float)) and 0 <= event["ts"] <= 0.3e6 + 1
        if event["ph"] == "X":
            assert event["dur"] >= 0
    categories = {e.get("cat") for e in events}
    assert {"net", "storage", "client", "nemesis"} <= categories


def test_disabled_trace_records_nothing_but_runs_the_same():
    base = config(3)
    quiet = SimConfig(**{**base.__dict__, "trace": False})
    a, b = simulate(base), simulate(quiet)
    assert len(b.trace) == 0 and a.ops_ok == b.ops_ok and a.stats["messages_sent"] == b.stats["messages_sent"]


def test_fast_forward_is_only_an_optimisation(monkeypatch):
    """Handling queued inputs without a wake-up event must not change a single trace byte."""
    from seedance.sim.runtime import Runtime

    pytest.importorskip("seedance.models.protocols.raft")
    busy = SimConfig(protocol="raft", nodes=5, duration_s=0.3, seed=3, workload=WorkloadConfig(clients=16))
    fast = simulate(busy)
    monkeypatch.setattr(Runtime, "fast_forward", False)
    slow = simulate(busy)
    assert fast.ops_ok > 100 and fast.trace_sha256 == slow.trace_sha256
    assert next(fast.runtime.env._eid) < next(slow.runtime.env._eid)  # it did skip wake-up events


def test_the_runtimes_inline_paths_are_only_an_optimisation(monkeypatch):
    """Host.send books a plain send itself, and a delivery or client request to an idle (or busy) node skips
    Runtime._arrive: with the general paths they short-cut (Runtime._send, Runtime._arrive) instead, not a single
    trace byte changes."""
    from seedance.sim.host import Host
    from seedance.sim.runtime import CLIENT, MESSAGE, Runtime

    pytest.importorskip("seedance.models.protocols.raft")
    busy = SimConfig(protocol="raft", nodes=5, duration_s=0.3, seed=3, workload=WorkloadConfig(clients=16))
    fast = simulate(busy)

    def send(self, effect, cursor):
        self.runtime._send(self.node_id, effect.dst, effect.message, effect.size_bytes, cursor)

    def delivered(self, event):
        dst, src, message = event.args
        host = self.hosts[dst]
        if not host.up:
            self.messages_dropped += 1
            self._record((self.env._now, "drop", dst, type(message).__name__, src, "crashed"))
            return
        self.messages_delivered += 1
        self._record((self.env._now, "deliver", dst, type(message).__name__, src))
        self._arrive(host, MESSAGE, (src, message))

    def client_request(self, dst, request):
        host = self.hosts[dst]
        if host.up:
            self._arrive(host, CLIENT, request)
        return host.up

    monkeypatch.setattr(Host, "send", send)
    monkeypatch.setattr(Runtime, "_on_delivered", delivered)
    monkeypatch.setattr(Runtime, "client_request", client_request)
    slow = simulate(busy)
    assert fast.ops_ok > 100 and fast.stats["messages_delivered"] > 1000
    assert fast.trace_sha256 == slow.trace_sha256 and fast.ops_ok == slow.ops_ok


def test_chrome_duration_events_never_overlap_on_a_thread():
    """Viewers drop X events that overlap on one thread; flights in flight together get separate lanes."""
    result = simulate(SimConfig(protocol="echo", nodes=3, duration_s=0.05, seed=1,
                                protocol_config={"pings": 4}, workload=WorkloadConfig(clients=3)))
    events = [e for e in result.trace.to_chrome()["traceEvents"] if e["ph"] == "X"]
    by_thread: dict = {}
    for event in events:
        by_thread.setdefault((event["pid"], event["tid"]), []).append(event)
    assert len({e["tid"] for e in events if e["cat"] == "net"}) > 1
    for spans in by_thread.values():
        spans.sort(key=lambda e: e["ts"])
        for a, b in zip(spans, spans[1:]):
            assert a["ts"] + a["dur"] <= b["ts"] + 1e-6


def test_lanes_place_as_the_first_free_lane_scan_in_any_arrival_order():
    """The heap that keeps a (pid, category)'s free lanes gives each span the lane the plain scan gives (the first
    whose last span ended by its start), in start order and out of it."""
    import random

    from seedance.tracing import _Lanes

    rng = random.Random(7)
    for trial in range(40):
        spans, ts = [], 0.0
        for _ in range(300):
            ts = ts + rng.choice([0.0, 0.5, 1.0, 3.0]) if trial % 2 or rng.random() < 0.9 else rng.uniform(0, ts)
            spans.append({"pid": rng.randrange(2), "cat": "net", "ts": ts, "dur": rng.choice([0.0, 1.0, 5.0, 40.0]), "ph": "X"})
        lanes, reference = _Lanes(), {}
        for span in spans:
            ends = reference.setdefault((span["pid"], span["cat"]), [])
            want = next((k for k, end in enumerate(ends) if end <= span["ts"]), len(ends))
            new = want == len(ends)
            if new:
                ends.append(0.0)
            ends[want] = span["ts"] + span["dur"]
            placed = list(lanes.place(dict(span)))
            assert placed[-1]["tid"] == 100 + 1000 * want
            assert [e["ph"] for e in placed] == (["M", "X"] if new else ["X"])
