"""A scripted protocol for simulator tests: every input is logged, a test function decides the effects.

``probe_spec(react)`` builds a ProtocolSpec whose nodes call ``react(node, kind, arg, now) -> effects`` for every
input (kind: start, recover, message, timer, client, collective, persisted, work) and append ``(now, node_id, kind, arg)`` to
``spec.default_config["log"]``. ``node.state`` is a per-incarnation dict the script may use.
"""

from __future__ import annotations

from typing import Any, Callable

from seedance.models.protocols.contract import ProtocolSpec


class ProbeNode:
    def __init__(self, node_id: int, num_nodes: int, rng: Any, config: Any) -> None:
        self.node_id = node_id
        self.num_nodes = num_nodes
        self.rng = rng
        self.log = config["log"]
        self.react = config["react"]
        self.state: dict[str, Any] = {}

    def _on(self, kind: str, arg: Any, now: float) -> list[Any]:
        self.log.append((now, self.node_id, kind, arg))
        return list(self.react(self, kind, arg, now) or [])

    def on_start(self, now):
        return self._on("start", None, now)

    def on_recover(self, durable, now):
        return self._on("recover", durable, now)

    def on_message(self, src, message, now):
        return self._on("message", (src, message), now)

    def on_timer(self, name, now):
        return self._on("timer", name, now)

    def on_client_request(self, request, now):
        return self._on("client", request, now)

    def on_collective_done(self, done, now):
        return self._on("collective", done, now)

    def on_persisted(self, token, now):
        return self._on("persisted", token, now)

    def on_work_done(self, done, now):
        return self._on("work", done, now)


def probe_spec(react: Callable[..., Any]) -> ProtocolSpec:
    log: list[tuple[float, int, str, Any]] = []
    return ProtocolSpec(name="probe", factory=ProbeNode, message_types=(), default_config={"log": log, "react": react})


def inputs(spec: ProtocolSpec, kind: str, node: int | None = None) -> list[tuple[float, int, str, Any]]:
    return [e for e in spec.default_config["log"] if e[2] == kind and (node is None or e[1] == node)]
