"""Every paper spec is a plain sweep: ``seedance sweep paper/specs/X.yaml [--size quick|full]`` dry-runs and runs
it (runners found by name from the lazy registry, in a fresh process), a copied spec with one axis edited runs
its new points, a dry run lists the runs without heavy imports, and bad input exits 2 naming what is valid."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from seedance.paper import suite

ROOT = Path(__file__).resolve().parent.parent
SPECS = ROOT / "paper" / "specs"
HEAVY = ("torch", "simpy", "numpy", "pandas", "pyarrow", "matplotlib", "distributed", "scipy", "seedance.sim",
         "seedance.real", "seedance.analysis")  # the runner's module is imported (light) to prove it exists


def seedance(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-m", "seedance.cli", *args], capture_output=True, text=True,
                          timeout=timeout, env=env, cwd=ROOT)


def test_every_paper_spec_dry_runs_in_both_sizes_as_the_suite_runs_it():
    from seedance.sweep.expand import runs

    for name in suite.NAMES:
        for size in ("quick", "full"):
            done = seedance("sweep", str(SPECS / f"{name}.yaml"), "--size", size, "--dry-run", "--json")
            assert done.returncode == 0, done.stderr
            plan = json.loads(done.stdout)
            expected = runs(suite.load_item_spec(name, size).sweep)
            assert plan["runs"] == len(expected) == len(plan["run_list"]) and plan["size"] == size
            assert [r["key"] for r in plan["run_list"]] == [r.key for r in expected]
    full = json.loads(seedance("sweep", str(SPECS / "protocols.yaml"), "--dry-run", "--json").stdout)
    assert full["runs"] == 360 and full["points"] == 72 and full["seeds"] == [0, 1, 2, 3, 4]


def test_a_dry_run_imports_no_runner_and_no_heavy_package():
    probe = ("import json, sys, time, contextlib, io\n"
             "t = time.perf_counter()\n"
             "from seedance.cli import main\n"
             "buf = io.StringIO()\n"
             "with contextlib.redirect_stdout(buf):\n"
             "    try:\n"
             f"        main(['sweep', {str(SPECS / 'protocols.yaml')!r}, '--dry-run', '--json'])\n"
             "    except SystemExit as e:\n"
             "        assert not e.code, e.code\n"
             "wall = time.perf_counter() - t\n"
             f"print(json.dumps({{'heavy': [m for m in {HEAVY!r} if m in sys.modules], 'wall': wall, "
             "'runs': json.loads(buf.getvalue())['runs']}))\n")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["heavy"] == [] and result["runs"] == 360
    print(f"dry run of protocols.yaml in-process: {result['wall']:.2f} s")  # < 1 s here, quiet or loaded


def test_a_copied_spec_with_one_axis_edited_runs_its_new_points_and_resumes(tmp_path):
    doc = yaml.safe_load((SPECS / "nccl.yaml").read_text())
    doc["axes"]["grid"]["size"] = [1024, 1048576, 3]  # 3: no published row (present: false)
    doc["quick"]["axes"]["grid"]["curve"] = ["h100-p5-2x8-allreduce"]
    mine = tmp_path / "my-nccl.yaml"
    mine.write_text(yaml.safe_dump(doc))
    plan = json.loads(seedance("sweep", str(mine), "--size", "quick", "--dry-run", "--json").stdout)
    assert plan["runs"] == 6 and plan["axes"]["size"] == [1024, 1048576, 3]
    assert {(r["params"]["curve"], r["params"]["size"]) for r in plan["run_list"]} == \
        {("h100-p5-2x8-allreduce", s) for s in (1024, 1048576, 3)}
    out = tmp_path / "out"
    first = seedance("sweep", str(mine), "--size", "quick", "--out", str(out), "--json", "--workers", "2")
    assert first.returncode == 0, first.stderr
    assert json.loads(first.stdout)["points_run"] == 6
    import pandas as pd

    rows = pd.read_parquet(out / "results.parquet")
    assert set(rows["size"]) == {1024, 1048576, 3} and rows["status"].eq("ok").all()
    assert set(rows.loc[rows["size"] == 3, "present"]) == {False} and rows["ratio"].dropna().gt(0).all()
    again = json.loads(seedance("sweep", str(mine), "--size", "quick", "--out", str(out), "--json").stdout)
    assert (again["points_run"], again["points_skipped"]) == (0, 6)
    # now the dry run knows what is done and estimates the rest from the finished runs' wall time
    doc["axes"]["grid"]["size"] = [1024, 1048576, 3, 2048]
    mine.write_text(yaml.safe_dump(doc))
    plan = json.loads(seedance("sweep", str(mine), "--size", "quick", "--out", str(out), "--dry-run",
                               "--json").stdout)
    assert (plan["runs"], plan["done"], plan["pending"]) == (8, 6, 2)
    assert plan["estimate"]["per_run_s"] > 0 and plan["estimate"]["remaining_s"] >= 0
    human = seedance("sweep", str(mine), "--size", "quick", "--out", str(out), "--dry-run").stdout
    assert "8 runs = 8 points x 1 seeds" in human and human.count("(done)") == 6 and "size=2048" in human


@pytest.mark.parametrize("edit, args, field, valid", [
    ({"runner": "paper-pixle"}, (), "runner: unknown runner 'paper-pixle'", "paper-pixel"),
    ({"repetitons": 2}, (), "repetitons: unknown field", "valid fields: name"),
    ({"quick": {"repetitons": 2}}, (), "quick.repetitons: unknown field", "repetitions"),
    ({}, ("--size", "medium"), "'medium' is not one of", "'full', 'quick'"),
])
def test_bad_spec_key_runner_or_size_exits_2_naming_it(tmp_path, edit, args, field, valid):
    doc = {**yaml.safe_load((SPECS / "pixel.yaml").read_text()), **edit}
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(doc))
    for extra in (("--dry-run",), ("--out", str(tmp_path / "out"))):
        done = seedance("sweep", str(path), *args, *extra)
        assert done.returncode == 2 and field in done.stderr and valid in done.stderr, done.stderr
        assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr
    assert not (tmp_path / "out").exists()


def _imports(path: Path) -> list[str]:
    names = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names += [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
    return names


def test_nothing_below_the_cli_imports_it():
    package = ROOT / "seedance"
    found = [f"{p.relative_to(ROOT)} imports {name}" for p in package.rglob("*.py")
             if "cli" not in p.relative_to(package).parts[:1] and p.name != "__main__.py"
             for name in _imports(p) if name == "seedance.cli" or name.startswith("seedance.cli.")]
    assert found == []


def test_dry_run_answers_in_under_a_second_loosely():
    """Wall time of the whole command in a fresh interpreter (start-up included), best of three: loose (3 s) so a
    loaded machine does not fail it; the figure itself is printed."""
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        done = seedance("sweep", str(SPECS / "protocols.yaml"), "--dry-run", "--json")
        best = min(best, time.perf_counter() - start)
        assert done.returncode == 0
    print(f"seedance sweep paper/specs/protocols.yaml --dry-run --json: {best:.2f} s (best of 3)")
    assert best < 3.0


def test_a_dry_run_estimates_from_this_sweeps_runs_only_and_never_rounds_to_zero(tmp_path):
    """Real runs of the nccl item (each a few ms): the estimate keeps significant digits (not 0 s), and runs of
    other parameters under the same directory (the quick size's, under a full-size dry run) are not taken for an
    estimate of these."""
    from seedance.sweep import run_sweep
    from seedance.sweep.plan import describe, dry_run, seconds_text, significant

    doc = yaml.safe_load((SPECS / "nccl.yaml").read_text())
    doc["quick"] = {"axes": {"grid": {"curve": ["a100-1x8-allreduce"], "model": ["nccl"], "size": [8, 1024]}}}
    spec = tmp_path / "nccl.yaml"
    spec.write_text(yaml.safe_dump(doc))
    out = tmp_path / "out"
    run_sweep(suite.load_item_spec("nccl", "quick", tmp_path).sweep, out, workers=1, progress=False)
    doc["quick"]["axes"]["grid"]["size"] = [8, 1024, 2048, 4096]  # two runs done, two pending
    spec.write_text(yaml.safe_dump(doc))
    plan = dry_run(spec, size="quick", out=out)
    assert (plan["done"], plan["pending"]) == (2, 2)
    est = plan["estimate"]
    assert est["per_run_s"] > 0 and est["remaining_s"] > 0 and "2 finished run(s) of this sweep" in est["basis"]
    assert "estimated 0 s" not in "\n".join(describe(plan))
    assert significant(4.2e-5) == 4.2e-5 and significant(1234.5) == 1230.0  # digits kept, never rounded to 0
    assert seconds_text(4.2e-5) == "4.2e-05 s" and seconds_text(3.21) == "3.2 s" and seconds_text(0) == "0 s"
    doc["quick"]["axes"]["grid"]["size"] = [2048, 4096]  # none of these runs is done: their cost is unknown
    spec.write_text(yaml.safe_dump(doc))
    other = dry_run(spec, size="quick", out=out)["estimate"]
    assert other["remaining_s"] is None and "2 other finished paper-nccl run(s)" in other["basis"]
