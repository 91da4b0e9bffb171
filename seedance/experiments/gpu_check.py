"""``make gpu-check`` / ``seedance real gpu-check``: what this project's GPU paths do on one CUDA server, in minutes.

Steps (each reported on stderr as it runs; the whole within ~5 minutes on an 8-GPU server):

1. inventory: the GPUs, CUDA runtime, NCCL version, driver and links (``nvidia-smi topo -m``) this process sees;
2. the compute model checked on GPU 0 (:mod:`seedance.real.roofline`): bf16 matrix products and streaming copies,
   measured with CUDA events beside the datasheet roofline's predictions (held out: nothing is fitted);
3. with >= 2 GPUs, nccl-tests-shaped curves (algbw and busbw vs size) for allreduce, allgather and reducescatter
   over torch.distributed with NCCL and CUDA-event timing (:mod:`seedance.real.collective_curves`);
4. the NCCL cost model fitted on three of those sizes and validated on the held-out ones (the error reported);
5. validate-and-commit training (``seedance real test-consensus``) with CUDA tensors, on-device digests and CUDA
   events, once with scenario F2 and once with F4 injected (the fixed variant: both must pass their checks);
6. a host profile (``seedance real profile``: fsync, loopback, CPU per handler) of the server's CPUs;
7. ``out/gpu-check/``: ``gpu-check.json`` (everything), ``roofline.pdf/png`` (achieved vs modelled TFLOP/s and
   GB/s), ``collectives.pdf/png`` (busbw vs size), ``model.pdf/png`` (model vs measured times), ``host.yaml`` and ``summary.txt`` (one line, also printed).

Without CUDA it prints one line saying so and returns; :func:`collective_phase` (steps 2, 3 and the figures) runs on
any backend, and the tests run it on gloo with two CPU processes; :func:`roofline_phase` runs on a CPU too.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from seedance.real.collective_curves import (CURVE_COLLECTIVES, base_topology, curves, fit_three, inventory,
                                             write_json)

CURVE_SIZES = [1 << k for k in range(10, 31, 2)]  # 1 KiB .. 1 GiB, x4: 11 sizes, as nccl-tests -b 1K -e 1G -f 4
SCENARIOS = ("F2", "F4")


def _say(message: str) -> None:
    print(f"gpu-check: {message}", file=sys.stderr, flush=True)


def collective_phase(out: Path, world: int, *, sizes: list[int] | None = None, gpu_name: str | None = None,
                     reps: int = 5, min_sample_ms: float = 20.0, timeout_s: float = 240.0,
                     extra_env: dict[str, str] | None = None, draw: bool = True) -> dict[str, Any]:
    """Measure the curves on ``world`` ranks (NCCL with CUDA, gloo otherwise), fit the model on three sizes,
    validate it on the rest, draw both figures; return the JSON-ready result."""
    from seedance.real.launcher import run_workers

    sizes = sorted(sizes or CURVE_SIZES)
    plan = {"p2p": False, "collectives": list(CURVE_COLLECTIVES), "sizes": sizes, "reps": reps, "warmups": 2,
            "seed": 0, "min_sample_s": min_sample_ms / 1e3, "out": str(out / "collectives.raw.json")}
    out.mkdir(parents=True, exist_ok=True)
    plan_path = write_json(out / "collectives.plan.json", plan)
    started = time.monotonic()
    run_workers("seedance.real.microbench", [str(plan_path)], world, out / "workers", timeout_s=timeout_s,
                extra_env=extra_env)
    raw = json.loads((out / "collectives.raw.json").read_text())
    rows = curves(raw)
    base = base_topology(world, gpu_name)
    validation = fit_three(base, rows)
    figures = _draw(out, rows, validation, raw.get("backend"), world) if draw else []
    return {"backend": raw.get("backend"), "world_size": world, "base_topology": base.name, "rows": rows,
            "model": validation, "figures": [str(p) for p in figures], "seconds": time.monotonic() - started}


def _draw(out: Path, rows: list[dict[str, Any]], validation: dict[str, Any], backend: str | None,
          world: int) -> list[Path]:
    from seedance.analysis import style

    figure, axes = style.new_figure(len(CURVE_COLLECTIVES), 1, sharey=True)
    for ax, name in zip(axes[0], CURVE_COLLECTIVES):
        mine = [r for r in rows if r["collective"] == name]
        sizes = [r["size_bytes"] for r in mine]
        ax.plot(sizes, [r["busbw_GBps"] for r in mine], marker="o", label="busbw")
        ax.plot(sizes, [r["algbw_GBps"] for r in mine], marker="s", linestyle="--", label="algbw")
        style.log_scale(ax, "x", base=2)
        ax.set_title(f"{name} ({backend}, {world} ranks)")
        ax.set_xlabel("size (bytes)")
    axes[0][0].set_ylabel("GB/s")
    axes[0][0].legend()
    paths = style.save(figure, out / "collectives")
    figure, axes = style.new_figure(len(CURVE_COLLECTIVES), 1, sharey=True)
    for ax, name in zip(axes[0], CURVE_COLLECTIVES):
        mine = [r for r in validation["rows"] if r["collective"] == name]
        sizes = [r["size_bytes"] for r in mine]
        ax.plot(sizes, [r["measured_s"] * 1e6 for r in mine], marker="o", label="measured")
        ax.plot(sizes, [r["model_s"] * 1e6 for r in mine], linestyle="--", label="model (fitted on 3 sizes)")
        fitted = [r for r in mine if not r["heldout"]]
        ax.scatter([r["size_bytes"] for r in fitted], [r["measured_s"] * 1e6 for r in fitted], s=60,
                   facecolors="none", edgecolors="black", label="fit sizes")
        style.log_scale(ax, "both", base=2)
        ax.set_title(name)
        ax.set_xlabel("size (bytes)")
    axes[0][0].set_ylabel("time (us)")
    axes[0][0].legend()
    return paths + style.save(figure, out / "model")


def roofline_phase(out: Path, device: str = "cuda:0", **sizes: Any) -> dict[str, Any]:
    """Step 2: the compute model against measured GEMMs and copies on ``device``; figure ``roofline.pdf/png``."""
    from seedance.real import roofline

    result = roofline.measure(device, **sizes)
    result["figures"] = [str(p) for p in _draw_roofline(result, out / "roofline")]
    return result


def _draw_roofline(result: dict[str, Any], stem: Path) -> list[Path]:
    """Two panels: achieved TFLOP/s of the GEMMs and GB/s of the copies against size, each with the model's."""
    from seedance.analysis import style

    figure, axes = style.new_figure(2, 1)
    for ax, op, key, unit in ((axes[0][0], "gemm", "achieved_tflops", "TFLOP/s"),
                              (axes[0][1], "copy", "achieved_GBps", "GB/s")):
        mine = [r for r in result["rows"] if r["op"] == op]
        sizes = [r["size"] for r in mine]
        ax.plot(sizes, [r[key] for r in mine], marker="o", label="measured")
        work = "flops" if op == "gemm" else "bytes"
        scale = 1e12 if op == "gemm" else 1e9
        ax.plot(sizes, [r[work] / r["model_s"] / scale for r in mine], linestyle="--", label="model (datasheet)")
        style.log_scale(ax, "x", base=2)
        ax.set_xlabel("matrix side" if op == "gemm" else "bytes copied")
        ax.set_ylabel(unit)
        ax.set_title(f"{op} on {result['device']} ({result['dtype'] if op == 'gemm' else 'uint8'})")
        ax.legend()
    return style.save(figure, stem)


