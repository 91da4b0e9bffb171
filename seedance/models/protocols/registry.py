"""Protocols a runtime can build, by name. Each protocol module registers its :class:`ProtocolSpec` here."""

from __future__ import annotations

import importlib
from typing import Any

from seedance.errors import SpecError
from seedance.models.protocols.contract import ProtocolSpec

# name -> module that defines SPEC; imported lazily so a protocol's import cost is paid only when used.
_MODULES: dict[str, str] = {
    "causal": "seedance.models.protocols.causal",
    "echo": "seedance.models.protocols.echo",
    "raft": "seedance.models.protocols.raft",
    "commit": "seedance.models.protocols.commit",
    "multipaxos": "seedance.models.protocols.multipaxos",
    "epaxos": "seedance.models.protocols.epaxos",
}


def register(name: str, module: str) -> None:
    _MODULES[name] = module


def names() -> list[str]:
    return sorted(_MODULES)


def get(name: str) -> ProtocolSpec:
    """The :class:`ProtocolSpec` named ``name``; :class:`SpecError` listing the valid names otherwise."""
    if name not in _MODULES:
        raise SpecError("protocol", f"unknown protocol {name!r}", f"valid: {', '.join(names()) or '(none yet)'}")
    spec = importlib.import_module(_MODULES[name]).SPEC
    assert isinstance(spec, ProtocolSpec)
    return spec


def check_protocol_config(protocol: str, config: dict[str, Any], nodes: int) -> None:
    """Reject an unknown or bad protocol option (``--set``) before any work: build one node with it (a node's
    constructor validates its configuration, e.g. RaftConfig)."""
    import numpy as np

    spec = get(protocol) if isinstance(protocol, str) and ":" not in protocol else None
    if spec is None:
        return
    defaults = dict(spec.default_config or {})
    unknown = sorted(set(config) - set(defaults)) if defaults else []
    if unknown:
        raise SpecError(f"--set {unknown[0]}", "unknown option", f"valid for {protocol}: {', '.join(defaults)}")
    spec.factory(0, max(1, nodes), np.random.default_rng(0), {**defaults, **config})
