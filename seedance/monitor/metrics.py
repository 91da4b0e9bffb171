"""Live view of a validate-and-commit run: the ranks' files tailed as they grow, and an optional Prometheus endpoint.

:class:`RunTail` reads what each rank appends (``node-<r>/state/observations.jsonl``: votes, commits, rollbacks,
...; ``node-<r>/memory-<incarnation>.jsonl``: the monitor's samples) from where it stopped last time, complete lines
only, and feeds :class:`LiveState`: per rank the step, commits, rollbacks, alarms, the last step time (from two
commits of one epoch: seconds per step), the last commit latency (vote to durable commit), the latest memory
sample; per run the replica divergence (largest L2 distance between two ranks' parameters at the latest step every
rank of the view voted on, and the largest so far).

:class:`MetricsServer` exports that state with ``prometheus-client`` on ``127.0.0.1:<port>`` (its own registry, not
the process-global one; off unless a port is given). Metric names (all prefixed ``seedance_``):
``step`` / ``step_seconds`` / ``commit_latency_seconds`` (gauges per rank; the latency also as a histogram),
``commits_total`` / ``rollbacks_total`` / ``alarms_total`` (counters per rank), ``replica_divergence_l2`` /
``replica_divergence_l2_max``, ``memory_rss_bytes`` / ``cuda_allocated_bytes`` / ``live_handles`` / ``open_fds`` /
``threads`` (gauges per rank), ``elapsed_seconds``.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np


class _File:
    """One growing file, read from its last complete line on."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0

    def lines(self) -> Iterator[dict[str, Any]]:
        try:
            with open(self.path, "rb") as fh:
                fh.seek(self.offset)
                data = fh.read()
        except OSError:
            return
        end = data.rfind(b"\n")
        if end < 0:
            return
        self.offset += end + 1
        for line in data[: end + 1].splitlines():
            try:
                yield json.loads(line)
            except (json.JSONDecodeError, UnicodeDecodeError):
                continue


class LiveState:
    """What the run looks like now (see the module docstring)."""

    def __init__(self, world: int) -> None:
        self.world = world
        self.ranks = {r: {"step": 0, "epoch": 0, "commits": 0, "rollbacks": 0, "alarms": 0, "step_seconds": None,
                          "commit_latency_s": None, "memory": None} for r in range(world)}
        self.latencies: list[float] = []  # new commit latencies since the last export
        self.divergence = 0.0
        self.divergence_max = 0.0
        self.elapsed_s = 0.0
        self._votes: dict[tuple[int, int], dict[int, Any]] = {}
        self._vote_time: dict[tuple[int, int, int], float] = {}
        self._last_commit: dict[int, tuple[int, int, float]] = {}

    def feed(self, rank: int, record: dict[str, Any]) -> None:
        key, value, t = record.get("key"), record.get("value"), float(record.get("time", 0.0))
        if not isinstance(value, dict):
            return
        state = self.ranks[rank]
        if key == "vote":
            e, s = int(value["epoch"]), int(value["step"])
            self._vote_time[(rank, e, s)] = t
            state["step"], state["epoch"] = s, e
            if value.get("params") is not None:
                votes = self._votes.setdefault((e, s), {})
                votes[rank] = (np.asarray(value["params"], dtype=np.float64), len(value.get("view") or ()))
                if len(votes) >= max(n for _, n in votes.values()):
                    vectors = [v for v, _ in votes.values()]
                    l2 = max((float(np.linalg.norm(a - b)) for a, b in itertools.combinations(vectors, 2)
                              if a.shape == b.shape), default=0.0)
                    self.divergence = l2
                    self.divergence_max = max(self.divergence_max, l2)
                    del self._votes[(e, s)]
                if len(self._votes) > 64:  # votes of rounds that never completed (a rank left): forget the oldest
                    for old in sorted(self._votes)[: len(self._votes) - 64]:
                        del self._votes[old]
        elif key == "commit":
            e, s = int(value["epoch"]), int(value["step"])
            state["commits"] += 1
            voted = self._vote_time.pop((rank, e, s), None)
            if voted is not None:
                state["commit_latency_s"] = t - voted
                self.latencies.append(t - voted)
            last = self._last_commit.get(rank)
            if last is not None and last[0] == e and s > last[1]:
                state["step_seconds"] = (t - last[2]) / (s - last[1])
            self._last_commit[rank] = (e, s, t)
            if len(self._vote_time) > 256:
                self._vote_time.clear()
        elif key == "rollback":
            state["rollbacks"] += 1
        elif key == "alarm":
            state["alarms"] += 1

    def sample(self, rank: int, record: dict[str, Any]) -> None:
        self.ranks[rank]["memory"] = record


