"""``seedance cost``: predicted time, algbw and busbw of one collective on a cluster (seed §2.4).

Sizes use nccl-tests' conventions (see :mod:`seedance.models.cost.collectives`); ``--size`` takes one size
(``1GiB``, ``4MiB``, ``512KB``, ``1e9``) or a range ``START:END[:FACTOR]`` as ``-b -e -f``. ``--model nccl``
(default) is NCCL's own tuner (:mod:`seedance.models.cost.nccl`): every row names the algorithm, protocol and
channels NCCL would use; ``--model alpha-beta`` is the alpha-beta model. Without ``--json`` the output is a table
shaped like nccl-tests' (size, count, type, time, algbw, busbw) plus algorithm, protocol and channels; with ``--json``
one object — exactly ``collective, algorithm, protocol, channels, model, size_bytes, num_devices, time_s,
algbw_GBps, busbw_GBps`` for one size, or ``{"collective", "algorithm", "model", "topology", "num_devices",
"rows": [those objects]}`` for a range.

``--tau`` gives the straggler vector (how late each device calls the collective): ``N1,N2,...`` (one value per
device) or ``DEV=VALUE,...`` (the rest 0) or a single value for all; values in seconds, or with a unit ``s``,
``ms``, ``us``.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import click

from seedance.models.topology.checks import check_topology_spec
from seedance.cli._common import emit_json, json_option
from seedance import validation
from seedance.errors import SpecError
from seedance.models.units import parse_size_range

if TYPE_CHECKING:  # numpy and the cost model load inside the command (the CLI starts fast)
    import numpy as np

VALID_TAU = "seconds per device: 'N1,N2,...' (one per device), 'DEV=VALUE,...', or one value; units s, ms, us"
_TAU_VALUE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*(s|ms|us)?\s*$")
_UNIT = {None: 1.0, "s": 1.0, "ms": 1e-3, "us": 1e-6}
# nccl-tests prints per-rank element counts for these (the buffer each rank holds is size/n)
PER_RANK_COUNT = frozenset({"reducescatter", "allgather", "alltoall"})


def _tau_value(text: str) -> float:
    match = _TAU_VALUE.match(text)
    if not match:
        raise SpecError("tau", f"cannot parse {text!r}", VALID_TAU)
    value = float(match.group(1)) * _UNIT[match.group(2)]
    return validation.number("tau", value, lo=0, hi=validation.MAX_TIMEOUT_S, why="a delay of over a day")


def parse_tau(spec: str, num_devices: int) -> np.ndarray:
    """The straggler vector of ``--tau`` (see the module docstring)."""
    import numpy as np

    parts = [p for p in spec.split(",")]
    if not spec.strip() or any(not p.strip() for p in parts):
        raise SpecError("tau", f"cannot parse {spec!r}", VALID_TAU)
    tau = np.zeros(num_devices)
    if all("=" in p for p in parts):
        seen: set[int] = set()
        for part in parts:
            device, value = part.split("=", 1)
            if not device.strip().isdigit() or int(device) >= num_devices:
                raise SpecError("tau", f"{device.strip()!r} is not a device", f"a device index in [0, {num_devices})")
            if int(device) in seen:
                raise SpecError("tau", f"device {int(device)} is given twice", "each device at most once")
            seen.add(int(device))
            tau[int(device)] = _tau_value(value)
        return tau
    if any("=" in p for p in parts):
        raise SpecError("tau", f"mixes 'DEV=VALUE' and plain values in {spec!r}", VALID_TAU)
    values = [_tau_value(p) for p in parts]
    if len(values) == 1:
        return np.full(num_devices, values[0])
    if len(values) != num_devices:
        raise SpecError("tau", f"has {len(values)} values for {num_devices} devices", VALID_TAU)
    return np.array(values)


def element_count(collective: str, size_bytes: int, num_devices: int, dtype_bytes: int = 4) -> int:
    """nccl-tests' "count" column (elements of ``float``): per rank for reducescatter, allgather, alltoall."""
    count = size_bytes // dtype_bytes
    return count // num_devices if collective in PER_RANK_COUNT else count


