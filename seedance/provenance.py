"""What every result records about how it was made: seed, spec hash, git commit, package versions.

Kept apart from ``models`` because it reads the outside world (git, installed packages).
"""

from __future__ import annotations

import hashlib
import json
import platform
import shlex
import subprocess
import sys
from functools import lru_cache
from importlib import metadata
from pathlib import Path
from typing import Any

_PACKAGES = ("seedance", "numpy", "scipy", "networkx", "simpy", "torch", "pandas", "seaborn", "matplotlib")


def spec_hash(spec: Any) -> str:
    """sha256 of the canonical JSON form of ``spec`` (sorted keys, no whitespace)."""
    canonical = json.dumps(spec, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()


@lru_cache(maxsize=1)
def git_commit() -> str:
    """The commit of the seedance checkout (``+dirty`` when it has changes), or ``unknown``."""
    root = Path(__file__).resolve().parent.parent
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=5, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=root, capture_output=True, text=True, timeout=5, check=True,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return commit + ("+dirty" if dirty else "")


@lru_cache(maxsize=1)
def versions() -> dict[str, str]:
    """Versions of Python and of the packages a result depends on."""
    found = {"python": platform.python_version()}
    for name in _PACKAGES:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = "absent"
    return found


def reproduce_command(argv: list[str] | None = None) -> str:
    """The one-line shell command that reruns this process (``seedance ...``)."""
    args = list(sys.argv[1:] if argv is None else argv)
    return "seedance " + shlex.join(args) if args else "seedance"


def run_metadata(*, seed: int | None, spec: Any, argv: list[str] | None = None) -> dict[str, Any]:
    """The evidence block stored beside every result."""
    return {
        "seed": seed,
        "spec_sha256": spec_hash(spec),
        "git_commit": git_commit(),
        "versions": versions(),
        "reproduce": reproduce_command(argv),
    }
