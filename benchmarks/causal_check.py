"""How fast the causal checker judges histories (issue E: a 100,000-operation history in at most 10 s).

A generator builds a causally consistent, converging history with its replica events: ``replicas`` replicas of a
last-writer-wins key-value store, ``sessions`` client sessions each bound to a replica (a session moves to another
replica), a write applied at once at its replica and broadcast to the others, delivered after one fixed
delay (so every replica receives writes in the order they were made: causal delivery) and installed when newer than
what the replica holds (last writer wins), reads served by the session's replica. Every write value is unique (a differentiated history). Measured: the time of
:func:`seedance.history.causal.check` (causal bad patterns and convergence) on histories of growing size, the time
to read and validate the largest file, and the verdict on the largest history with one planted anomaly (a session
reads the initial value of a key it wrote: WriteCOInitRead).

Usage: ``python benchmarks/causal_check.py [--out DIR] [--quick]``; writes ``DIR/causal_check.json``.
"""

from __future__ import annotations

import argparse
import heapq
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from seedance.history.causal import check
from seedance.history.events import Event, ReplicaEvent, read_jsonl
from seedance.history.jsonl import write_jsonl
from seedance.provenance import run_metadata

SEED = 20261201


def generate(ops: int, *, replicas: int = 4, sessions: int = 32, keys: int = 512, delay_s: float = 0.002,
             seed: int = SEED) -> list:
    """A causally consistent history of ``ops`` operations (half writes) with its replica events, in time order."""
    rng = np.random.default_rng(seed)
    state = [dict() for _ in range(replicas)]  # key -> value
    home = [s % replicas for s in range(sessions)]
    events: list = []
    pending: list[tuple[float, int, int, str, int]] = []  # (time, order, replica, key, value)
    order = 0
    t = 0.0
    value = 0
    for _ in range(ops):
        t += 1e-5
        while pending and pending[0][0] <= t:
            at, _, r, key, v = heapq.heappop(pending)
            if v > state[r].get(key, 0):  # last writer wins: values grow with the time of the write
                state[r][key] = v
                events.append(ReplicaEvent(node=r, f="apply", key=key, value=v, time=at))
        s = int(rng.integers(sessions))
        r = home[s]
        key = f"k{int(rng.integers(keys))}"
        if rng.random() < 0.5:
            value += 1
            events.append(Event(process=s, type="invoke", f="write", key=key, value=value, time=t))
            state[r][key] = value
            events.append(ReplicaEvent(node=r, f="apply", key=key, value=value, time=t))
            for other in range(replicas):
                if other != r:
                    order += 1
                    heapq.heappush(pending, (t + delay_s, order, other, key, value))
            events.append(Event(process=s, type="ok", f="write", key=key, value=value, time=t))
        else:
            events.append(Event(process=s, type="invoke", f="read", key=key, time=t))
            events.append(Event(process=s, type="ok", f="read", key=key, value=state[r].get(key), time=t))
    while pending:
        at, _, r, key, v = heapq.heappop(pending)
        if v > state[r].get(key, 0):
            state[r][key] = v
            events.append(ReplicaEvent(node=r, f="apply", key=key, value=v, time=at))
    return events


def plant_anomaly(events: list) -> list:
    """Make the last read of a key by a session that wrote that key earlier return the initial value (null): the
    session's own write precedes the read causally (a WriteCOInitRead)."""
    wrote: set[tuple[int, str]] = set()
    target = None
    for i, e in enumerate(events):
        if type(e) is not Event or e.type.value != "ok":
            continue
        if e.f.value == "write":
            wrote.add((e.process, e.key))
        elif (e.process, e.key) in wrote:
            target = i
    out = list(events)
    if target is not None:
        e = out[target]
        out[target] = Event(process=e.process, type="ok", f="read", key=e.key, value=None, time=e.time)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default="out/benchmarks")
    parser.add_argument("--quick", action="store_true", help="Sizes up to 20,000 operations.")
    args = parser.parse_args(argv)
    sizes = [5_000, 20_000] if args.quick else [10_000, 50_000, 100_000]
    rows = []
    for n in sizes:
        events = generate(n)
        start = time.perf_counter()
        verdict = check(events, nodes=4, settle_s=0.01)
        elapsed = time.perf_counter() - start
        rows.append({"ops": verdict["ops"], "events": len(events), "check_s": elapsed, "valid": verdict["valid"],
                     "ops_per_s": verdict["ops"] / elapsed,
                     "convergence_ms_p99": verdict.get("convergence", {}).get("convergence_ms_p99")})
        print(f"{verdict['ops']:>7} ops ({len(events)} events): checked in {elapsed:.2f} s, valid={verdict['valid']}",
              flush=True)
    largest = generate(sizes[-1])
    with tempfile.TemporaryDirectory() as tmp:
        path = write_jsonl(largest, Path(tmp) / "history.jsonl")
        start = time.perf_counter()
        loaded = read_jsonl(path, replicas=True)
        read_s = time.perf_counter() - start
    print(f"reading and validating the {sizes[-1]}-op file: {read_s:.2f} s", flush=True)
    planted = plant_anomaly(largest)
    start = time.perf_counter()
    bad = check(planted, nodes=4, settle_s=0.01)
    planted_s = time.perf_counter() - start
    print(f"planted anomaly: valid={bad['valid']} {sorted(bad['counts'])} in {planted_s:.2f} s", flush=True)
    result = {"rows": rows, "read_validate_s": read_s, "events_read": len(loaded),
              "planted": {"valid": bad["valid"], "counts": bad["counts"], "check_s": planted_s},
              "target": "100,000 operations checked in <= 10 s",
              "metadata": run_metadata(seed=SEED, spec={"sizes": sizes}, argv=sys.argv)}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "causal_check.json").write_text(json.dumps(result, indent=2, default=str) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
