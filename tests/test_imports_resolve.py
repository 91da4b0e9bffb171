"""Every ``from seedance.x import name`` in the package names something that exists, inside functions too.

Imports inside functions run only on the paths that reach them (a GPU step, a cluster scheduler, a rarely used
command); a name moved or renamed elsewhere breaks them silently until such a path runs. This walks every module's
syntax tree and resolves each such import against the module it names.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import seedance

ROOT = Path(seedance.__file__).parent


def _imports() -> list[tuple[str, int, str, str]]:
    found = []
    for path in sorted(ROOT.rglob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        module = ".".join(path.relative_to(ROOT.parent).with_suffix("").parts)
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        for node in ast.walk(tree):
            if not isinstance(node, ast.ImportFrom):
                continue
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                target = f"{base}.{node.module}" if node.module else base
            else:
                target = node.module or ""
            if target.split(".")[0] != "seedance":
                continue
            for alias in node.names:
                if alias.name != "*":
                    found.append((str(path.relative_to(ROOT.parent)), node.lineno, target, alias.name))
    return found


def test_every_imported_name_exists():
    missing = []
    for where, line, target, name in _imports():
        module = importlib.import_module(target)
        if hasattr(module, name):
            continue
        try:
            importlib.import_module(f"{target}.{name}")
        except ModuleNotFoundError:
            missing.append(f"{where}:{line}: from {target} import {name}")
    assert not missing, "imports of names that do not exist:\n" + "\n".join(missing)