def _training(out: Path, ranks: int, duration_s: float) -> dict[str, Any]:
    from seedance.experiments.consensus_check import Options, run_test_consensus

    results = {}
    for scenario in SCENARIOS:
        _say(f"training with {scenario} injected on {ranks} GPUs ({duration_s:.0f} s)")
        report = run_test_consensus(Options(ranks=ranks, duration_s=duration_s, level="full", memcheck=True,
                                            scenario=scenario, variant="fixed", nemesis=(),
                                            out=str(out / f"train-{scenario}")))
        results[scenario] = {"passed": report.get("passed"), "causes": report.get("causes"),
                             "device": report.get("device") or report.get("summary", {}).get("device"),
                             "report": str(out / f"train-{scenario}" / "report.json")}
    return results


def _host_profile(out: Path) -> dict[str, Any]:
    from seedance.experiments.host_profile import profile_host
    from seedance.files import atomic_write

    profile = profile_host(out / "profile-work", duration_s=2.0, runs=1)
    atomic_write(out / "host.yaml", profile.to_yaml().encode())
    return {"file": str(out / "host.yaml"), "cores": profile.cores, "fsync_median_ms": profile.fsync.median_s * 1e3,
            "loopback_one_way_us": profile.loopback.median_s * 1e6}


def _summary_line(facts: dict[str, Any], roof: dict[str, Any] | None, collectives: dict[str, Any] | None,
                  training: dict[str, Any],
                  host: dict[str, Any] | None, out: Path) -> str:
    gpus = facts["gpus"]
    parts = [f"{len(gpus)}x {gpus[0]['name'] if gpus else '?'}, CUDA {facts.get('cuda_runtime')}, "
             f"NCCL {facts.get('nccl')}"]
    if roof is not None:
        best = max((r for r in roof["rows"] if r["op"] == "gemm"), key=lambda r: r["achieved_tflops"])
        copy = max((r for r in roof["rows"] if r["op"] == "copy"), key=lambda r: r["achieved_GBps"])
        parts.append(f"bf16 GEMM {best['achieved_tflops']:.0f} TFLOP/s at n={best['size']}, copy "
                     f"{copy['achieved_GBps']:.0f} GB/s; compute model held-out error {roof['median_abs_rel_error']:.1%}")
    if collectives is not None:
        peak = max((r for r in collectives["rows"] if r["collective"] == "allreduce"), key=lambda r: r["busbw_GBps"])
        error = collectives["model"]["median_abs_rel_error_heldout"]
        parts.append(f"allreduce busbw {peak['busbw_GBps']:.1f} GB/s at {peak['size_bytes'] >> 20} MiB; "
                     f"NCCL model held-out error {error:.1%}")
    else:
        parts.append("collective curves skipped (fewer than 2 GPUs)")
    parts.append("training " + ", ".join(f"{s} {'pass' if r['passed'] else 'FAIL'}" for s, r in training.items()))
    if host is not None:
        parts.append(f"fsync {host['fsync_median_ms']:.2f} ms")
    return "gpu-check: " + "; ".join(parts) + f" -> {out}"


