"""The studies behind ``seedance experiment NAME`` and the sweep's ``experiment`` runner, as library calls (one
registry: the CLI's sub-commands call these too): each takes the run's directory, ``quick``, the seed and the study's
own options (and optionally ``progress``, a callable given one line per phase), writes the study's files there and
returns the object ``seedance experiment NAME --json`` prints.

The table :data:`EXPERIMENTS` names each study's options (the CLI's flags, underscored), their defaults and checks;
an unknown name or option is a :class:`~seedance.errors.SpecError` listing the valid ones. Each study's library is
imported only when it runs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from seedance.errors import SpecError


def _int(lo: int, hi: int) -> Callable[[str, Any], Any]:
    def check(name: str, value: Any) -> Any:
        from seedance import validation as V

        return value if value is None else V.integer(name, value, lo=lo, hi=hi)
    return check


def _num(lo: float, hi: float) -> Callable[[str, Any], Any]:
    def check(name: str, value: Any) -> Any:
        from seedance import validation as V

        return value if value is None else V.number(name, value, lo=lo, hi=hi)
    return check


def _flag(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise SpecError(name, f"expected true or false, got {value!r}")
    return value


def _file(name: str, value: Any) -> Any:
    if value is not None and not (isinstance(value, str) and Path(value).is_file()):
        raise SpecError(name, f"{value!r} is not a file", "a host profile from `seedance real profile`, or null")
    return value


def _protocol(name: str, value: Any) -> str:
    from seedance.models.protocols import registry

    if not isinstance(value, str):
        raise SpecError(name, f"expected a protocol name, got {value!r}", f"valid: {', '.join(registry.names())}")
    try:
        registry.get(value)
    except SpecError as err:
        raise SpecError(name, err.problem, err.valid) from None
    return value


@dataclass(frozen=True)
class Experiment:
    run: Callable[..., dict[str, Any]]  # (out, *, quick, seed, **options) -> the CLI's --json object
    options: dict[str, tuple[Any, Callable[[str, Any], Any]]] = field(default_factory=dict)  # name: (default, check)
    seeded: bool = True  # takes the sweep's seed (--seed of the CLI)
    imports: tuple[str, ...] = ()


Progress = Callable[[str], None] | None


def measured_profile(path: str | None, out: Path, nodes: int, progress: Progress = None) -> Any:
    """The host profile at ``path``, or one measured now on this machine (written to ``out``/host.yaml)."""
    from seedance.models.host import load_profile
    from seedance.files import atomic_write

    if path is not None:
        return load_profile(path)
    from seedance.experiments.host_profile import profile_host

    if progress is not None:
        progress("measuring the host profile (fsync, loopback, CPU per input)")
    profile = profile_host(out / "profile-work", nodes=nodes)
    atomic_write(out / "host.yaml", profile.to_yaml().encode())
    return profile


def convergence_config(quick: bool, seeds: int | None, seed: int) -> Any:
    from seedance.experiments.convergence import ExperimentConfig

    return ExperimentConfig.quick(seeds, seed) if quick else ExperimentConfig(
        **({"seeds": seeds} if seeds else {}), root_seed=seed)


def convergence(out: Path, *, quick: bool, seed: int, seeds: int | None, progress: Progress = None,
                iterations: Callable[[int], None] | None = None) -> dict[str, Any]:
    """``iterations``: called with the count of iterations done since its last call (a progress bar's update)."""
    from seedance.experiments.convergence import run_experiment, save
    from seedance.experiments.convergence import config_dict
    from seedance.provenance import run_metadata

    config = convergence_config(quick, seeds, seed)
    result = run_experiment(config, progress=iterations)
    if progress is not None:
        progress(f"writing tables and figures to {out}")
    provenance = run_metadata(seed=seed, spec=config_dict(config))
    artifacts = save(result, out, provenance=provenance)
    rows = result.rows.astype(object).where(result.rows.notna(), None).to_dict(orient="records")
    return {"rows": rows, "summary": {**result.summary, "provenance": provenance}, "artifacts": artifacts}


def sim_vs_real(out: Path, *, quick: bool, seed: int, protocol: str, host_profile: str | None,
                repeats: int | None, duration: float, nodes: int, progress: Progress = None) -> dict[str, Any]:
    from seedance.experiments import sim_vs_real as svr
    from seedance.provenance import run_metadata

    profile = measured_profile(host_profile, out, nodes, progress)
    configs = svr.QUICK_CONFIGS if quick else svr.DEFAULT_CONFIGS
    duration = min(duration, 2.0) if quick else duration
    repeats = repeats if repeats is not None else (3 if quick else 5)
    result = svr.run_experiment(protocol=protocol, out=out, profile=profile, nodes=nodes, configs=configs,
                                repeats=repeats, duration_s=duration, progress=progress)
    provenance = run_metadata(seed=0, spec={"protocol": protocol, "nodes": nodes, "repeats": repeats,
                                            "duration_s": duration, "configs": [c.name for c in configs],
                                            "host_profile": profile.to_dict()})
    artifacts = svr.save(result, out, provenance=provenance)
    summary = result["summary"]
    return {"rows": summary["rows"], **{k: v for k, v in summary.items() if k != "rows"}, "artifacts": artifacts}


def protocols(out: Path, *, quick: bool, seed: int, duration: float | None, real: bool,
              host_profile: str | None, progress: Progress = None) -> dict[str, Any]:
    from seedance.experiments import protocols as study
    from seedance.provenance import run_metadata

    if host_profile is not None and not real:
        raise SpecError("params.options.host_profile", "is only used with real: true", "add real: true or drop it")
    profile = measured_profile(host_profile, out, 3, progress) if real else None
    rows = study.run(quick=quick, seed=seed, duration_s=duration, progress=progress)
    real_rows = study.run_real(profile=profile, out=out, seed=seed, duration_s=2.0 if quick else 4.0,
                               progress=progress) if real else None
    provenance = run_metadata(seed=seed, spec={"quick": quick, "duration_s": duration, "real": real,
                                               "cases": len(rows), "topology": study.TOPOLOGY,
                                               "host_profile": profile.to_dict() if profile else None})
    artifacts = study.save(rows, out, provenance=provenance, real_rows=real_rows)
    return {"rows": rows, **({"real_rows": real_rows} if real_rows is not None else {}), "artifacts": artifacts}


def failure_scenarios(out: Path, *, quick: bool, seed: int, no_real: bool, progress: Progress = None) -> dict[str, Any]:
    from seedance.experiments.scenarios import run
    from seedance.provenance import run_metadata

    result = run(quick=quick, out=out, seed=seed, real=not no_real, progress=progress)
    result["summary"]["provenance"] = run_metadata(seed=seed, spec={"quick": quick, "real": not no_real})
    return result


def pixel_vs_consensus(out: Path, *, quick: bool, seed: int, progress: Progress = None) -> dict[str, Any]:
    from seedance.experiments.causal import run

    return run(out, quick=quick, seed=seed, progress=progress)


MAX_STRESS_HOURS = 72.0 * 4
MAX_STRESS_WORKERS = 64  # processes, one segment each at a time (a 72 h run has 432 segments)
WHY_STRESS_HOURS = "four times the seed's 72 h; a simulated hour of 64 ranks costs tens of wall minutes here"


def _hours(name: str, value: Any) -> Any:
    from seedance import validation as V

    return value if value is None else V.number(name, value, lo=0, hi=MAX_STRESS_HOURS, lo_open=True,
                                                why=WHY_STRESS_HOURS)


def stress(out: Path, *, quick: bool, seed: int, hours: float | None, workers: int | None = None,
           progress: Progress = None) -> dict[str, Any]:
    """The seed's 72 h stress test simulated (:mod:`seedance.experiments.stress`): ``hours`` simulated hours
    (default 72, or 1 with ``quick``), its segments on ``workers`` processes (default 1; the result is the same)."""
    from seedance.experiments.stress import run

    span = hours if hours is not None else (1.0 if quick else 72.0)
    return run(hours=span, seed=seed, out=out, progress=progress, workers=workers or 1)


EXPERIMENTS: dict[str, Experiment] = {
    "convergence": Experiment(convergence, {"seeds": (None, _int(2, 1024))},
                              imports=("seedance.experiments.convergence",)),
    "failure-scenarios": Experiment(failure_scenarios, {"no_real": (False, _flag)},
                                    imports=("seedance.experiments.scenarios",)),
    "pixel-vs-consensus": Experiment(pixel_vs_consensus, imports=("seedance.experiments.causal",)),
    "protocols": Experiment(protocols, {"duration": (None, _num(0.05, 60)), "real": (False, _flag),
                                        "host_profile": (None, _file)}, imports=("seedance.experiments.protocols",)),
    "sim-vs-real": Experiment(sim_vs_real, {"protocol": ("raft", _protocol), "host_profile": (None, _file),
                                            "repeats": (None, _int(1, 20)), "duration": (3.0, _num(0.5, 120)),
                                            "nodes": (3, _int(1, 16))}, seeded=False,
                              imports=("seedance.experiments.sim_vs_real",)),
    "stress": Experiment(stress, {"hours": (None, _hours), "workers": (None, _int(1, MAX_STRESS_WORKERS))}, imports=("seedance.experiments.stress",)),
}


def experiment(name: Any) -> Experiment:
    if name not in EXPERIMENTS:
        raise SpecError("params.name", f"unknown experiment {name!r}", f"valid: {', '.join(sorted(EXPERIMENTS))}")
    return EXPERIMENTS[name]


def resolve_options(name: str, options: dict[str, Any]) -> dict[str, Any]:
    """The study's options over their defaults, each checked (errors name ``params.options.X``)."""
    study = experiment(name)
    out = {}
    for key in options:
        if key.replace("-", "_") not in study.options:
            raise SpecError(f"params.options.{key}", f"not an option of experiment {name}",
                            f"valid: {', '.join(sorted(study.options)) or '(none)'}")
    given = {k.replace("-", "_"): v for k, v in options.items()}
    for key, (default, check) in study.options.items():
        out[key] = check(f"params.options.{key}", given.get(key, default))
    return out


def command(name: str, quick: bool, seed: int, options: dict[str, Any], out: Path) -> str:
    """The ``seedance experiment`` command line that reproduces a run."""
    args = [name, *(["--quick"] if quick else []), *([f"--seed {seed}"] if experiment(name).seeded else [])]
    for key, value in options.items():
        flag = "--" + key.replace("_", "-")
        if isinstance(value, bool):
            args.append(flag if value else "")
        elif value is not None:
            args.append(f"{flag} {value}")
    return "seedance experiment " + " ".join(a for a in [*args, f"--out {out}"] if a)
