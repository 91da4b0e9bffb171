"""The fault table (seedance.faults): one entry per fault, read by both runtimes; parsing; seeded draws."""

from __future__ import annotations

import json

import numpy as np
import pytest

from seedance import faults
from seedance.cli import main
from seedance.errors import SpecError


def test_every_fault_is_listed_once_with_a_description_and_runtimes():
    assert len(faults.NAMES) == len(set(faults.NAMES)) == len(faults.TABLE)
    for fault in faults.TABLE:
        assert fault.description and fault.runtimes and set(fault.runtimes) <= {faults.SIM, faults.REAL}
        assert all(v in faults.BY_NAME and not faults.BY_NAME[v].variants for v in fault.variants)


def test_each_runtime_has_an_applier_for_every_fault_it_claims():
    from seedance.real.nemesis import APPLIERS as REAL
    from seedance.sim.nemesis import APPLIERS as SIM

    for runtime, appliers in ((faults.SIM, SIM), (faults.REAL, REAL)):
        for name in faults.names(runtime):
            fault = faults.BY_NAME[name]
            concrete = fault.variants or (name,)
            assert all(v in appliers for v in concrete), (runtime, name)
    assert set(SIM) | set(REAL) <= set(faults.NAMES)


def test_every_parameter_is_drawn_as_described():
    rng = np.random.default_rng(3)
    for fault in faults.TABLE:
        for _ in range(20):
            name, params = faults.draw_params(fault.name, 5, rng, (0.1, 0.2))
            concrete = faults.BY_NAME[name]
            assert name in (fault.variants or (fault.name,))
            for param in concrete.params:
                assert param.describe().startswith(param.name)
                value = params[param.name]
                if param.kind == "uniform":
                    assert param.lo <= value <= param.hi
                elif param.kind == "nodes":
                    assert value and value == sorted(set(value)) and all(0 <= v < 5 for v in value)
                elif param.kind == "log-uniform-per-node":
                    assert value and all(param.lo <= r <= param.hi for r in value.values())


def test_schedules_are_a_function_of_the_seed_and_the_simulator_draws_from_the_table():
    from seedance.sim.nemesis import draw_schedule as sim_draw

    names = faults.names()
    a = faults.draw_schedule(names, num_nodes=5, faulty_end_s=2.0, rng=np.random.default_rng(5))
    b = sim_draw(names, num_nodes=5, faulty_end_s=2.0, rng=np.random.default_rng(5))
    assert a == b and a != faults.draw_schedule(names, num_nodes=5, faulty_end_s=2.0, rng=np.random.default_rng(6))
    assert {w.name for w in a} <= set(faults.NAMES) - {"partition"}


@pytest.mark.parametrize("text, problem", [
    ("crash,,crash", "empty fault name"), ("crash,crash", "given twice"), ("meteor", "unknown fault"),
    ("skew", "for the real runtime"),
])
def test_parse_rejects_bad_lists_naming_the_valid_faults(text, problem):
    with pytest.raises(SpecError, match=problem) as err:
        faults.parse(text, faults.REAL)
    assert "--nemesis" in str(err.value) and "\n" not in str(err.value)


def test_parse_accepts_none_and_lists():
    assert faults.parse("") == faults.parse("none") == ()
    assert faults.parse(" partition , pause") == ("partition", "pause")
    assert faults.parse("skew", faults.SIM) == ("skew",)


def test_sim_faults_prints_the_table(capsys):
    assert main(["sim", "faults", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["faults"] == list(faults.names(faults.SIM))
    rows = {row["name"]: row for row in doc["table"]}
    assert rows["pause"]["runtimes"] == ["sim", "real"] and rows["skew"]["runtimes"] == ["sim"]
    assert any("U[0.05, 0.3]" in p for p in rows["loss"]["params"])
    assert main(["sim", "faults"]) == 0
    text = capsys.readouterr().out
    assert all(name in text for name in faults.NAMES)


def test_the_table_module_is_plain_data_and_draws():
    """Both runtimes import it: no simpy, sockets, asyncio, processes, clocks or runtime imports."""
    import ast
    from pathlib import Path

    tree = ast.parse(Path(faults.__file__).read_text())
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            imported.add(node.module)
    assert imported <= {"__future__", "math", "collections.abc", "dataclasses", "typing", "numpy", "seedance.errors"}
