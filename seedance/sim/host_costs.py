"""A measured host's costs outside a node's own inputs, in the simulator: the client process's CPU, connection
set-up, the loopback latency, when a core is free, and the CPU a node owes for its sends' entries. Methods of
:class:`~seedance.sim.runtime.Runtime` (the path a host profile takes; without one each is a constant)."""

from __future__ import annotations

from typing import Any


class HostCosts:
    """The modelled host's draws (a mixin of the runtime: it uses its clock, host model, cores and host RNG)."""

    __slots__ = ()
    host: Any
    cores: Any
    env: Any
    _host_rng: Any
    _client_busy: float
    _connected: set[tuple[int, int]]
    _accept_free: dict[int, float]

    def client_cpu(self, now: float) -> float:
        """On a modelled host: the client process (one thread) spends its per-operation CPU on a shared core; when
        it is done. Without a host profile clients cost nothing."""
        if self.host is None:
            return now
        woke = now >= self._client_busy  # the reply found the client process idle: a wake-up (amortisation)
        start = now if now > self._client_busy else self._client_busy
        self._client_busy = self.cores.take(start, self.host.client_cost(self._host_rng, woke))
        return self._client_busy

    def connect_latency(self, client: int, node: int, depart: float) -> float:
        """On a modelled host that measured it: a client's first request to a node opens the connection first (TCP,
        the authenticated handshake, the client frame): a draw of its set-up time and, where measured, the node's
        serial part of it (accepting, the handshake) queued behind the other set-ups at that node; else 0."""
        host = self.host
        if host is None or host.connect is None or (client, node) in self._connected:
            return 0.0
        self._connected.add((client, node))
        ready = depart + host.connect.draw(self._host_rng)
        if host.accept is not None:
            ready = max(ready, self._accept_free.get(node, 0.0)) + host.accept.draw(self._host_rng)
            self._accept_free[node] = ready
        return ready - depart

    def extra_latency(self) -> float:
        """On a modelled host: one draw of its process-to-process (loopback) latency; else 0."""
        if self.host is None:
            return 0.0
        latency = self.host.loopback.draw(self._host_rng)  # a spell slows the kernel's path between processes too
        return latency * self.cores.spell.factor(self.env._now) if self.cores.spell is not None else latency

    def _ready_at(self, host: Any) -> float:
        """When this node can handle its next input: its own CPU free and, on a modelled host, a core free."""
        at = host.busy_until
        if self.cores is not None:
            core = self.cores.earliest()
            if core > at:
                at = core
        return at

    @staticmethod
    def _owe(host: Any, cost: float) -> float:
        """An item's CPU with what the node owes for its sends' entries; the per-entry costs are centred on the
        profile run's mean entries per message, so a share can be negative: never below zero, the rest carried."""
        total = cost + host.owed
        host.owed = min(total, 0.0)
        return max(total, 0.0)
