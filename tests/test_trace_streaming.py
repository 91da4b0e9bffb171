"""The trace streams: records spill to disk as they accumulate, the Chrome file is written event by event, and
``--no-trace`` records nothing; ``trace_sha256`` stays the hash of every record's canonical bytes, spilled or not."""

from __future__ import annotations

import hashlib
import json

from seedance.cli import main
from seedance.sim import NemesisConfig, SimConfig, WorkloadConfig, simulate
from seedance import tracing as trace_mod


def _config(**kw) -> SimConfig:
    return SimConfig(protocol="echo", nodes=5, duration_s=0.6, seed=4, check=False,
                     workload=WorkloadConfig(clients=8),
                     nemesis=NemesisConfig(faults=("partition", "duplicate", "crash")), **kw)


def test_spilling_changes_neither_the_records_nor_the_hash_nor_the_chrome_file(tmp_path, monkeypatch):
    whole = simulate(_config())
    original = trace_mod.Trace.__init__

    def small(self, **kw):
        original(self, **{**kw, "spill_records": 500})

    monkeypatch.setattr(trace_mod.Trace, "__init__", small)
    spilled = simulate(_config())
    assert spilled.trace._spilled > len(spilled.trace.records) and len(spilled.trace) == len(whole.trace) > 10_000
    assert len(whole.trace.records) == len(whole.trace)  # below the threshold nothing spills
    assert spilled.trace_sha256 == whole.trace_sha256 == hashlib.sha256(whole.trace.canonical_bytes()).hexdigest()
    assert spilled.trace.canonical_bytes() == whole.trace.canonical_bytes()
    # the records file of a spilled trace (its spill file in chunks, then the rest) is the same bytes
    assert spilled.trace.write_records(tmp_path / "s.msgpack").read_bytes() == whole.trace.canonical_bytes()
    assert not (tmp_path / "s.msgpack.tmp").exists()
    assert spilled.trace.count("send") == whole.trace.count("send") > 0
    a = whole.trace.write_chrome(tmp_path / "a.json")
    b = spilled.trace.write_chrome(tmp_path / "b.json")
    assert a.read_text() == b.read_text()
    doc = json.loads(a.read_text())
    assert doc["displayTimeUnit"] == "ms" and len(doc["traceEvents"]) == len(whole.trace.to_chrome()["traceEvents"])


def test_the_spill_check_leaves_the_run_unchanged(monkeypatch):
    checked = simulate(_config())
    monkeypatch.setattr(trace_mod.Trace, "attach", lambda self, schedule, now: None)
    unchecked = simulate(_config())
    assert checked.trace_sha256 == unchecked.trace_sha256 and checked.ops_ok == unchecked.ops_ok


def test_sim_run_no_trace_writes_no_trace_and_reproduces(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["sim", "run", "--protocol", "echo", "--nodes", "3", "--duration", "0.05", "--seed", "2",
                 "--no-trace", "--out", str(out), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["trace_sha256"] == hashlib.sha256(b"").hexdigest()
    assert "--no-trace" in summary["reproduce"] and summary["ops_ok"] > 0
    assert not (out / "trace.json").exists() and (out / "history.jsonl").exists()


def test_the_spill_check_adapts_to_the_recording_rate():
    """A steady rate is checked often enough that the list stays near ``spill_records``; an idle stretch costs one
    check per ``max_check_s``, not one per millisecond; a burst after it is caught at the next check."""
    import heapq

    trace = trace_mod.Trace(spill_records=1_000)
    queue: list = []
    clock = {"now": 0.0}
    checks: list[float] = []
    held: list[int] = []

    def schedule(at, fn):
        heapq.heappush(queue, (at, len(checks), fn))

    trace.attach(schedule, lambda: clock["now"])
    step = 1e-5  # 100,000 records per second for 1 s, then 60 s idle, then the same rate again
    t = 0.0
    for burst_end in (1.0, 62.0):
        while t < burst_end:
            while queue and queue[0][0] <= t:
                at, _, fn = heapq.heappop(queue)
                clock["now"] = at
                checks.append(at)
                held.append((at, len(trace.records)))
                fn(None)
            trace.records.append((t, "x"))
            t += step
        if burst_end == 1.0:
            t = 61.0
            while queue and queue[0][0] <= t:
                at, _, fn = heapq.heappop(queue)
                clock["now"] = at
                checks.append(at)
                fn(None)
    assert len(trace) == trace._spilled + len(trace.records) > 190_000
    steady = [n for at, n in held if at < 1.0] + [n for at, n in held if at > 61.0 + 2 * trace.max_check_s]
    assert max(steady) <= 2 * trace.spill_records  # a steady rate: at most twice the threshold between checks
    assert max(n for _, n in held) <= 1.01 * trace.max_check_s / step  # a lull's long interval, then a burst
    idle = [at for at in checks if 1.0 < at < 61.0]
    assert 50 <= len(idle) <= 70  # one per max_check_s (1 s) while idle
    assert len(checks) < 1_000  # 2 busy seconds and 60 idle: 62,000 checks at one per millisecond
