"""``seedance real profile``'s calibrations: the measured host profile (:func:`seedance.real.profile.measure_host`)
held against the simulator, which must reproduce the profile runs' own throughput and latency windows.

Three fits, each by simulated runs of the profile's own configuration (:func:`seedance.experiments.sim_vs_real.
predict`): the other tenants' share of the cores (:func:`calibrate_tenants`), one factor on every CPU time
(:func:`calibrate_cpu`) and the slow spells (:func:`calibrate_spell`). They run the simulator on a measurement of
the real backend, so they live above both runtimes.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from seedance.experiments.sim_vs_real import Config, anchor_cpu, predict, run_lead_s
from seedance.history.spells import WINDOW_S
from seedance.models.host import HostProfile, TenantProfile, fit_spell
from seedance.real.profile import RUNS, measure_host


def calibrate_tenants(profile: HostProfile, *, real_ops_s: float, nodes: int, clients: int, duration_s: float,
                      steps: int = 8) -> HostProfile:
    """Fit the tenants' ``share`` (0..1.5) so the simulator reproduces the profile run's own throughput (the fitted
    configuration only; bisection: the simulated throughput falls as the share grows). The meter sees what the
    other tenants used; how much of it kept cores from this host's processes depends on the scheduler's fair share
    while both wanted them, which only the run shows. A machine without other tenants (under 0.1 busy cores) is
    left as it is."""
    tenants = profile.tenants
    lead = run_lead_s(profile.measured.get("raft_run"))  # the profile run's nodes ran this long before its load
    if tenants is None or tenants.busy_cores < 0.1 or not real_ops_s:
        return profile

    def shared(share: float) -> HostProfile:
        return dataclasses.replace(profile, tenants=TenantProfile(tenants.busy_cores, tenants.slice, share))

    lo, hi = 0.0, 1.5
    for _ in range(steps):
        mid = (lo + hi) / 2
        predicted = predict("raft", nodes, Config(clients), duration_s, 1, shared(mid), lead)["throughput_ops_s"]
        lo, hi = (mid, hi) if predicted > real_ops_s else (lo, mid)
    share = (lo + hi) / 2
    out = shared(share)
    sim_ops = predict("raft", nodes, Config(clients), duration_s, 1, out, lead)["throughput_ops_s"]
    return dataclasses.replace(out, measured={**profile.measured, "tenant_calibration": {
        "share": share, "real_ops_s": real_ops_s, "sim_ops_s": sim_ops}})


def calibrate_cpu(profile: HostProfile, *, real_ops_s: float, nodes: int, clients: int, duration_s: float,
                  steps: int = 8) -> HostProfile:
    """Scale the profile's CPU times (:meth:`HostProfile.scaled_cpu`) by the one factor at which the simulator
    reproduces the profile run's own throughput: the experiment's anchor (:func:`seedance.experiments.sim_vs_real.
    anchor_cpu`) on the profile's own run, after the tenants' share, which does so only on a machine with other
    tenants to share it with. The CPU samples are the runs' own, but what the model makes of them (the cores'
    sharing, the hand-offs between processes) left a profile 0.8-1.04 of its own run's throughput on this machine
    (the median run of three 3 s runs; one 1 s run: 0.8); calibrated, a profile used without an experiment's
    anchor (``sim run --host-profile``) starts from its own run. The factor and both throughputs are recorded in
    ``measured.cpu_calibration``."""
    if not real_ops_s:
        return profile
    config = Config(clients)
    lead = run_lead_s(profile.measured.get("raft_run"))
    before = predict("raft", nodes, config, duration_s, 1, profile, lead)["throughput_ops_s"]
    anchor = anchor_cpu([{"config": config.name, "held_out": False, "round": 0, "real_ops_s": real_ops_s,
                          "real_tenant_cores": None, "sim_ops_s": before, "real_lead_s": lead}],
                        profile, protocol="raft", nodes=nodes, configs=[config], duration_s=duration_s, steps=steps)
    return dataclasses.replace(profile.scaled_cpu(anchor["factor"]), measured={**profile.measured, "cpu_calibration": {
        "factor": anchor["factor"], "real_ops_s": real_ops_s, "sim_ops_s_before": before,
        "sim_ops_s": anchor["sim_ops_s"]}})


SPELL_ELASTICITY_STEP = 1.2  # the CPU scale the spells' calibration compares with 1 (the latency's elasticity)


def calibrate_spell(profile: HostProfile, real: Any, *, nodes: int, clients: int, duration_s: float,
                    seed: int = 1) -> HostProfile:
    """Fit the host's slow spells (``spell``) to the profile runs' own latency windows (``real``: their pooled
    :class:`seedance.history.spells.WindowStats`). The simulator's own windows vary a little too (the protocol's
    batching), so only the variance beyond that is the spells'; and a spell scales CPU, not an fsync's wall time,
    so the latency moves as ``g ** e``, with ``e`` the simulated latency's elasticity to a CPU scale (the fitted
    configuration at 1 and at :data:`SPELL_ELASTICITY_STEP`). The window correlation gives the spells' time
    (:func:`seedance.models.host.fit_spell`). A last simulated run with the fitted spells checks them against the
    real windows (recorded in ``measured.spells``). No spells (left out) when the real windows vary no more than
    the simulator's own (the median over three seeds), or neighbouring windows do not agree."""
    lead = run_lead_s(profile.measured.get("raft_run"))

    def simulated(host: HostProfile, at: int = seed) -> dict[str, Any]:  # throughput, p50, p99, the windows' sd
        return predict("raft", nodes, Config(clients), duration_s, at, host, lead)

    record: dict[str, Any] = {"real": None if real is None else real.to_dict()}
    spell = None
    if real is not None and real.sd > 0 and real.rho == real.rho and real.rho > 0:
        own = simulated(profile)
        p50, slower = own["latency_ms_p50"], simulated(profile.scaled_cpu(SPELL_ELASTICITY_STEP))["latency_ms_p50"]
        elasticity = math.log(slower / p50) / math.log(SPELL_ELASTICITY_STEP) if p50 and slower else 1.0
        elasticity = min(max(elasticity, 0.2), 1.5)
        # the simulator's own windows' sd: the median of three seeds, since one run's rare stall (a 130 ms
        # collection in the client process) can lift its sd from 0.03 to 0.28 and hide the spells
        own_sd = float(np.median([(run["window_sd"] or 0.0) for run in
                                  (own, simulated(profile, seed + 1), simulated(profile, seed + 2))]))
        beyond = math.sqrt(max(real.sd ** 2 - own_sd ** 2, 0.0))
        spell = fit_spell(beyond, real.rho, WINDOW_S, elasticity)
        record.update({"simulated_own_sd": own_sd, "elasticity": elasticity, "beyond_sd": beyond})
        if spell is not None:
            check = simulated(dataclasses.replace(profile, spell=spell))
            record["simulated_with_spell"] = {"sd": check["window_sd"], "rho": check["window_rho"]}
    record["fitted"] = None if spell is None else asdict(spell)
    return dataclasses.replace(profile, spell=spell, measured={**profile.measured, "spells": record})


def profile_host(work_dir: Path, *, nodes: int = 3, clients: int = 8, duration_s: float = 3.0,
                 seed: int = 1, runs: int = RUNS) -> HostProfile:
    """Measure everything (:mod:`seedance.real.profile`), fit the profile and calibrate it against the simulator."""
    profile, cpu = measure_host(work_dir, nodes=nodes, clients=clients, duration_s=duration_s, seed=seed, runs=runs)
    real_ops_s = cpu["summary"].get("throughput_ops_s") or 0.0
    profile = calibrate_tenants(profile, real_ops_s=real_ops_s, nodes=nodes, clients=clients,
                                duration_s=min(duration_s, 2.0))
    profile = calibrate_cpu(profile, real_ops_s=real_ops_s, nodes=nodes, clients=clients,
                            duration_s=min(duration_s, 2.0))
    return calibrate_spell(profile, cpu["windows"], nodes=nodes, clients=clients, duration_s=duration_s, seed=seed)
