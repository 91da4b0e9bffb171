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


def test_trace_json_text_is_what_the_encoder_makes_of_each_event_for_every_kind_of_record(tmp_path):
    """write_chrome builds the frequent events' JSON text without their dicts: byte for byte what encoding the dicts
    of chrome_events gives, for plain records and for those that must take the dict path (NaN, numpy values,
    non-ASCII names, sets, a message flight with a float size)."""
    import json
    import math

    import numpy as np

    from seedance.tracing import Trace, _fallback, _plain

    records = [
        (0.0, "send", 0, "Sync", 1, 120, 1.5e-6), (1e-7, "send", 0, "Sync", 2, 120, 2.5e-6),
        (2e-7, "send", 0, "Ack", 1, 32, 3e-7), (2e-6, "deliver", 1, "Sync", 0), (2e-6, "timer-set", 1, "sync", 0.005),
        (3e-6, "persist", 1, 1, 52, 4e-6), (4e-6, "durable", 1, 1), (4e-6, "observe", 1, "apply", "k3"),
        (5e-6, "annotate", 2, "r\u00e9sum\u00e9", {"epoch": 1, "pixels": 3}), (6e-6, "observe", 2, "observe", None),
        (7e-6, "deliver", 2, "Sync", np.int64(0)), (8e-6, "annotate", 0, "odd", {"x": float("nan")}),
        (9e-6, "send", 3, "Sync", 0, 12.5, 1e-5), (1e-5, "send", np.int64(3), "Sync", 0, 12, 2e-5),
        (1.1e-5, "timer-fire", -1, {1, 2}), (1.2e-5, "send", 3, "\u00fcber", 1, 8, math.inf),
        (1.3e-5, "invoke", -1, 4, "write", "k1", 5), (1.4e-5, "return", -1, 4, "ok", None),
        (1.5e-5, "fault-start", -1, 0, "partition", {"groups": [[0], [1, 2]]}), (1.6e-5, "fault-end", -1, 0, "partition"),
        (1.7e-5, "crash", 2, 3), (1.8e-5, "span", 1, "vote", "commit", 1e-6, {"step": 2}),
    ]
    trace = Trace(num_nodes=4)
    trace.records.extend(records)
    path = trace.write_chrome(tmp_path / "trace.json")

    def text(event):
        try:
            return json.dumps(event, separators=(",", ":"), allow_nan=False, default=_fallback)
        except (ValueError, TypeError):
            return json.dumps(_plain(event), separators=(",", ":"), allow_nan=False)

    expected = ",\n".join(text(event) for event in trace.chrome_events())
    written = path.read_text(encoding="utf-8")
    assert written.split('"traceEvents":[\n', 1)[1].rsplit("\n]", 1)[0] == expected
    assert json.loads(written)["traceEvents"] == json.loads("[" + expected + "]")
