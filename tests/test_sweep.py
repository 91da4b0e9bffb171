"""Sweeps (issue H items 1-3): spec validation, expansion, resume, failures and timeouts, the Parquet rows.

The runners defined here are module-level functions, so the sweep's worker processes import them by name
(``test_sweep:echo``) as they would any plug-in runner.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from seedance.errors import SpecError
from seedance.sweep import load_results, load_spec, points, register_runner, run_sweep, runs
from seedance.sweep.store import RESULTS, read_point

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent


# ------------------------------------------------------------------------------------------------ test runners
def echo(params: dict, seed: int) -> dict:
    """A cheap deterministic runner: optionally sleeps, raises or hangs on request."""
    if params.get("crash"):
        os._exit(7)  # a worker that dies under the run (segfault, OOM killer)
    if params.get("fail"):
        raise ValueError(f"asked to fail at x={params['x']}")
    time.sleep(float(params.get("sleep_s", 0.0)))
    return {"double": 2 * params["x"], "seeded": params["x"] + 1000 * seed, "label": f"x{params['x']}",
            "even": params["x"] % 2 == 0}


def check_echo(params: dict) -> None:
    unknown = set(params) - {"x", "fail", "crash", "sleep_s", "y", "z"}
    if unknown:
        raise SpecError(f"params.{sorted(unknown)[0]}", "unknown parameter of runner echo",
                        "valid: x, fail, sleep_s, y, z")


register_runner("echo", echo, validate=check_echo)


def spec_doc(**over) -> dict:
    doc = {"name": "t", "runner": "echo", "axes": {"grid": {"x": [1, 2, 3]}}, "repetitions": 2, "timeout_s": 30}
    doc.update(over)
    return doc


# ------------------------------------------------------------------------------------------------- validation
@pytest.mark.parametrize("doc, field, valid", [
    (spec_doc(nmae="t"), "nmae", "valid fields: name, plugins, runner"),
    (spec_doc(runner="nope"), "runner", "valid: cost, echo, experiment"),
    (spec_doc(name="bad name!"), "name", "letters, digits"),
    (spec_doc(axes={"grid": {"x": [1]}, "zip": {"y": [1, 2], "z": [1]}}), "axes.zip", None),
    (spec_doc(axes={"gird": {"x": [1]}}), "axes.gird", "valid fields: grid, zip, random"),
    (spec_doc(axes={"random": {"samples": 2, "params": {"x": {"normal": [0, 1]}}}}), "axes.random.params.x",
     "{uniform: [lo, hi]}, {loguniform: [lo, hi]}, {choice: [...]}, {randint: [lo, hi]}"),
    (spec_doc(axes={"random": {"samples": 2, "params": {"x": {"loguniform": [0, 1]}}}}),
     "axes.random.params.x.loguniform", None),
    (spec_doc(axes={"random": {"samples": 2, "params": {"x": {"randint": [0, 1.5]}}}}),
     "axes.random.params.x.randint", None),
    (spec_doc(axes={"grid": {"x": []}}), "axes.grid.x", "at least one value"),
    ("name: t\nrunner: echo\nname: u\n", None, "duplicate key"),
    ("name: t\nrunner: echo\naxes: {grid: {x: [1, !!timestamp 2020-01-01]}}\n", "s.yaml", "!!timestamp"),
    ("[1, 2]", "s.yaml", "a YAML mapping"),
    (spec_doc(axes={"grid": {"x": [1, {2, 3}]}}), "axes.grid.x[1]", "plain values"),
    (spec_doc(axes={"random": {"samples": 0, "params": {"x": {"uniform": [0, 1]}}}}), "axes.random.samples", None),
    (spec_doc(seeds=[1, 2]), "spec", None),
    (spec_doc(fixed={"x": 1}), "spec", None),
    (spec_doc(timeout_s=-1), "timeout_s", None),
    (spec_doc(fixed={"w": 1}, axes={"grid": {"x": [1]}}), "params.w", "valid: x, fail"),
    ({"name": "s", "runner": "sim", "fixed": {"nodez": 3}}, "params.nodez", "valid: protocol, nodes"),
    ({"name": "s", "runner": "sim", "axes": {"grid": {"nodes": [3, 2000]}}}, "params.nodes", "an integer in [1, 1024]"),
    ({"name": "s", "runner": "sim", "fixed": {"workload": "bogus"}}, "params.workload", "closed, open, frame"),
    ({"name": "s", "runner": "sim", "fixed": {"set": {"bogus": 1}}}, "params.set.bogus", "heartbeat_s"),
    ({"name": "s", "runner": "sim", "fixed": {"extra": {"workload": {"think_s": -1}}}},
     "params.extra.workload.think_s", None),
    ({"name": "s", "runner": "cost", "fixed": {"topology": "dgx-h100"}}, "params.topology", "hgx-h100"),
    ({"name": "s", "runner": "train", "fixed": {"scenario": "F9"}}, "params.scenario", "F1"),
    ({"name": "s", "runner": "train", "fixed": {"runtime": "real", "scenario": "F5"}}, "params.scenario", None),
    ({"name": "s", "runner": "real", "fixed": {"nemesis": "skew"}}, "params.nemesis", "partition"),
    ({"name": "s", "runner": "sim", "fixed": {"set": {"heartbeat_s": -1}}}, "params.set.heartbeat_s", None),
    ({"name": "s", "runner": "cost", "fixed": {"collective": "allreduc"}}, "params.collective", "allreduce"),
    ({"name": "s", "runner": "experiment", "fixed": {"name": "nope"}}, "params.name", "protocols"),
])
def test_spec_errors_name_the_field(doc, field, valid, tmp_path):
    if isinstance(doc, str):  # YAML text
        (tmp_path / "s.yaml").write_text(doc)
        doc = tmp_path / "s.yaml"
    with pytest.raises(SpecError) as info:
        load_spec(doc)
    assert field is None or info.value.field.endswith(field), str(info.value)
    assert "\n" not in str(info.value)
    if valid:
        assert valid in str(info.value)


def test_a_plain_date_in_a_spec_stays_a_string(tmp_path):
    # YAML 1.2: 2020-01-01 is a string (YAML 1.1's implicit timestamp would have made it a datetime, which no runner
    # takes and no results file stores); an explicit !!timestamp is refused (above)
    (tmp_path / "s.yaml").write_text("name: t\nrunner: echo\naxes: {grid: {x: [1, 2020-01-01]}}\n")
    assert [p["x"] for p in points(load_spec(tmp_path / "s.yaml"))] == [1, "2020-01-01"]


def test_cli_bad_spec_is_one_line_and_exit_2(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: t\nrunner: sim\nfixed: {protocol: raft, nodez: 3}\n")
    proc = subprocess.run([sys.executable, "-m", "seedance", "sweep", str(bad), "--out", str(tmp_path / "o")],
                          capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "params.nodez" in proc.stderr
    assert not (tmp_path / "o").exists()


# -------------------------------------------------------------------------------------------------- expansion
def test_grid_zip_random_product_and_deterministic_random():
    doc = spec_doc(axes={"grid": {"x": [1, 2]}, "zip": {"y": [10, 20, 30], "z": ["a", "b", "c"]},
                         "random": {"samples": 4, "seed": 7, "params": {
                             "u": {"uniform": [0, 1]}, "l": {"loguniform": [1e-4, 1e-1]},
                             "c": {"choice": ["p", "q"]}, "r": {"randint": [3, 5]}}}})
    # u, l, c, r are not echo's parameters: check expansion without the runner's validation
    spec = load_spec(doc, check_points=False)
    pts = points(spec)
    assert len(pts) == 2 * 3 * 4
    assert [(p["x"], p["y"], p["z"]) for p in pts[:12:4]] == [(1, 10, "a"), (1, 20, "b"), (1, 30, "c")]
    assert pts[0]["x"] == 1 and pts[12]["x"] == 2
    draws = [(p["u"], p["l"], p["c"], p["r"]) for p in pts[:4]]
    assert all(0 <= u <= 1 and 1e-4 <= l <= 1e-1 and c in ("p", "q") and 3 <= r <= 5 for u, l, c, r in draws)
    assert len({d for d in draws}) == 4
    assert points(load_spec(doc, check_points=False)) == pts  # same seed, same points
    doc["axes"]["random"]["seed"] = 8
    assert points(load_spec(doc, check_points=False))[:4] != pts[:4]
    assert len(runs(spec)) == 24 * 2 and {r.seed for r in runs(spec)} == {0, 1}
    assert len({r.key for r in runs(spec)}) == 48


def test_seeds_list_and_yaml_file(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text("name: t\nrunner: echo\naxes:\n  grid: {x: [1, 2]}\nseeds: [5, 9]\n")
    spec = load_spec(path)
    assert spec.seed_list == [5, 9] and [r.seed for r in runs(spec)] == [5, 9, 5, 9]


# ------------------------------------------------------------------------------------- runs, resume, failures
def test_run_resume_and_columns(tmp_path):
    summary = run_sweep(spec_doc(), tmp_path, workers=2, progress=False)
    assert (summary.points_total, summary.points_run, summary.points_skipped, summary.points_failed) == (6, 6, 0, 0)
    df = load_results(summary.results)
    assert len(df) == 6 and set(df["status"]) == {"ok"}
    assert list(df["double"]) == [2, 2, 4, 4, 6, 6] and list(df["seed"]) == [0, 1] * 3
    assert list(df["seeded"]) == [1, 1001, 2, 1002, 3, 1003]
    for column in ("x", "double", "label", "even", "seed", "point", "spec_hash", "git_commit", "version.numpy",
                   "finished_at", "wall_s", "cpu_s", "status", "error", "reproduce", "runner", "sweep"):
        assert column in df.columns, column
    assert df["point"].is_unique and df["spec_hash"].nunique() == 1
    assert df["reproduce"].iloc[0].startswith("seedance sweep ") and "--only" in df["reproduce"].iloc[0]
    again = run_sweep(spec_doc(), tmp_path, workers=2, progress=False)
    assert (again.points_run, again.points_skipped) == (0, 6)
    bigger = run_sweep(spec_doc(axes={"grid": {"x": [1, 2, 3, 4]}}), tmp_path, progress=False)
    assert (bigger.points_total, bigger.points_run, bigger.points_skipped) == (8, 2, 6)
    assert len(load_results(tmp_path)) == 8


def test_failure_crash_and_timeout_are_recorded_and_retried(tmp_path):
    doc = spec_doc(axes={"zip": {"x": [1, 2, 3, 4, 5], "fail": [False, True, False, False, False],
                                 "crash": [False, False, False, True, False],
                                 "sleep_s": [0.0, 0.0, 60.0, 0.0, 0.0]}}, repetitions=1, timeout_s=3)
    start = time.monotonic()
    summary = run_sweep(doc, tmp_path, workers=1, progress=False)
    assert time.monotonic() - start < 45  # the hung run (60 s) was killed at its timeout, not waited for
    assert (summary.points_run, summary.points_failed) == (5, 3)
    df = load_results(tmp_path).set_index("x")
    assert list(df["status"]) == ["ok", "failed", "failed", "failed", "ok"]
    assert "ValueError: asked to fail at x=2" in df.loc[2, "error"]
    assert "timed out after 3 s (the run)" in df.loc[3, "error"]
    assert "worker process died during the run (exit status 7)" in df.loc[4, "error"]
    assert df.loc[5, "double"] == 10  # the run after the crashed one ran on a fresh worker
    assert df.loc[[2, 3, 4], "double"].isna().all()
    record = read_point(tmp_path / "points" / f"{df.loc[2, 'point']}.json")
    assert "Traceback" in record["traceback"] and "--only" in record["reproduce"]
    # the reproduce command reruns just that run (it fails again: exit 1, one JSON object)
    command = df.loc[2, "reproduce"].split() + ["--json"]
    env = {**os.environ, "PYTHONPATH": str(TESTS)}
    proc = subprocess.run([sys.executable, "-m", "seedance", *command[1:]], capture_output=True, text=True,
                          cwd=ROOT, timeout=120, env=env)
    assert proc.returncode == 1, proc.stderr
    assert json.loads(proc.stdout) == {"points_total": 1, "points_run": 1, "points_skipped": 0, "points_failed": 1,
                                       "results": str(tmp_path / RESULTS)}
    assert len(load_results(tmp_path)) == 5  # the dataset still has every run of the spec
    # a rerun of the sweep retries the failed runs only
    again = run_sweep(doc, tmp_path, progress=False)
    assert (again.points_run, again.points_skipped, again.points_failed) == (3, 2, 3)
    assert len(load_results(tmp_path)) == 5


def test_kill_9_of_the_driver_then_rerun_completes_the_rest(tmp_path):
    psutil = pytest.importorskip("psutil")
    spec = tmp_path / "spec.yaml"
    spec.write_text("name: killed\nrunner: test_sweep:echo\naxes:\n  grid:\n    x: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]\n"
                    "fixed: {sleep_s: 0.4}\nrepetitions: 1\ntimeout_s: 60\n")
    out = tmp_path / "out"
    env = {**os.environ, "PYTHONPATH": str(TESTS)}
    args = [sys.executable, "-m", "seedance", "sweep", str(spec), "--out", str(out), "--json", "--no-progress"]
    driver = subprocess.Popen(args, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if len(list((out / "points").glob("*.json"))) >= 3 if (out / "points").is_dir() else False:
            break
        time.sleep(0.05)
    children = psutil.Process(driver.pid).children(recursive=True)
    driver.kill()
    driver.communicate(timeout=30)
    done_before = len(list((out / "points").glob("*.json")))
    assert 3 <= done_before < 10
    assert not (out / RESULTS).exists()  # the dataset is built at the end: the driver never got there
    gone, alive = psutil.wait_procs(children, timeout=10)
    assert not alive, f"worker processes outlived the killed driver: {alive}"
    proc = subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    assert summary["points_total"] == 10 and summary["points_failed"] == 0
    assert summary["points_skipped"] == done_before and summary["points_run"] == 10 - done_before
    df = load_results(out)
    assert len(df) == 10 and sorted(df["x"]) == list(range(1, 11)) and df["point"].is_unique
    assert set(df["status"]) == {"ok"} and list(df.sort_values("x")["double"]) == [2 * x for x in range(1, 11)]
    assert all(read_point(p) is not None for p in (out / "points").glob("*.json"))  # none torn


def test_one_driver_per_directory(tmp_path):
    from seedance.sweep.store import DirectoryLock

    with DirectoryLock(tmp_path):
        with pytest.raises(SpecError, match=f"another sweep \\(pid {os.getpid()}\\) is running"):
            run_sweep(spec_doc(), tmp_path, progress=False)
    assert run_sweep(spec_doc(), tmp_path, progress=False).points_run == 6  # released on exit


def test_cli_json_is_one_object(tmp_path):
    spec = ROOT / "examples" / "sweeps" / "cost-allreduce.yaml"
    proc = subprocess.run([sys.executable, "-m", "seedance", "sweep", str(spec), "--out", str(tmp_path), "--json",
                           "--workers", "2"], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    assert set(summary) == {"points_total", "points_run", "points_skipped", "points_failed", "results"}
    assert summary["points_total"] == summary["points_run"] == 24
    df = load_results(summary["results"])
    h100 = df[(df["topology"] == "hgx-h100") & (df["size"] == "1GiB")].sort_values("nodes")
    assert (h100["time_s"].diff().dropna() >= 0).all()  # more servers, not faster for one allreduce
    assert (df["busbw_GBps"] > 0).all()


def test_dataset_column_types_and_bad_paths(tmp_path):
    from seedance.sweep.store import build_dataset, write_point

    base = {"sweep": "t", "runner": "echo", "status": "ok", "seed": 0, "versions": {"numpy": "2"}}
    write_point(tmp_path, {**base, "point": "a", "params": {"x": 1, "set": {"k": 0.5}, "mix": [0.5, 0.5]},
                           "metrics": {"linearizable": True, "n": 3, "nan": float("nan"), "x": 9}})
    write_point(tmp_path, {**base, "point": "b", "params": {"x": 2.5, "set": {"k": 1}, "mix": [1, 0]},
                           "metrics": {"linearizable": "unknown", "n": 4.5, "nan": 1.0, "x": 9}})
    df = load_results(build_dataset(tmp_path, ["a", "b"]))
    assert list(df["x"]) == [1.0, 2.5] and list(df["set.k"]) == [0.5, 1.0] and list(df["mix"]) == ["[0.5,0.5]", "[1,0]"]
    assert list(df["linearizable"]) == ["true", "unknown"]  # mixed bool and text: stored as text
    assert list(df["n"]) == [3.0, 4.5] and df["nan"].isna().tolist() == [True, False]
    assert list(df["metric.x"]) == [9, 9] and list(df["version.numpy"]) == ["2", "2"]
    with pytest.raises(SpecError, match="does not exist"):
        load_results(tmp_path / "nowhere")


def test_unreachable_scheduler_is_one_error(tmp_path):
    from seedance.sweep.execute import run_dask

    with pytest.raises(SpecError, match="--scheduler: cannot connect to tcp://127.0.0.1:9"):
        run_dask([{"target": "test_sweep:echo"}], scheduler="tcp://127.0.0.1:9", timeout_s=5,
                 on_result=lambda task, result: None, connect_timeout_s=2)
    with pytest.raises(SpecError, match="tcp://HOST:PORT"):
        run_sweep(spec_doc(), tmp_path, scheduler="127.0.0.1:8786", progress=False)
