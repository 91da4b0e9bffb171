"""The architecture's rules (docs/architecture.md): ``seedance.models`` stays pure, and every module imports only
its own floor or a lower one.

Purity: no simpy, sockets, asyncio, threads, processes, torch.distributed, wall clock or global random state in
``seedance.models`` or ``seedance.engine``. Floors: see :data:`FLOORS`; every import counts, those inside functions
too, and no two modules import each other, however indirectly. Checked on the AST of every module, so a violation
names file, line and the two floors.

Sizes: no module of ``seedance/`` over :data:`MAX_MODULE_LINES` lines and no function over
:data:`MAX_FUNCTION_LINES`, except what :data:`SIZE_ALLOWED` lists with a ceiling and a reason (nothing, now).
"""

from __future__ import annotations

import ast
import functools
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


# --- floors: every module imports only its own floor or lower ---------------------------------------------------------
# (floor name, module prefixes), lowest first. A module's floor is that of its longest matching prefix. Peers share a
# number but never import each other (PEERS).
FLOORS: tuple[tuple[int, str, tuple[str, ...]], ...] = (
    (0, "ground", ("seedance", "seedance.errors", "seedance.validation", "seedance.tracing", "seedance.provenance",
                   "seedance.jsonable", "seedance.files", "seedance.monitor")),
    (1, "models", ("seedance.models", "seedance.faults")),
    (2, "history", ("seedance.history",)),
    (3, "engine", ("seedance.engine",)),
    (4, "sim", ("seedance.sim",)),
    (4, "real", ("seedance.real",)),
    (5, "analysis", ("seedance.analysis",)),
    (6, "experiments", ("seedance.experiments",)),
    (7, "sweep", ("seedance.sweep",)),
    (8, "paper", ("seedance.paper",)),
    (9, "cli", ("seedance.cli", "seedance.__main__")),
)
PEERS = {frozenset({"sim", "real"})}
# floors a floor may not import although they are lower: analysis reads records and drives no runtime (the studies
# that run one are experiments, a floor up)
SKIPS = {"analysis": {"sim", "real", "engine"}}


def floor_of(module: str) -> tuple[int, str]:
    best = max(((len(prefix), level, name) for level, name, prefixes in FLOORS for prefix in prefixes
                if module == prefix or module.startswith(prefix + ".")), default=None)
    assert best is not None, f"{module} is on no floor: add it to FLOORS in tests/test_architecture.py"
    return best[1], best[2]


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules(root: Path) -> dict[str, Path]:
    return {module_name(p, root): p for p in sorted((root / "seedance").rglob("*.py"))}


