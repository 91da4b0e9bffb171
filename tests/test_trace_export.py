"""trace.msgpack (every record, hashed as trace_sha256), trace.json's event cap and `seedance trace export`."""

from __future__ import annotations

import hashlib
import json

import pytest

from seedance.cli import main
from seedance.sim import SimConfig, WorkloadConfig, simulate, write_outputs
from seedance.tracing import TraceFileError, read_records


@pytest.fixture(scope="module")
def run():
    return simulate(SimConfig(protocol="raft", nodes=3, duration_s=0.3, seed=2,
                              workload=WorkloadConfig(mode="closed", clients=4, keys=4)))


def _events(path):
    return json.loads(path.read_text())["traceEvents"]


def test_the_records_file_is_the_hashed_trace_and_trace_json_stops_at_its_cap(run, tmp_path):
    whole = write_outputs(run, tmp_path / "whole", chrome_events=None)
    capped = write_outputs(run, tmp_path / "capped", chrome_events=300)
    for out in ("whole", "capped"):
        data = (tmp_path / out / "trace.msgpack").read_bytes()
        assert hashlib.sha256(data).hexdigest() == run.trace_sha256
    assert list(read_records(tmp_path / "whole" / "trace.msgpack")) == [tuple(r) for r in run.trace]
    assert whole["trace_json"]["truncated"] is False and whole["trace_json"]["records"] == len(run.trace)
    assert capped["trace_json"]["events"] == 300 and capped["trace_json"]["truncated"] is True
    full, cut = _events(tmp_path / "whole" / "trace.json"), _events(tmp_path / "capped" / "trace.json")
    assert cut[:300] == full[:300] and len(cut) == 301 < len(full)
    assert "trace.json stops at 300 events" in cut[-1]["name"] and "seedance trace export" in cut[-1]["name"]
    document = json.loads((tmp_path / "capped" / "trace.json").read_text())
    assert document["truncated"]["events"] == 300 and document["truncated"]["until_s"] > 0


def test_export_renders_the_whole_run_or_a_window_of_it(run, tmp_path, capsys):
    write_outputs(run, tmp_path / "r", chrome_events=None)
    assert main(["trace", "export", str(tmp_path / "r"), "--out", str(tmp_path / "all.json"), "--json"]) == 0
    said = json.loads(capsys.readouterr().out)
    assert _events(tmp_path / "all.json") == _events(tmp_path / "r" / "trace.json")
    assert said["events"] == len(_events(tmp_path / "all.json")) and said["truncated"] is False
    assert main(["trace", "export", str(tmp_path / "r" / "trace.msgpack"), "--from", "0.22", "--to", "0.25",
                 "--out", str(tmp_path / "w.json")]) == 0
    timed = [e for e in _events(tmp_path / "w.json") if e["ph"] != "M"]
    assert timed and all(0.22e6 <= e["ts"] <= 0.25e6 for e in timed if e["cat"] != "client")
    every = [r for r in run.trace if 0.22 <= r[0] <= 0.25 and r[1] not in ("invoke", "return")]
    assert len([e for e in timed if e["cat"] != "client"]) == len(every)


def test_a_bad_records_file_or_window_exits_2_and_writes_nothing(run, tmp_path, capsys):
    write_outputs(run, tmp_path / "r", chrome_events=None)
    data = (tmp_path / "r" / "trace.msgpack").read_bytes()
    cases = {"cut.msgpack": data[:len(data) // 2 + 1], "garbage.msgpack": b"\xc1" * 16,
             "numbers.msgpack": b"\x01\x02\x03"}
    for name, content in cases.items():
        (tmp_path / name).write_bytes(content)
        out = tmp_path / f"{name}.json"
        assert main(["trace", "export", str(tmp_path / name), "--out", str(out)]) == 2
        assert not out.exists() and not out.with_name(out.name + ".tmp").exists()
        assert f"{tmp_path / name} record" in capsys.readouterr().err
    with pytest.raises(TraceFileError, match="unknown kind 'teleport'"):
        import msgpack

        (tmp_path / "kind.msgpack").write_bytes(msgpack.packb([0.5, "teleport", 1]))
        list(read_records(tmp_path / "kind.msgpack"))
    assert main(["trace", "export", str(tmp_path / "r"), "--from", "0.3", "--to", "0.1",
                 "--out", str(tmp_path / "x.json")]) == 2
    assert "--to: 0.1 is before --from 0.3" in capsys.readouterr().err
    assert main(["trace", "export", str(tmp_path / "missing"), "--out", str(tmp_path / "x.json")]) == 2
    assert "does not exist" in capsys.readouterr().err and not (tmp_path / "x.json").exists()
