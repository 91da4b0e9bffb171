"""What the seed (the field report the project reproduces) states per paper item, in one place: the numbers the
paper's text sets beside the runs' own (as macros, :mod:`seedance.paper.macros`).

Sources: the seed's §2.5 protocol table (README, "Multi-Paxos and EPaxos"), its §1 impact rows
(:data:`seedance.experiments.scenarios.SEED_ROWS`), its §4.4 memory table over a 72 h run cut into three periods
(:mod:`seedance.monitor.memory`) and its 72 h stress test on 64 ranks (:mod:`seedance.experiments.stress`), its
§2.1 frame budget (one 60 Hz frame).
"""

from __future__ import annotations

from typing import Any

# §2.5: throughput (ops/s) and p99 (ms) per protocol
PROTOCOLS: dict[str, dict[str, float]] = {
    "raft": {"ops_s": 8200.0, "p99_ms": 12.4},
    "multipaxos": {"ops_s": 5900.0, "p99_ms": 18.3},
    "epaxos": {"ops_s": 24600.0, "p99_ms": 7.1},
}
SOAK_HOURS = 72.0  # §4.4 and the stress test
SOAK_PERIODS = 3
STRESS_RANKS = 64
FRAME_HZ = 60.0  # §2.1: a write must reach every replica within one frame


def scenario_rows() -> list[dict[str, Any]]:
    """The seed's §1 rows (scenario, recovery s, global resync, L2 deviation)."""
    from seedance.experiments.scenarios import SEED_ROWS

    return [dict(row) for row in SEED_ROWS]