def imported(path: Path, name: str, known: dict[str, Path]) -> list[tuple[int, str]]:
    """Every seedance module ``path`` (module ``name``) imports, anywhere in it (functions included), resolved to a
    module of the package (``from a.b import c`` is module ``a.b.c`` where that exists, else ``a.b``)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found = []
    for node in ast.walk(tree):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package[:len(package) - node.level + 1] + ([node.module] if node.module else []))
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
        for target in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name and (node.lineno, target) not in found:
                found.append((node.lineno, target))
    return found


def floor_violations(root: Path) -> list[str]:
    """``file:line`` for each import of a higher floor or of a peer, naming both floors."""
    known = modules(root)
    found = []
    for name, path in known.items():
        level, floor = floor_of(name)
        for line, target in imported(path, name, known):
            their_level, theirs = floor_of(target)
            if their_level > level:
                why = "a higher floor"
            elif floor != theirs and frozenset({floor, theirs}) in PEERS:
                why = "a peer floor"
            elif theirs in SKIPS.get(floor, ()):
                why = f"a floor {floor} may not import"
            else:
                continue
            found.append(f"{path.relative_to(root)}:{line}: {name} (floor {floor}) imports {target} ({why}: {theirs})")
    return found


def import_cycles(root: Path) -> list[list[str]]:
    """The module-level import cycles (strongly connected components of two or more modules, or one importing
    itself), each as its modules, sorted."""
    known = modules(root)
    graph = {name: sorted({t for _, t in imported(path, name, known)}) for name, path in known.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components = []
    for start in graph:  # Tarjan's algorithm, iterative (the graph is a few hundred modules deep at most)
        if start in index:
            continue
        work = [(start, iter(graph[start]))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            child = next(edges, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(graph[child])))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    components.append(sorted(component))
    return sorted(components)


ROOT = PACKAGE.parent
@functools.lru_cache(maxsize=None)
def _violations_by_file() -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for violation in floor_violations(ROOT):
        found.setdefault(violation.split(":", 1)[0], []).append(violation)
    return found


@pytest.mark.parametrize("name", sorted(modules(ROOT)))
def test_every_module_imports_only_its_floor_or_lower(name: str):
    violations = _violations_by_file().get(str(modules(ROOT)[name].relative_to(ROOT)), [])
    assert violations == [], "\n".join(violations)


def test_no_import_cycles():
    assert import_cycles(ROOT) == [], "modules that import each other (directly or not): move the shared part down"


def test_protocol_summaries_are_below_both_runtimes():
    """A protocol's ``summarize`` (a "module:function" name both runtimes import at the end of a run) lives below
    them: on the history floor or lower."""
    from seedance.models.protocols.registry import get, names

    for protocol in names():
        target = get(protocol).summarize
        if target:
            level, floor = floor_of(target.split(":")[0])
            assert level <= floor_of("seedance.history")[0], f"{protocol}: summarize {target} is on floor {floor}"


def test_the_floor_checker_catches_upward_imports_and_cycles(tmp_path: Path):
    pkg = tmp_path / "seedance"
    for sub in ("models", "sim", "real", "analysis"):
        (pkg / sub).mkdir(parents=True)
        (pkg / sub / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "models" / "a.py").write_text("def f():\n    from seedance.analysis import b\n")
    (pkg / "analysis" / "b.py").write_text("from seedance.models.a import f\n")
    (pkg / "sim" / "c.py").write_text("import seedance.real.d\n")
    (pkg / "real" / "d.py").write_text("")
    (pkg / "analysis" / "e.py").write_text("if True:\n    from ..sim import c\n")
    assert floor_violations(tmp_path) == [
        "seedance/analysis/e.py:2: seedance.analysis.e (floor analysis) imports seedance.sim.c (a floor analysis "
        "may not import: sim)",
        "seedance/models/a.py:2: seedance.models.a (floor models) imports seedance.analysis.b (a higher floor: "
        "analysis)",
        "seedance/sim/c.py:1: seedance.sim.c (floor sim) imports seedance.real.d (a peer floor: real)",
    ]
    assert import_cycles(tmp_path) == [["seedance.analysis.b", "seedance.models.a"]]


# --- sizes: a module fits one sitting, a function one screen --------------------------------------------------------
MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 80
# What could not be split, each with its ceiling (it may shrink, never grow) and why. Empty: every module and function
# of seedance/ is within the limits; a new entry needs a reason a reviewer accepts.
SIZE_ALLOWED: dict[str, tuple[int, str]] = {}


def module_sizes(root: Path) -> dict[str, int]:
    """Lines of every module of the package, by path relative to ``root``."""
    return {str(p.relative_to(root)): len(p.read_text().splitlines()) for p in sorted((root / "seedance").rglob("*.py"))}


def function_sizes(root: Path) -> dict[str, int]:
    """Lines of every function and method (decorators excluded, nested functions counted in their parent too), as
    ``path:line name``."""
    found = {}
    for p in sorted((root / "seedance").rglob("*.py")):
        tree = ast.parse(p.read_text(), filename=str(p))
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                found[f"{p.relative_to(root)}:{node.lineno} {node.name}"] = node.end_lineno - node.lineno + 1
    return found


def size_violations(root: Path, allowed: dict[str, tuple[int, str]]) -> list[str]:
    """Modules over :data:`MAX_MODULE_LINES` and functions over :data:`MAX_FUNCTION_LINES` lines, unless allowed
    (a module by its path, a function as ``path name``) and within the allowed ceiling."""
    found = []
    for path, lines in module_sizes(root).items():
        ceiling = allowed.get(path, (MAX_MODULE_LINES, ""))[0]
        if lines > ceiling:
            found.append(f"{path}: {lines} lines (at most {ceiling}): split it by responsibility")
    for where, lines in function_sizes(root).items():
        path, name = where.split(":", 1)[0], where.split(" ", 1)[1]
        ceiling = allowed.get(f"{path} {name}", (MAX_FUNCTION_LINES, ""))[0]
        if lines > ceiling:
            found.append(f"{where}: {lines} lines (at most {ceiling}): split it into named steps")
    return found


def test_modules_and_functions_fit_their_limits():
    assert size_violations(ROOT, SIZE_ALLOWED) == []


def test_every_allowed_size_is_still_needed_and_has_a_reason():
    """An allow-list entry names an existing module or function over the limit, with a reason: one that fits again
    leaves the list, so the ceiling cannot hide growth elsewhere."""
    modules_now = module_sizes(ROOT)
    functions_now = {f"{w.split(':', 1)[0]} {w.split(' ', 1)[1]}": n for w, n in function_sizes(ROOT).items()}
    for name, (ceiling, reason) in SIZE_ALLOWED.items():
        assert reason.strip(), f"{name}: give the reason it cannot be split"
        limit = MAX_MODULE_LINES if name in modules_now else MAX_FUNCTION_LINES
        size = modules_now.get(name, functions_now.get(name))
        assert size is not None, f"{name}: no such module or function (remove it from SIZE_ALLOWED)"
        assert size > limit, f"{name}: {size} lines fits the limit of {limit} now (remove it from SIZE_ALLOWED)"
        assert ceiling >= size, name


def test_the_size_checker_catches_long_modules_and_functions(tmp_path: Path):
    pkg = tmp_path / "seedance"
    pkg.mkdir()
    body = "\n".join(f"    x{i} = {i}" for i in range(81))
    (pkg / "long.py").write_text("def f():\n" + body + "\n" + "\n" * 430)
    (pkg / "ok.py").write_text("def g():\n    return 1\n")
    assert size_violations(tmp_path, {}) == [
        "seedance/long.py: 512 lines (at most 500): split it by responsibility",
        "seedance/long.py:1 f: 82 lines (at most 80): split it into named steps",
    ]
    assert size_violations(tmp_path, {"seedance/long.py": (520, "r"), "seedance/long.py f": (82, "r")}) == []
    assert len(size_violations(tmp_path, {"seedance/long.py": (510, "r"), "seedance/long.py f": (81, "r")})) == 2