class RunTail:
    """Tails every rank's observations and memory samples under ``run_dir`` into a :class:`LiveState`."""

    def __init__(self, run_dir: Path, world: int) -> None:
        self.run_dir = Path(run_dir)
        self.state = LiveState(world)
        self._obs = {r: _File(self.run_dir / f"node-{r}" / "state" / "observations.jsonl") for r in range(world)}
        self._mem: dict[Path, _File] = {}

    def poll(self, elapsed_s: float | None = None) -> LiveState:
        for rank, tail in self._obs.items():
            for record in tail.lines():
                self.state.feed(rank, record)
        for rank in self._obs:
            for path in sorted((self.run_dir / f"node-{rank}").glob("memory-*.jsonl")):
                tail = self._mem.setdefault(path, _File(path))
                for record in tail.lines():
                    self.state.sample(rank, record)
        if elapsed_s is not None:
            self.state.elapsed_s = elapsed_s
        return self.state


class MetricsServer:
    """The Prometheus endpoint on ``host:port`` (loopback by default); :meth:`export` copies a :class:`LiveState`
    into the metrics; :meth:`close` stops the server."""

    def __init__(self, port: int, host: str = "127.0.0.1") -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

        self.registry = registry = CollectorRegistry()
        rank = ["rank"]
        self.gauges = {
            "step": Gauge("seedance_step", "Latest step a rank voted on", rank, registry=registry),
            "step_seconds": Gauge("seedance_step_seconds", "Seconds per training step (between two commits)", rank,
                                  registry=registry),
            "commit_latency_s": Gauge("seedance_commit_latency_seconds", "Last vote-to-durable-commit time", rank,
                                      registry=registry),
            "rss": Gauge("seedance_memory_rss_bytes", "Resident set size", rank, registry=registry),
            "cuda": Gauge("seedance_cuda_allocated_bytes", "torch.cuda.memory_allocated", rank, registry=registry),
            "handles": Gauge("seedance_live_handles", "Live device-buffer handles", rank, registry=registry),
            "fds": Gauge("seedance_open_fds", "Open file descriptors", rank, registry=registry),
            "threads": Gauge("seedance_threads", "OS threads", rank, registry=registry),
        }
        self.counters = {k: Counter(f"seedance_{k}", f"{k.capitalize()} per rank", rank, registry=registry)
                         for k in ("commits", "rollbacks", "alarms")}
        self.latency = Histogram("seedance_commit_latency_hist_seconds", "Vote-to-durable-commit time",
                                 buckets=(0.001, 0.003, 0.01, 0.03, 0.1, 0.3, 1.0, 3.0, 10.0), registry=registry)
        self.divergence = Gauge("seedance_replica_divergence_l2", "L2 between replicas at the latest full vote",
                                registry=registry)
        self.divergence_max = Gauge("seedance_replica_divergence_l2_max", "Largest replica L2 so far",
                                    registry=registry)
        self.elapsed = Gauge("seedance_elapsed_seconds", "Seconds since the run started", registry=registry)
        self._counted: dict[tuple[str, int], int] = {}
        self.server, self.thread = start_http_server(port, addr=host, registry=registry)
        self.port = self.server.server_port
        self.host = host

    def export(self, state: LiveState) -> None:
        for r, values in state.ranks.items():
            label = str(r)
            for key in ("step", "step_seconds", "commit_latency_s"):
                if values[key] is not None:
                    self.gauges[key].labels(label).set(values[key])
            memory = values["memory"] or {}
            for key in ("rss", "cuda", "handles", "fds", "threads"):
                if memory.get(key) is not None:
                    self.gauges[key].labels(label).set(memory[key])
            for key, counter in self.counters.items():
                seen = self._counted.get((key, r), 0)
                if values[key] > seen:
                    counter.labels(label).inc(values[key] - seen)
                    self._counted[(key, r)] = values[key]
        for latency in state.latencies:
            self.latency.observe(latency)
        state.latencies.clear()
        self.divergence.set(state.divergence)
        self.divergence_max.set(state.divergence_max)
        self.elapsed.set(state.elapsed_s)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)