def run_gpu_check(out: Path, *, train_s: float = 20.0, profile: bool = True,
                  say: Callable[[str], None] = _say) -> dict[str, Any] | None:
    """Run every step (see the module docstring); None, after one line, when CUDA is not available."""
    facts = inventory()
    if not facts["cuda_available"]:
        print(f"gpu-check: no CUDA device visible to torch {facts['torch']} (CUDA runtime {facts['cuda_runtime']}); "
              "nothing to check on this machine")
        return None
    out = Path(out)  # pragma: no cover - below needs a GPU
    out.mkdir(parents=True, exist_ok=True)
    count = len(facts["gpus"])
    say(f"{count} GPU(s): {', '.join(g['name'] for g in facts['gpus'])}; CUDA {facts['cuda_runtime']}, "
        f"NCCL {facts.get('nccl')}")
    result: dict[str, Any] = {"inventory": facts}
    say("compute model on GPU 0: bf16 GEMMs (n = 1k .. 16k) and copies (1 MiB .. 4 GiB) against the roofline")
    result["roofline"] = roofline_phase(out)
    say(f"compute model held-out error {result['roofline']['median_abs_rel_error']:.1%} "
        f"(gemm {result['roofline']['by_op'].get('gemm', float('nan')):.1%}, "
        f"copy {result['roofline']['by_op'].get('copy', float('nan')):.1%})")
    collectives = None
    if count >= 2:
        say(f"collective curves on {count} GPUs (allreduce, allgather, reducescatter; 1 KiB .. 1 GiB)")
        collectives = collective_phase(out, count, gpu_name=facts["gpus"][0]["name"])
        say(f"NCCL model fitted on {collectives['model']['fit_sizes']}: held-out error "
            f"{collectives['model']['median_abs_rel_error_heldout']:.1%}")
    result["collectives"] = collectives
    result["training"] = _training(out, min(count, 4), train_s)
    result["host_profile"] = None
    if profile:
        say("host profile (fsync, loopback, CPU per handler)")
        result["host_profile"] = _host_profile(out)
    line = _summary_line(facts, result["roofline"], collectives, result["training"], result["host_profile"], out)
    result["summary"] = line
    from seedance.provenance import run_metadata

    result["provenance"] = run_metadata(seed=0, spec={"gpu_check": True, "train_s": train_s})
    write_json(out / "gpu-check.json", result)
    (out / "summary.txt").write_text(line + "\n")
    print(line)
    return result
