"""benchmarks/sim_scale.py's arithmetic and its refusals (behaviour only: the benchmark measures, tests do not)."""

from __future__ import annotations

import importlib.util
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "sim_scale.py"


@pytest.fixture(scope="module")
def sim_scale():
    sys.path.insert(0, str(SCRIPT.parent))  # its sibling _timing
    try:
        spec = importlib.util.spec_from_file_location("sim_scale_under_test", SCRIPT)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.path.remove(str(SCRIPT.parent))


def test_marginal_cost_is_the_difference_of_two_runs(sim_scale) -> None:
    full = {"cpu_s": 3.0, "instructions": 9_000, "messages_delivered": 300, "ops_ok": 30}
    half = {"cpu_s": 1.0, "instructions": 3_000, "messages_delivered": 100, "ops_ok": 10}
    assert sim_scale._marginal(full, half) == pytest.approx(2.0 / 200 * 1e6)  # µs per message
    assert sim_scale._marginal(full, half, "ops_ok", of="instructions") == pytest.approx(6_000 / 20)
    assert sim_scale._marginal(full, {**half, "messages_delivered": 300}) is None  # nothing between them
    assert sim_scale._marginal(full, {"error": "timed out"}) is None


def test_slope_of_a_power_law_and_of_too_few_points(sim_scale) -> None:
    rows = [{"nodes": n, "x": 5.0 * n ** 1.25} for n in (8, 32, 64, 128)]
    assert sim_scale.slope(rows, "x") == pytest.approx(1.25)  # fitted from 32 up: the 8-node point left out
    assert sim_scale.slope(rows[:2], "x") is None  # one point from 32 up
    assert sim_scale.slope(rows + [{"nodes": 256, "error": "timed out"}], "x") == pytest.approx(1.25)


def test_slopes_of_messages_and_of_cost_per_message_add_up(sim_scale) -> None:
    rows = [{"protocol": "p", "nodes": n, "messages_per_op": 2.0 * n, "us_per_message": 10 * n ** 0.2,
             "cpu_us_per_op": 2.0 * n * 10 * n ** 0.2, "cpu_us_per_op_marginal": None} for n in (32, 64, 128)]
    fit = sim_scale._fits(rows, 32)
    assert fit["cost_per_op_slope"] == pytest.approx(fit["messages_per_op_slope"] + fit["us_per_message_slope"])
    assert math.isclose(fit["messages_per_op_slope"], 1.0) and "marginal_instructions_per_op_slope" not in fit


def test_cachegrinds_count_is_read_from_its_summary(sim_scale) -> None:
    stderr = "==123== \n==123== I   refs:      14,579,391,202\n"
    assert int(sim_scale._I_REFS.search(stderr).group(1).replace(",", "")) == 14_579_391_202


def _run(*args: str, path: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, check=False,
                          env={**os.environ, "PATH": path}, timeout=120)


def test_instructions_without_valgrind_is_refused_naming_it(tmp_path) -> None:
    done = _run("--instructions", "--quick", "--out", str(tmp_path), path=str(tmp_path))  # a PATH without valgrind
    assert done.returncode == 2 and "--instructions: valgrind is not on PATH" in done.stderr
    assert not list(tmp_path.iterdir())  # nothing written


def test_instructions_with_repeats_is_refused(tmp_path) -> None:
    done = _run("--instructions", "--repeats", "3", "--out", str(tmp_path), path=os.environ.get("PATH", ""))
    assert done.returncode == 2
    assert ("valid: --repeats 1" in done.stderr) or ("valgrind is not on PATH" in done.stderr)


def test_nodes_outside_the_lists_are_refused_naming_the_valid_ones(tmp_path) -> None:
    done = _run("--nodes", "8,100", "--out", str(tmp_path), path=os.environ.get("PATH", ""))
    assert done.returncode == 2 and "--nodes" in done.stderr and "valid: a comma-separated subset of 8, 32" in done.stderr


def test_nodes_selects_points(sim_scale) -> None:
    args = sim_scale.argparse.Namespace(protocols="raft,causal", quick=False, monitor=False, instructions=False,
                                        nodes=(32, 256))
    assert [(p["protocol"], p["nodes"]) for p in sim_scale._points(args)] == [("raft", 32), ("causal", 32),
                                                                             ("causal", 256)]
