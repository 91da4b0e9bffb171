"""Records of a run and the checkers that judge them, below both runtimes.

* :mod:`seedance.history.events` — the record types (client ``Event``, ``ReplicaEvent``), their JSON Lines format,
  readers and the summary of a history (throughput, latency percentiles); :mod:`seedance.history.jsonl` writes them.
* :mod:`seedance.history.linearizability` — the linearizability checker (Wing & Gong search with Lowe's caching).
* :mod:`seedance.history.causal` — the causal-consistency checker (``check`` runs it and, with replica events,
  :mod:`seedance.history.convergence`, the convergence checker); :mod:`seedance.history.anomalies` holds what the
  two share (operations paired from events, the anomaly report, order and cycle helpers).
* :mod:`seedance.history.summary` — a protocol's own summary keys, computed from its history.

Both runtimes write these records and call these checkers; neither imports the other, and nothing here imports
either of them.
"""
