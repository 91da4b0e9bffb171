"""History format: round trips, streaming, and one clear error (with the line number) per kind of bad input."""

from __future__ import annotations

import json

import pytest

from seedance.history.events import Event, EventType, Operation, parse_lines, read_jsonl
from seedance.history.jsonl import HistoryWriter, write_jsonl
from seedance.errors import HistoryError


def _lines(*objs):
    return [json.dumps(o) for o in objs]


INV_W = {"process": 1, "type": "invoke", "f": "write", "key": "k1", "value": 5, "time": 0.0}
OK_W = {"process": 1, "type": "ok", "f": "write", "key": "k1", "value": 5, "time": 0.1}


def test_round_trip_atomic_and_streaming(tmp_path):
    events = [
        Event(process=0, type="invoke", f="cas", key="a", value=[1, 2], time=0.0),
        Event(process=1, type="invoke", f="read", key="a", time=0.01),
        Event(process=0, type="ok", f="cas", key="a", value=[1, 2], time=0.02),
        Event(process=1, type="ok", f="read", key="a", value=2, time=0.03),
        Event(process=2, type="invoke", f="write", value="x", time=0.04),
        Event(process=2, type="info", f="write", value="x", time=0.05),
        Event(process=2, type="invoke", f="read", time=0.06),  # reuse after info is accepted
        Event(process=2, type="fail", f="read", time=0.07),
    ]
    path = write_jsonl(events, tmp_path / "h.jsonl")
    assert read_jsonl(path) == events
    assert events[0].value == (1, 2) and events[0].type is EventType.INVOKE and events[0].f is Operation.CAS
    first = json.loads(path.read_text().splitlines()[0])
    assert first == {"process": 0, "type": "invoke", "f": "cas", "key": "a", "value": [1, 2], "time": 0.0}
    assert "key" not in json.loads(path.read_text().splitlines()[4])  # single register: key omitted
    with HistoryWriter(tmp_path / "s.jsonl") as writer:
        for event in events:
            writer.append(event)
        assert read_jsonl(tmp_path / "s.jsonl") == events  # each line is flushed as it is appended
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []


def test_writer_rejects_bad_sequence_and_leaves_target_untouched(tmp_path):
    target = tmp_path / "h.jsonl"
    target.write_text("old\n")
    bad = [Event(process=1, type="ok", f="read", value=1, time=0.0)]
    with pytest.raises(HistoryError, match="line 1: .*no pending invoke"):
        write_jsonl(bad, target)
    assert target.read_text() == "old\n"
    with HistoryWriter(tmp_path / "s.jsonl") as writer:
        writer.append(Event(process=1, type="invoke", f="read", time=0.0))
        with pytest.raises(HistoryError, match="still pending"):
            writer.append(Event(process=1, type="invoke", f="read", time=0.0))


def test_pending_invokes_at_end_and_trailing_blank_lines_are_accepted():
    events = parse_lines(_lines(INV_W, OK_W, {**INV_W, "time": 0.2}) + ["", "  "])
    assert len(events) == 3 and events[-1].type is EventType.INVOKE


@pytest.mark.parametrize(
    ("lines", "line", "message"),
    [
        (['{"process": 1,'], 1, "not valid JSON"),
        (["[1, 2]"], 1, "expected a JSON object"),
        (_lines({k: v for k, v in INV_W.items() if k != "time"}), 1, "missing field.*time"),
        (_lines({**INV_W, "colour": "red"}), 1, "unknown field.*colour"),
        (_lines({**INV_W, "type": "done"}), 1, "unknown type 'done'.*invoke, ok, fail, info"),
        (_lines({**INV_W, "f": "append"}), 1, "unknown f 'append'.*read, write, cas"),
        (_lines(OK_W), 1, "no pending invoke"),
        (_lines(INV_W, INV_W), 2, "still pending"),
        (_lines(INV_W, {**OK_W, "time": -1.0}), 2, "before the previous line"),
        (_lines({**INV_W, "f": "cas", "value": [1]}), 1, r"cas value must be \[expected, new\]"),
        (_lines({**INV_W, "f": "cas", "value": 3}), 1, r"cas value must be \[expected, new\]"),
        (_lines(INV_W, {**OK_W, "f": "read"}), 2, "does not match the pending invoke"),
        (_lines(INV_W, {**OK_W, "key": "k2"}), 2, "does not match the pending invoke"),
        (_lines(INV_W, {**OK_W, "value": 6}), 2, "differs from the invoked"),
        (_lines({**INV_W, "f": "read"}), 1, "read's invoke value must be null"),
        (_lines({**INV_W, "process": "p1"}), 1, "process.*integer"),
        (_lines({**INV_W, "key": 7}), 1, "key.*string or null"),
        (_lines({**INV_W, "time": "soon"}), 1, "time.*finite number"),
    ],
)
def test_malformed_lines_name_the_line(lines, line, message):
    with pytest.raises(HistoryError, match=message) as info:
        parse_lines(lines)
    assert info.value.field == f"line {line}"
    assert str(info.value).startswith(f"line {line}: ")
    assert "\n" not in str(info.value)


