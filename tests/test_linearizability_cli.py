"""``seedance check linearizable``: verdict as JSON and exit status 0 / 1 / 3, bad input as one line and status 2."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from seedance.analysis.histgen import GeneratorConfig, atomic_history
from seedance.history.jsonl import write_jsonl
from seedance.cli import main

CONVERTED = Path(__file__).resolve().parent / "data" / "histories" / "converted"


def run(capsys, *args):
    code = main(["check", "linearizable", *map(str, args)])
    out, err = capsys.readouterr()
    return code, out, err


def test_valid_history_json(capsys):
    code, out, err = run(capsys, CONVERTED / "jepsen-etcd-etcd_002.jsonl", "--model", "cas-register", "--json")
    assert code == 0
    verdict = json.loads(out)
    assert verdict["valid"] is True and verdict["ops"] == 77 and verdict["first_violation"] is None
    assert verdict["elapsed_s"] >= 0 and verdict["model"] == "cas-register"


def test_invalid_history_json_and_text(capsys):
    path = CONVERTED / "jepsen-etcd-etcd_000.jsonl"
    code, out, _ = run(capsys, path, "--model", "cas-register", "--json")
    assert code == 1
    violation = json.loads(out)["first_violation"]
    assert violation["op"]["f"] == "read" and "cannot be linearized" in violation["explanation"]
    code, out, _ = run(capsys, path, "--model", "kv")
    assert code == 1 and "NOT linearizable" in out and "cannot be linearized" in out


def test_unknown_when_the_budget_runs_out(capsys, tmp_path):
    config = GeneratorConfig(ops=3000, clients=16, cas_fraction=0.2, info_fraction=0.02, value_range=5)
    path = write_jsonl(atomic_history(config, np.random.default_rng(5)), tmp_path / "h.jsonl")
    code, out, _ = run(capsys, path, "--model", "cas-register", "--timeout", "0", "--json", "--per-key")
    assert code == 3
    verdict = json.loads(out)
    assert verdict["valid"] == "unknown" and verdict["per_key"]["None"]["valid"] == "unknown"


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        (['{"process": 1, "type": "invoke", "f": "read", "time": 0}', "{oops"], "line 2: not valid JSON"),
        (['{"process": 1, "type": "ok", "f": "read", "value": 1, "time": 0}'], "line 1: .*no pending invoke"),
        (['{"process": 1, "type": "invoke", "f": "read", "time": 1}',
          '{"process": 1, "type": "ok", "f": "read", "value": 1, "time": 0.5}'], "line 2: time 0.5 is before"),
        (['{"process": 1, "type": "begin", "f": "read", "time": 0}'], "line 1: .*unknown type 'begin'"),
        (['{"process": 1, "type": "invoke", "f": "cas", "value": [1, 2], "time": 0}'],
         "line 1: cas is not an operation of model register"),
    ],
)
def test_bad_input_is_one_line_and_status_2(capsys, tmp_path, lines, message):
    path = tmp_path / "bad.jsonl"
    path.write_text("\n".join(lines) + "\n")
    code, out, err = run(capsys, path, "--model", "register", "--json")
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("seedance: error: ")
    assert re.search(message, err)


def test_missing_file_and_bad_model(capsys, tmp_path):
    code, _, err = run(capsys, tmp_path / "none.jsonl")
    assert code == 2 and "cannot read history" in err
    code, _, err = run(capsys, CONVERTED / "jepsen-etcd-etcd_002.jsonl", "--model", "queue")
    assert code == 2 and "register" in err and "kv" in err


def test_installed_command_exit_status():
    """The console script propagates the verdict as its exit status."""
    path = CONVERTED / "knossos-bad-rethink-fail-minimal.jsonl"
    entry = "import sys; from seedance.cli import main; sys.exit(main())"
    done = subprocess.run([sys.executable, "-c", entry, "check", "linearizable", str(path), "--json"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1, done.stderr
    assert json.loads(done.stdout)["valid"] is False
