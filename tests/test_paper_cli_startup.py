"""The CLI starts without its heavy dependencies (issue H item 7): they load inside the commands that need them.

Behaviour, not time (the time is measured by ``benchmarks/cli_startup.py``): in a fresh interpreter, importing the
CLI, printing its help and listing the presets leave numpy, pandas, torch and the other heavy packages unloaded,
while a command that needs them still works.
"""

from __future__ import annotations

import json
import subprocess
import sys

HEAVY = ("numpy", "scipy", "pandas", "matplotlib", "seaborn", "torch", "simpy", "networkx", "pydantic", "pyarrow",
         "dask")


def _loaded_after(code: str) -> tuple[list[str], str]:
    probe = (
        "import contextlib, io, json, sys\n"
        "buf = io.StringIO()\n"
        f"with contextlib.redirect_stdout(buf):\n    {code}\n"
        f"print(json.dumps({{'heavy': [m for m in {HEAVY!r} if m in sys.modules], 'out': buf.getvalue()}}))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], check=True, capture_output=True, text=True, timeout=120)
    result = json.loads(done.stdout.strip().splitlines()[-1])
    return result["heavy"], result["out"]


def test_import_loads_no_heavy_package() -> None:
    heavy, _ = _loaded_after("import seedance.cli")
    assert heavy == []


def test_help_and_topology_list_load_no_heavy_package() -> None:
    heavy, out = _loaded_after("from seedance.cli import main; main(['--help'])")
    assert heavy == []
    for name in ("cost", "report", "sim", "real", "topology", "experiment", "figure", "check"):
        assert name in out
    heavy, out = _loaded_after("from seedance.cli import main; main(['topology', 'list', '--json'])")
    assert heavy == []
    assert json.loads(out)["presets"] == ["dgx-a100", "hgx-h100", "pcie-8gpu", "mixed"]


def test_a_command_that_needs_numpy_still_loads_it() -> None:
    heavy, out = _loaded_after(
        "from seedance.cli import main; main(['cost', 'allreduce', '--topology', 'dgx-a100', '--size', '1MiB', "
        "'--json'])")
    assert "numpy" in heavy
    assert json.loads(out)["busbw_GBps"] > 0