def test_blank_line_inside_is_rejected_so_that_line_n_is_event_n():
    with pytest.raises(HistoryError, match="line 2: blank line inside the history"):
        parse_lines(_lines(INV_W) + [""] + _lines(OK_W))


def test_unreadable_file(tmp_path):
    with pytest.raises(HistoryError, match="cannot read history"):
        read_jsonl(tmp_path / "missing.jsonl")
    (tmp_path / "bin.jsonl").write_bytes(b"\xff\xfe\x00")
    with pytest.raises(HistoryError, match="not UTF-8"):
        read_jsonl(tmp_path / "bin.jsonl")


def test_summary_counts_completions_and_ok_latencies():
    """One summary for both runtimes: open operations are not counted; latencies are invoke-to-ok."""
    from seedance.history.events import Event, summarize

    events = [
        Event(process=1, type="invoke", f="write", key="k", value=1, time=0.0),
        Event(process=2, type="invoke", f="read", key="k", value=None, time=0.001),
        Event(process=1, type="ok", f="write", key="k", value=1, time=0.002),
        Event(process=2, type="fail", f="read", key="k", value=None, time=0.004),
        Event(process=3, type="invoke", f="write", key="k", value=2, time=0.005),
        Event(process=3, type="info", f="write", key="k", value=2, time=0.5),
        Event(process=9, type="invoke", f="read", key="k", value=None, time=0.6),
        Event(process=9, type="ok", f="read", key="k", value=1, time=0.7),
        Event(process=4, type="invoke", f="write", key="k", value=3, time=0.8),
    ]
    summary = summarize(events, 2.0, exclude=lambda process: process == 9)
    assert summary == {"ops_ok": 1, "ops_failed": 1, "ops_info": 1, "throughput_ops_s": 0.5,
                       "latency_ms_p50": pytest.approx(2.0), "latency_ms_p99": pytest.approx(2.0)}
    assert summarize([], 1.0)["latency_ms_p99"] is None


def test_a_history_line_is_the_json_of_its_event_dict():
    """event_to_json writes the common events piece by piece; the text must be json.dumps of to_dict() exactly, for
    every kind of value, key and time (and an event it cannot piece together is encoded whole)."""
    import json
    import random

    from seedance.history.events import EventType, Operation, ReplicaEvent
    from seedance.history.jsonl import event_to_json

    rng = random.Random(3)
    values = [None, 0, -7, 2**70, True, False, 1.5, -0.0, 1e-300, "x", "é\u2603\"\\\n", (1, (2, 3)), ("a", None),
              (), ((1.25,),)]
    keys = [None, "k0", "pixel \u00e9", "k\"q"]
    times = [0.0, 1e-9, 123.456789, 5.0, 1e300]
    events = []
    for _ in range(400):
        value, key, t = rng.choice(values), rng.choice(keys), rng.choice(times)
        if rng.random() < 0.5:
            events.append(Event.trusted(rng.randrange(-3, 40), rng.choice(list(EventType)), rng.choice(list(Operation)),
                                        key, value, t))
        else:
            events.append(ReplicaEvent.trusted(rng.randrange(0, 1024), rng.choice(["apply", "observe"]), key, value, t))
    for event in events:
        expected = json.dumps(event.to_dict(), separators=(",", ":"), allow_nan=False)
        assert event_to_json(event) == expected, event
    for bad in (float("inf"), float("nan")):  # not JSON: refused as json.dumps refuses it
        with pytest.raises(ValueError):
            event_to_json(Event.trusted(1, EventType.OK, Operation.READ, "k", bad, 1.0))
        with pytest.raises(ValueError):
            event_to_json(Event.trusted(1, EventType.OK, Operation.READ, "k", 1, bad))
