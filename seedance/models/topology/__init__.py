"""Heterogeneous GPU fabrics: devices, switches and links, and the matrices derived from them (seed §2.4).

A cluster is a link graph (networkx) of devices and switches joined by links of a kind (nvlink, nvswitch, pcie, upi,
infiniband, ethernet) with a bandwidth in GB/s per direction and a latency in µs. Routing over it gives the effective
pairwise bandwidth matrix ``B`` (n×n, GB/s, may be asymmetric; diagonal ``inf``) and latency matrix (µs; diagonal 0).
The plain matrix form of the seed is accepted too; it has no switches, and each ordered pair is its own link.

:class:`Topology` is what every other part consumes (cost model, simulator network, calibration). The pieces:
``_core`` (the value), ``_matrix`` (matrix form), ``_graph`` (link graph and routing), ``_presets`` (published
machines), ``_load`` (names and files), ``_nccl`` (reading nccl-tests output and fitting alpha-beta to it).
"""

import importlib
from typing import TYPE_CHECKING, Any

# Names resolve on first use (PEP 562), so listing presets or importing the CLI does not load numpy, networkx,
# scipy and pandas; ``from seedance.models.topology import load`` works as before.
_WHERE = {
    "LINK_KINDS": "_core", "SWITCH_KINDS": "_core", "LinkKey": "_core", "Topology": "_core",
    "LINK_LATENCY_US": "_graph", "from_graph": "_graph",
    "from_dict": "_load", "load": "_load", "load_file": "_load",
    "from_matrix": "_matrix", "to_dict": "_matrix",
    "NCCL_COLUMNS": "_nccl", "calibrate_from_nccl_tests": "_nccl", "parse_nccl_tests": "_nccl",
    "PRESETS": "_presets", "preset": "_presets", "preset_names": "_presets",
}


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_WHERE[name]}"), name)
    globals()[name] = value
    return value


if TYPE_CHECKING:
    from seedance.models.topology._core import LINK_KINDS, SWITCH_KINDS, LinkKey, Topology
    from seedance.models.topology._graph import LINK_LATENCY_US, from_graph
    from seedance.models.topology._load import from_dict, load, load_file
    from seedance.models.topology._matrix import from_matrix, to_dict
    from seedance.models.topology._nccl import NCCL_COLUMNS, calibrate_from_nccl_tests, parse_nccl_tests
    from seedance.models.topology._presets import PRESETS, preset, preset_names

__all__ = [
    "LINK_KINDS", "LINK_LATENCY_US", "NCCL_COLUMNS", "PRESETS", "SWITCH_KINDS", "LinkKey", "Topology",
    "calibrate_from_nccl_tests", "from_dict", "from_graph", "from_matrix", "load", "load_file", "parse_nccl_tests",
    "preset", "preset_names", "to_dict",
]
