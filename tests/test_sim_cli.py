"""``seedance sim run``: JSON shape, files written, exit 2 on bad input."""

from __future__ import annotations

import json

import pytest

from seedance.cli import main

KEYS = {"protocol", "seed", "ops_ok", "ops_failed", "ops_info", "throughput_ops_s", "latency_ms_p50",
        "latency_ms_p99", "linearizable", "trace_sha256", "history", "reproduce"}


def test_sim_run_json_shape_and_files(tmp_path, capsys):
    out = tmp_path / "run"
    argv = ["sim", "run", "--protocol", "echo", "--nodes", "3", "--clients", "4", "--duration", "0.2", "--seed",
            "7", "--nemesis", "crash,partition", "--out", str(out), "--json"]
    assert main(argv) == 0
    summary = json.loads(capsys.readouterr().out)
    assert KEYS <= set(summary)
    assert summary["protocol"] == "echo" and summary["seed"] == 7 and summary["linearizable"] is True
    assert summary["reproduce"].startswith("seedance sim run --protocol echo")
    assert {p.name for p in out.iterdir()} == {"history.jsonl", "trace.msgpack", "trace.json", "summary.json"}
    stored = json.loads((out / "summary.json").read_text())
    assert stored["trace_sha256"] == summary["trace_sha256"] and stored["metadata"]["seed"] == 7
    assert "git_commit" in stored["metadata"]
    # the reproduce command gives the same trace
    again = summary["reproduce"].split()[1:] + ["--out", str(tmp_path / "again"), "--json"]
    assert main(again) == 0
    assert json.loads(capsys.readouterr().out)["trace_sha256"] == summary["trace_sha256"]


@pytest.mark.parametrize("args, message", [
    (["--protocol", "paxos-from-mars"], "valid: "),
    (["--nemesis", "crash,meteor"], "valid: partition"),
    (["--mix", "1,2"], "--mix"),
    (["--key-dist", "pareto"], "--key-dist"),
    (["--nodes", "0"], "nodes"),
])
def test_bad_input_exits_2_with_one_line(args, message, capsys, tmp_path):
    assert main(["sim", "run", "--protocol", "echo", "--duration", "0.01", "--out", str(tmp_path), *args]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


def test_faults_are_listed(capsys):
    assert main(["sim", "faults", "--json"]) == 0
    assert "cpu-hog" in json.loads(capsys.readouterr().out)["faults"]


def test_settings_without_a_flag_reproduce_through_extra(tmp_path, capsys):
    """Every config reproduces from its one-line command, cost-model settings included."""
    from seedance.sim import CpuConfig, NemesisConfig, SimConfig, StorageConfig, WorkloadConfig, simulate

    config = SimConfig(protocol="echo", nodes=3, duration_s=0.1, seed=2,
                       workload=WorkloadConfig(clients=2, think_s=0.002, key_distribution="zipf", zipf_s=1.5),
                       nemesis=NemesisConfig(faults=("pause",), window_s=(0.01, 0.02)),
                       cpu=CpuConfig(message_s=5e-6), storage=StorageConfig(fsync_s=0.002))
    result = simulate(config)
    assert "--extra" in result.reproduce
    argv = __import__("shlex").split(result.reproduce)[1:] + ["--out", str(tmp_path), "--json", "--no-check"]
    assert main(argv) == 0
    assert json.loads(capsys.readouterr().out)["trace_sha256"] == result.trace_sha256


def test_bad_extra_exits_2(capsys, tmp_path):
    assert main(["sim", "run", "--protocol", "echo", "--out", str(tmp_path), "--extra", '{"cpu": {"clients": 3}}']) == 2
    assert "--extra.cpu" in capsys.readouterr().err