def format_table(collective: str, topology_name: str, rows: list[dict], requested: str, model: str = "nccl") -> str:
    """An nccl-tests-shaped table of prediction rows (dicts of :class:`CollectiveCost` fields)."""
    n = rows[0]["num_devices"] if rows else 0
    lines = [
        f"# seedance cost: {collective} on {topology_name} ({n} devices), algorithm {requested}, {model} model",
        "#",
        f"# {'size':>10} {'count':>13} {'type':>9} {'algorithm':>13} {'proto':>6} {'ch':>3} {'time':>12} "
        f"{'algbw':>8} {'busbw':>8}",
        f"# {'(B)':>10} {'(elements)':>13} {'':>9} {'':>13} {'':>6} {'':>3} {'(us)':>12} {'(GB/s)':>8} {'(GB/s)':>8}",
    ]
    for row in rows:
        lines.append(
            f"  {row['size_bytes']:>10} {element_count(collective, row['size_bytes'], n):>13} {'float':>9} "
            f"{row['algorithm']:>13} {row.get('protocol') or '-':>6} {row.get('channels') or '-':>3} "
            f"{row['time_s'] * 1e6:>12.2f} {row['algbw_GBps']:>8.2f} {row['busbw_GBps']:>8.2f}"
        )
    return "\n".join(lines)


@click.command("cost")
@click.argument("collective", metavar="COLLECTIVE")
@click.option("--topology", "topology_spec", required=True, metavar="NAME|FILE", help="A preset or a YAML/JSON file.")
@click.option("--nodes", type=click.IntRange(min=1), default=None, help="Servers in a preset cluster (>= 1).")
@click.option("--size", "size_spec", required=True, metavar="SIZE|START:END[:FACTOR]",
              help="Bytes: 1GiB, 4MiB, 512KB (=512000), 1e9, 8G (=8GiB); or a range 8B:8GiB (doubling, as nccl-tests).")
@click.option("--model", default="nccl", show_default=True,
              help="nccl (NCCL's own tuner on this topology) or alpha-beta.")
@click.option("--algorithm", default="auto", show_default=True,
              help="nccl: ring, tree, nvls, nvls_tree, pat, p2p; alpha-beta: ring, tree, rhd, direct, hierarchical "
                   "(which apply depends on the collective); or auto.")
@click.option("--protocol", default="auto", show_default=True, help="nccl model: LL, LL128, Simple, or auto.")
@click.option("--tau", "tau_spec", default=None, metavar="SPEC",
              help="Straggler delays: 'N1,N2,...' seconds per device, 'DEV=VALUE,...', or one value (units s/ms/us).")
@json_option
def command(
    collective: str, topology_spec: str, nodes: int | None, size_spec: str, model: str, algorithm: str,
    protocol: str, tau_spec: str | None, as_json: bool,
) -> None:
    """Predict COLLECTIVE's time, algbw and busbw (nccl-tests' definitions) on a cluster.

    COLLECTIVE and its algorithms under --model nccl (default): allreduce (ring, tree, nvls, nvls_tree);
    reducescatter and allgather (ring, nvls, pat); broadcast (ring); alltoall and sendrecv (p2p). Under --model
    alpha-beta: allreduce (ring, tree, rhd, direct, hierarchical); reducescatter and allgather (ring, rhd, direct,
    hierarchical); broadcast (ring, tree, direct, hierarchical); alltoall (direct); sendrecv (direct, ring).
    auto takes the fastest, as NCCL's tuner does.
    """
    from seedance.models.cost import collective_time
    from seedance.models.cost.collectives import check_algorithm, check_collective, check_model, check_protocol
    from seedance.models.topology import load

    collective = check_collective(collective)
    model = check_model(model)
    algorithm = check_algorithm(collective, algorithm, model)
    protocol = check_protocol(protocol)
    if model != "nccl" and protocol != "auto":
        raise SpecError("protocol", f"{protocol} applies to the nccl model only", "auto with --model alpha-beta")
    sizes = parse_size_range(size_spec)
    check_topology_spec("--topology", topology_spec, nodes)  # file strictness, device ceiling
    topology = load(topology_spec, nodes=nodes)
    tau = parse_tau(tau_spec, topology.num_devices) if tau_spec is not None else None
    rows = [
        collective_time(collective, size, topology, algorithm=algorithm, tau_s=tau, model=model,
                        protocol=protocol).as_dict()
        for size in sizes
    ]
    single = ":" not in size_spec
    if as_json:
        if single:
            emit_json(rows[0])
        else:
            emit_json({
                "collective": collective, "algorithm": algorithm, "model": model, "topology": topology.name,
                "num_devices": topology.num_devices, "rows": rows,
            })
        return
    click.echo(format_table(collective, topology.name, rows, algorithm, model))

