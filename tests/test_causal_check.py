"""seedance.history.causal: each bad pattern of Bouajjani et al. (POPL'17) on a small history, clean histories
judged valid, convergence anomalies from replica events, and the CLI (`seedance check causal`)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from seedance.history.causal import check, check_convergence, operations
from seedance.history.events import Event, ReplicaEvent
from seedance.history.jsonl import write_jsonl


class H:
    """A history builder: ops run one after the other (each invoke immediately completed)."""

    def __init__(self) -> None:
        self.events: list = []
        self.t = 0.0

    def op(self, process, f, key, value, outcome="ok"):
        self.t += 1.0
        self.events.append(Event(process=process, type="invoke", f=f, key=key,
                                 value=None if f == "read" else value, time=self.t))
        self.events.append(Event(process=process, type=outcome, f=f, key=key, value=value, time=self.t + 0.5))
        return self

    def w(self, p, k, v, outcome="ok"):
        return self.op(p, "write", k, v, outcome)

    def r(self, p, k, v):
        return self.op(p, "read", k, v)

    def apply(self, node, key, value, f="apply"):
        self.t += 1.0
        self.events.append(ReplicaEvent(node=node, f=f, key=key, value=value, time=self.t))
        return self


def kinds(result):
    return sorted(result["counts"])


def test_clean_histories_are_valid():
    h = H().w(0, "x", 1).r(1, "x", 1).w(1, "y", 2).r(0, "y", 2).r(0, "x", 1).r(2, "x", None)
    assert check(h.events)["valid"]
    # concurrent writes read in different orders by sessions that saw neither before: CC allows it
    h = H().w(0, "x", 1).w(1, "x", 2).r(2, "x", 1).r(2, "x", 2).r(3, "x", 2)
    assert check(h.events)["valid"]


def test_thin_air_read():
    assert kinds(check(H().r(0, "x", 7).events)) == ["ThinAirRead"]
    h = H().w(0, "x", 7, outcome="fail").r(1, "x", 7)
    result = check(h.events)
    assert kinds(result) == ["ThinAirRead"] and "failed" in result["anomalies"][0]["explanation"]


def test_write_co_init_read():
    h = H().w(0, "x", 1).w(0, "y", 2).r(1, "y", 2).r(1, "x", None)  # saw y=2, which follows x=1, then x is null
    assert kinds(check(h.events)) == ["WriteCOInitRead"]
    assert kinds(check(H().w(0, "x", 1).r(0, "x", None).events)) == ["WriteCOInitRead"]  # read-your-writes


def test_write_co_read():
    # p0 writes x=1 then x=2 (so); p1 reads x=2, then reads x=1: 1 <co 2 <co the second read
    h = H().w(0, "x", 1).w(0, "x", 2).r(1, "x", 2).r(1, "x", 1)
    result = check(h.events)
    assert kinds(result) == ["WriteCORead"]
    anomaly = result["anomalies"][0]
    assert anomaly["write"]["value"] == 1 and anomaly["later_write"]["value"] == 2
    # across sessions: x=0 <co x=1 (p0 read 0 then wrote 1) <co y=5 (p1 read 1) <co p2's read of y; p2 then reads x=0
    h = H().w(3, "x", 0).r(0, "x", 0).w(0, "x", 1).r(1, "x", 1).w(1, "y", 5).r(2, "y", 5).r(2, "x", 0)
    assert kinds(check(h.events)) == ["WriteCORead"]


def test_cyclic_co():
    # p0 reads y=2 before writing x=1; p1 reads x=1 before writing y=2: each read returns a value written after it
    h = H()
    h.events += [Event(process=0, type="invoke", f="read", key="y", time=1), Event(process=1, type="invoke",
                 f="read", key="x", time=1), Event(process=0, type="ok", f="read", key="y", value=2, time=2),
                 Event(process=1, type="ok", f="read", key="x", value=1, time=2)]
    h.t = 2
    h.w(0, "x", 1).w(1, "y", 2)
    assert kinds(check(h.events)) == ["CyclicCO"]


def test_cyclic_cf():
    # p2 reads x=1 then x=2 (so 1 arbitrated before 2, since 1 <co the read of 2);
    # p3 reads x=2 then x=1 (2 before 1): no single order of the two writes explains both sessions
    h = H().w(0, "x", 1).w(1, "x", 2).r(2, "x", 1).r(2, "x", 2).r(3, "x", 2).r(3, "x", 1)
    assert kinds(check(h.events)) == ["CyclicCF"]


def test_non_differentiated_values_are_counted_not_judged():
    h = H().w(0, "x", 1).w(1, "x", 1).r(2, "x", 1)
    result = check(h.events)
    assert result["valid"] and result["duplicated_values"] == 1


def test_convergence_measured_from_replica_events():
    h = H().w(0, "x", 1).apply(0, "x", 1).apply(1, "x", 1).apply(2, "x", 1)
    h.w(1, "x", 2).apply(1, "x", 2).apply(0, "x", 2)
    h.w(0, "y", 9).apply(0, "y", 9).apply(2, "y", 9).apply(1, "y", 9)
    ops, replicas = operations(h.events)
    end = h.t + 1.0
    conv = check_convergence(ops, replicas, 3, settle_s=0.5, end_s=end)
    # x=2 never reached node 2 (nor anything after it): not converged
    assert not conv["converged"] and sorted(conv["counts"]) == ["Diverged", "NotConverged"]
    h.apply(2, "x", 2)
    ops, replicas = operations(h.events)
    conv = check_convergence(ops, replicas, 3, settle_s=0.5, end_s=h.t + 1.0)
    assert conv["converged"] and conv["writes_measured"] == 3
    # x=1 reached node 0 at its apply; convergence = last replica's apply - invoke
    assert conv["convergence_ms_p50"] > 0


def test_convergence_anomalies():
    h = H().w(0, "x", 1).w(1, "x", 2)
    h.apply(0, "x", 1).apply(0, "x", 2).apply(1, "x", 2).apply(1, "x", 1)  # opposite orders
    h.apply(0, "x", 2)  # applied twice
    h.apply(1, "x", 77)  # nobody wrote 77
    ops, replicas = operations(h.events)
    conv = check_convergence(ops, replicas, 2, settle_s=0.0, end_s=h.t + 1)
    assert {"DivergentOrder", "DuplicateApply", "ThinAirApply"} <= set(conv["counts"])
    lost = H().w(0, "z", 5)
    ops, replicas = operations(lost.events)
    conv = check_convergence(ops, [ReplicaEvent(node=0, f="apply", key="q", value=None, time=9.0)], 1,
                             settle_s=0.0, end_s=10.0)
    assert "LostWrite" in conv["counts"]


def test_recovered_replica_observations_count_as_holding_not_as_applying():
    h = H().w(0, "x", 1).apply(0, "x", 1).apply(1, "x", 1)
    h.apply(1, "x", 1, f="observe")  # node 1 restarted and holds x=1 again
    ops, replicas = operations(h.events)
    conv = check_convergence(ops, replicas, 2, settle_s=0.0, end_s=h.t + 1)
    assert conv["converged"], conv["anomalies"]


def test_cli_check_causal(tmp_path):
    good = tmp_path / "good.jsonl"
    write_jsonl(H().w(0, "x", 1).apply(0, "x", 1).r(1, "x", 1).events, good)
    bad = tmp_path / "bad.jsonl"
    write_jsonl(H().w(0, "x", 1).w(0, "x", 2).r(1, "x", 2).r(1, "x", 1).events, bad)
    cmd = [sys.executable, "-m", "seedance", "check", "causal"]
    out = subprocess.run([*cmd, str(good), "--json"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    verdict = json.loads(out.stdout)
    assert verdict["valid"] is True and verdict["ops"] == 2 and verdict["anomalies"] == [] and verdict["elapsed_s"] >= 0
    out = subprocess.run([*cmd, str(bad), "--json"], capture_output=True, text=True)
    assert out.returncode == 1 and json.loads(out.stdout)["anomalies"][0]["type"] == "WriteCORead"
    garbage = tmp_path / "garbage.jsonl"
    garbage.write_text('{"process": 0, "type": "ok"\n')
    out = subprocess.run([*cmd, str(garbage)], capture_output=True, text=True)
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and "line 1" in out.stderr


@pytest.mark.parametrize("settle", ["-1", "nan", "inf"])
def test_cli_rejects_bad_settle(settle, tmp_path):
    out = subprocess.run([sys.executable, "-m", "seedance", "check", "causal", "-", "--settle", settle],
                         capture_output=True, text=True, input="")
    assert out.returncode == 2 and "--settle" in out.stderr
