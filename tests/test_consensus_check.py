"""make test-consensus / seedance real test-consensus / seedance real soak: inputs refused before any process,
the checks on synthetic histories, and real short runs (a pass, the F8 leak, the Prometheus endpoint scraped)."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from seedance.experiments import consensus_check as C
from seedance.cli import main

ROOT = Path(__file__).resolve().parents[1]
SEEDANCE = [sys.executable, "-m", "seedance"]


# ------------------------------------------------------------------------------------------ input validation
@pytest.mark.parametrize(("variable", "value"), [
    ("GPU_COUNT", "four"), ("GPU_COUNT", "0"), ("GPU_COUNT", "999"), ("TEST_DURATION", "5 parsecs"),
    ("TEST_DURATION", "1s"), ("TEST_DURATION", "100h"), ("CONSISTENCY_CHECK_LEVEL", "paranoid"),
    ("MEMCHECK_ENABLE", "maybe"), ("SCENARIO", "F9"), ("SCENARIO", "F5"), ("VARIANT", "broken"),
    ("NEMESIS", "crash,meteor"), ("METRICS_PORT", "70000"), ("COMMIT_EVERY", "0"), ("MEMCHECK_DRIFT_PCT", "-1"),
    ("SEED", "-3"),
])
def test_bad_variables_are_refused_naming_the_variable(variable: str, value: str, monkeypatch, capsys) -> None:
    for name in C.VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv(variable, value)
    assert main(["real", "test-consensus", "--from-env"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"seedance: error: {variable}: "), err
    assert len(err[0].split("; ")) >= 2  # "<variable>: <problem>; <what is allowed>"


def test_make_target_refuses_a_bad_variable_before_starting(tmp_path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in C.VARIABLES}
    start = time.monotonic()
    run = subprocess.run(["make", "-s", "-o", ".venv/.seedance-installed", "test-consensus",
                          "CONSISTENCY_CHECK_LEVEL=paranoid", f"OUT={tmp_path / 'r'}"],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode != 0
    assert "CONSISTENCY_CHECK_LEVEL: 'paranoid' is not allowed; one of basic, full" in run.stderr
    assert not (tmp_path / "r").exists()  # nothing started, nothing written
    assert time.monotonic() - start < 60


def test_cli_options_are_named_and_soak_flags_checked(capsys) -> None:
    assert main(["real", "test-consensus", "--duration", "10 minutes please"]) == 2
    assert capsys.readouterr().err.startswith("seedance: error: --duration: ")
    assert main(["real", "test-consensus", "--from-env", "--ranks", "2"]) == 2
    assert "--from-env: cannot be combined with --ranks" in capsys.readouterr().err
    for args, name in ((["--duration", "0s"], "--duration"), (["--duration", "1m", "--ranks", "x"], "--ranks"),
                       (["--duration", "1m", "--interval", "9h"], "--interval"),
                       (["--duration", "1m", "--metrics-port", "-1"], "--metrics-port"),
                       (["--duration", "1m", "--drift-threshold", "nan"], "--drift-threshold")):
        assert main(["real", "soak", *args]) == 2
        assert capsys.readouterr().err.startswith(f"seedance: error: {name}: ")


def test_durations_and_defaults() -> None:
    assert [C.parse_duration("D", x) for x in ("300s", "5m", "1h", "1.5h", "90", "2500ms")] == \
        [300.0, 300.0, 3600.0, 5400.0, 90.0, 2.5]
    opts = C.options_from({})
    assert (opts.ranks, opts.duration_s, opts.level, opts.memcheck, opts.scenario, opts.variant, opts.nemesis,
            opts.metrics_port) == (4, 300.0, "full", True, "", "fixed", ("crash", "pause", "partition"), 0)


# ------------------------------------------------------------------------------------- checks on histories
def _vote(epoch, step, digest, params, agree=True, view=(0, 1)):
    row = [epoch, step, digest, 0, 9]
    return {"epoch": epoch, "step": step, "view": list(view), "agree": agree, "true": [digest, 0], "params": params,
            "rows": [row, row]}


def _summary(**kw):
    base = {"false_convergence": 0, "false_alarms": 0, "false_offline": 0, "false_offline_retracted": 0,
            "offline_verdicts": 0, "leaked_handles": 0, "leak_alarms": 0, "split_views": 0, "finished": True,
            "param_l2_deviation": 0.0, "ranks_finished": 2}
    return {**base, **kw}


def test_checks_name_divergence_digest_splits_and_history_breaks() -> None:
    good = [{"node": n, "key": "vote", "value": _vote(0, 10, 5, [1.0, 2.0]), "time": 1.0} for n in (0, 1)]
    good += [{"node": n, "key": "commit", "value": {"epoch": 0, "step": 10, "digest": [5, 0]}, "time": 1.1}
             for n in (0, 1)]
    checks = C.check_run(good, _summary(), level="full", scenario="", variant="fixed", world=2)
    assert all(c["ok"] for c in checks), [c for c in checks if not c["ok"]]
    # diverged replicas at a vote (an alarm), then a commit without an agreeing vote and a second digest of step 10
    bad = good + [{"node": 0, "key": "vote", "value": _vote(1, 20, 7, [1.0, 2.0], agree=False), "time": 2.0},
                  {"node": 1, "key": "vote", "value": _vote(1, 20, 8, [1.0, 2.5], agree=False), "time": 2.0},
                  {"node": 1, "key": "commit", "value": {"epoch": 2, "step": 10, "digest": [6, 0]}, "time": 3.0}]
    failed = {c["name"]: c for c in C.check_run(bad, _summary(), level="full", scenario="F2", variant="buggy",
                                                 world=2) if not c["ok"]}
    assert set(failed) == {"digests_at_commits", "no_unexplained_divergence", "protocol_history"}
    assert "L2 0.5" in failed["no_unexplained_divergence"]["violations"][0]
    # the same divergence under F1 (an injected state fault the protocol must catch) is explained
    f1 = {c["name"]: c["ok"] for c in C.check_run(bad, _summary(), level="basic", scenario="F1", variant="fixed",
                                                  world=2)}
    assert f1["no_unexplained_divergence"] and not f1["digests_at_commits"]
    leak = {c["name"]: c for c in C.check_run(good, _summary(leaked_handles=12), level="basic", scenario="F8",
                                              variant="buggy", world=2)}
    assert not leak["no_leaked_handles"]["ok"] and "12 buffer handles leaked" in leak["no_leaked_handles"]["violations"][0]


# ------------------------------------------------------------------------------------------------ real runs
def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _scrape(port: int, stop: threading.Event, seen: list[str]) -> None:
    while not stop.is_set():
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as response:
                text = response.read().decode()
            if re.search(r'^seedance_commits_total\{rank="1"\} [1-9]', text, re.M):
                seen.append(text)
        except OSError:
            pass
        stop.wait(0.5)


def test_short_real_run_passes_and_its_metrics_are_scraped_over_http(tmp_path) -> None:
    port = _free_port()
    stop, seen = threading.Event(), []
    scraper = threading.Thread(target=_scrape, args=(port, stop, seen), daemon=True)
    scraper.start()
    try:
        run = subprocess.run([*SEEDANCE, "real", "test-consensus", "--ranks", "2", "--duration", "8s", "--nemesis",
                              "none", "--metrics-port", str(port), "--out", str(tmp_path), "--json"],
                             capture_output=True, text=True, timeout=240, cwd=ROOT)
    finally:
        stop.set()
        scraper.join(5)
    assert run.returncode == 0, run.stderr[-2000:]
    report = json.loads(run.stdout)
    assert report["passed"] and report["causes"] == []
    assert {c["name"] for c in report["checks"]} >= {"digests_at_commits", "replica_l2_at_commits",
                                                     "protocol_history", "memory"}
    assert report["training"]["commits"] > 5 and report["training"]["replica_l2_max"] == 0.0
    # 8 s is all warm-up: the memory series are reported but not judged (a slope over seconds of start-up once
    # failed this run as a "leak"); the check says so
    memory_check = next(c for c in report["checks"] if c["name"] == "memory")
    assert "rank 0: rss" in report["memory"]["not_judged"] and "not judged" in memory_check["detail"]
    assert all(report["memory"]["ranks"][r]["samples"] >= 3 for r in ("0", "1"))
    for name in ("report.json", "figure.pdf", "figure.png", "commits.trace.json"):
        assert (tmp_path / name).stat().st_size > 0
    trace = json.loads((tmp_path / "commits.trace.json").read_text())
    spans = [e for e in trace["traceEvents"] if e.get("ph") == "X" and e.get("cat") == "commit"]
    assert len(spans) >= 2 * report["training"]["commits"] - 2
    # the endpoint answered during the run, on loopback, with the run's metrics; it is gone afterwards
    assert seen, "no scrape saw commits"
    text = seen[-1]
    for metric in ("seedance_step_seconds", "seedance_commit_latency_seconds", "seedance_rollbacks_total",
                   "seedance_replica_divergence_l2", "seedance_memory_rss_bytes", "seedance_live_handles",
                   "seedance_open_fds", "seedance_threads"):
        assert metric in text, metric
    assert re.search(r'^seedance_live_handles\{rank="0"\} 6\.0$', text, re.M)
    with pytest.raises(OSError):
        urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2)


def test_f8_buggy_fails_naming_the_handle_leak(tmp_path) -> None:
    run = subprocess.run([*SEEDANCE, "real", "test-consensus", "--ranks", "2", "--duration", "12s", "--nemesis",
                          "none", "--scenario", "F8", "--variant", "buggy", "--level", "basic", "--out",
                          str(tmp_path)], capture_output=True, text=True, timeout=240, cwd=ROOT)
    assert run.returncode == 1, run.stderr[-2000:]
    failure = run.stderr.strip().splitlines()[-1]
    assert failure.startswith("seedance: test-consensus failed: ")
    assert "no_leaked_handles" in failure and "buffer handles leaked" in failure
    assert re.search(r"memory: handles leak: rank \d live handles rose", failure)
    report = json.loads((tmp_path / "report.json").read_text())
    assert not report["passed"] and report["reproduce"].startswith("make test-consensus GPU_COUNT=2")


@pytest.mark.slow
def test_f2_buggy_fails_naming_unexplained_divergence(tmp_path) -> None:
    run = subprocess.run([*SEEDANCE, "real", "test-consensus", "--ranks", "3", "--duration", "15s", "--nemesis",
                          "none", "--scenario", "F2", "--variant", "buggy", "--no-memcheck", "--out", str(tmp_path)],
                         capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert run.returncode == 1, run.stderr[-2000:]
    assert "no_unexplained_divergence: unexplained replica divergence at epoch" in run.stderr


@pytest.mark.slow
def test_real_faults_throughout_pass(tmp_path) -> None:
    run = subprocess.run([*SEEDANCE, "real", "test-consensus", "--ranks", "3", "--duration", "40s", "--out",
                          str(tmp_path), "--json"], capture_output=True, text=True, timeout=400, cwd=ROOT)
    assert run.returncode == 0, run.stderr[-2000:]
    report = json.loads(run.stdout)
    assert report["passed"] and report["training"]["nemesis"] == ["crash", "pause", "partition"]


@pytest.mark.slow
def test_soak_reports_the_f8_leak_and_a_clean_fixed_run(tmp_path) -> None:
    leaky = subprocess.run([*SEEDANCE, "real", "soak", "--duration", "20s", "--scenario", "F8", "--variant", "buggy",
                            "--out", str(tmp_path / "b"), "--json"], capture_output=True, text=True, timeout=300,
                           cwd=ROOT)
    assert leaky.returncode == 1
    report = json.loads(leaky.stdout)
    assert any("handles" in leak for leak in report["memory"]["leaks"])
    assert all(c["handles"]["leaked"] > 0 for c in report["counts"].values())


def test_a_busy_metrics_port_is_an_input_error_before_any_process(tmp_path, capsys) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        code = main(["real", "test-consensus", "--ranks", "2", "--duration", "5s", "--metrics-port", str(port),
                     "--out", str(tmp_path)])
    assert code == 2
    assert capsys.readouterr().err.startswith(f"seedance: error: --metrics-port: cannot listen on 127.0.0.1:{port}")
    assert not (tmp_path / "run").exists()
