"""The validate-and-commit protocol's options (``--set KEY=VALUE``), validated when a node is made."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from seedance.errors import SpecError
from seedance.models.protocols.commit import scenarios


@dataclass(frozen=True, kw_only=True)
class CommitConfig:
    dim: int = 64  # parameters of the model (real arrays)
    batch: int = 32
    lr: float = 0.05
    lr_decay: float = 0.5  # the learning rate is multiplied by this at every epoch boundary
    epoch_steps: int = 15  # steps per data epoch (learning-rate boundary)
    steps: int = 60
    commit_every: int = 10
    seed: int = 0  # data, initial parameters and the scenario's injection
    scenario: str = ""
    variant: str = "fixed"
    heartbeat_s: float = 0.05
    phi_threshold: float = 8.0
    phi_min_std_s: float = 0.1
    phi_acceptable_pause_s: float = 0.5
    phi_max_samples: int = 1000
    heartbeat_fanout: int = 0  # 0: heartbeat every peer; k > 0: the k ring successors, verdicts told to all
    collective_timeout_s: float = 3.0
    step_flops: float = 1.5e9  # what one training step of the modelled model costs (simulator)
    grad_bytes: int = 4_000_000  # what its gradient allreduce moves (simulator)
    observe_params: bool = True  # votes report the parameters too (replica L2 distances); off for large models
    # long runs (`seedance real test-consensus` / `soak`): train until the runtime's clock reads deadline_s (one
    # clock for every rank and incarnation: the real backend's is the machine's monotonic clock, the simulator's its
    # virtual time; 0: train for `steps`); the ranks stop together at the first commit whose vote carries a rank's
    # "time is up" flag. The scenario's injection repeats every inject_period steps (0: once); the learning rate
    # cycles through lr_cycle epochs (0: decays for ever), so a long run keeps training and an injection keeps biting.
    deadline_s: float = 0.0
    inject_period: int = 0
    lr_cycle: int = 0

    @classmethod
    def from_mapping(cls, config: Mapping[str, Any]) -> CommitConfig:
        known = {f.name: f for f in fields(cls)}
        values = {}
        for key, value in config.items():
            if key not in known:
                raise SpecError(f"--set {key}", "unknown commit option", f"valid: {', '.join(sorted(known))}")
            values[key] = value
        out = cls(**values)
        out.validate()
        return out

    def validate(self) -> None:
        ints = {"dim": 2, "batch": 1, "epoch_steps": 1, "steps": 1, "commit_every": 1, "seed": 0,
                "phi_max_samples": 1, "grad_bytes": 0, "inject_period": 0, "lr_cycle": 0, "heartbeat_fanout": 0}
        for name, lo in ints.items():
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < lo:
                raise SpecError(f"--set {name}", f"must be an integer >= {lo}, got {value!r}")
        positive = ("lr", "heartbeat_s", "phi_threshold", "phi_min_std_s", "collective_timeout_s")
        for name in (*positive, "lr_decay", "phi_acceptable_pause_s", "step_flops", "deadline_s"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
                    or value < 0 or (value == 0 and name in positive):
                raise SpecError(f"--set {name}", f"must be a finite number {'> 0' if name in positive else '>= 0'}, "
                                f"got {value!r}")
        if self.dim > 1_000_000:
            raise SpecError("--set dim", f"{self.dim} parameters is more than this model is for", "2 .. 1000000")
        if not isinstance(self.observe_params, bool):
            raise SpecError("--set observe_params", f"must be true or false, got {self.observe_params!r}")
        if not isinstance(self.scenario, str) or not isinstance(self.variant, str):
            raise SpecError("--set scenario", "scenario and variant are strings",
                            f"scenarios: {', '.join(scenarios.SCENARIOS)}; variants: {', '.join(scenarios.VARIANTS)}")
        scenarios.check(self.scenario, self.variant)

    @property
    def buggy(self) -> bool:
        return self.variant == "buggy"
