"""The architecture's one hard rule: ``seedance.models`` stays pure (docs/contract.md, "Layers").

No simpy, sockets, asyncio, threads, processes, torch.distributed, wall clock or global random state, and no import
of the runtimes or analysis layers. Checked on the AST of every module, so a violation names file and line.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

MODELS = Path(__file__).resolve().parent.parent / "seedance" / "models"

FORBIDDEN_MODULES = {
    "simpy", "socket", "socketserver", "asyncio", "threading", "_thread", "multiprocessing", "concurrent",
    "subprocess", "selectors", "time", "datetime", "random", "secrets", "ssl", "http", "urllib", "signal",
    "torch.distributed", "torch.multiprocessing",
    "seedance.sim", "seedance.real", "seedance.analysis", "seedance.cli",
}
# numpy's global RNG: anything under np.random except the explicit-generator API.
ALLOWED_NP_RANDOM = {"Generator", "default_rng", "SeedSequence", "PCG64", "PCG64DXSM", "Philox", "BitGenerator"}
FORBIDDEN_CALLS = {("torch", "manual_seed"), ("torch", "seed")}


def _is_forbidden(name: str) -> bool:
    return any(name == bad or name.startswith(bad + ".") for bad in FORBIDDEN_MODULES)


def _violations(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found = []
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        bad = [name for name in names if _is_forbidden(name)]
        if bad:
            found.append(f"{path.name}:{node.lineno} imports {bad[0]}")
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute):
            inner = node.value
            if (
                isinstance(inner.value, ast.Name)
                and inner.value.id in {"np", "numpy"}
                and inner.attr == "random"
                and node.attr not in ALLOWED_NP_RANDOM
            ):
                found.append(f"{path.name}:{node.lineno} uses global RNG np.random.{node.attr}")
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            if (node.value.id, node.attr) in FORBIDDEN_CALLS:
                found.append(f"{path.name}:{node.lineno} uses {node.value.id}.{node.attr}")
    return found


def test_models_package_exists():
    assert (MODELS / "__init__.py").exists()


@pytest.mark.parametrize("path", sorted(MODELS.rglob("*.py")), ids=lambda p: str(p.relative_to(MODELS)))
def test_models_are_pure(path: Path):
    assert _violations(path) == []


def test_checker_catches_a_violation(tmp_path: Path):
    bad = tmp_path / "bad.py"
    bad.write_text("import time\nimport numpy as np\nfrom seedance.sim import x\nv = np.random.rand(3)\n")
    found = _violations(bad)
    assert len(found) == 3 and any("np.random.rand" in f for f in found)


# --- the runtimes are peers over the shared engine ------------------------------------------------------------------
PACKAGE = MODELS.parent
ENGINE = PACKAGE / "engine"


def _imports(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.lineno, node.module))
    return found


def _layer_violations(path: Path, forbidden: tuple[str, ...]) -> list[str]:
    return [f"{path.name}:{line} imports {name}" for line, name in _imports(path)
            if any(name == bad or name.startswith(bad + ".") for bad in forbidden)]


@pytest.mark.parametrize("path", sorted(ENGINE.rglob("*.py")), ids=lambda p: p.name)
def test_the_engine_is_pure_and_below_both_runtimes(path: Path):
    """The effect engine performs no I/O and imports neither runtime (both import it)."""
    assert _violations(path) == []


@pytest.mark.parametrize("path", sorted((PACKAGE / "sim").rglob("*.py")), ids=lambda p: p.name)
def test_the_simulator_does_not_import_the_real_backend(path: Path):
    assert _layer_violations(path, ("seedance.real",)) == []


@pytest.mark.parametrize("path", sorted((PACKAGE / "real").rglob("*.py")), ids=lambda p: p.name)
def test_the_real_backend_does_not_import_the_simulator(path: Path):
    assert _layer_violations(path, ("seedance.sim",)) == []


def test_both_runtimes_drive_nodes_through_the_engine():
    for runtime in (PACKAGE / "sim" / "runtime.py", PACKAGE / "real" / "runtime.py"):
        modules = {name for _, name in _imports(runtime)}
        assert "seedance.engine.effects" in modules and "seedance.engine.rng" in modules, runtime
