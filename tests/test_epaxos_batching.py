"""EPaxos batching (``max_batch`` > 1): several client commands in one instance, interference over all their keys."""

from __future__ import annotations

import pytest

from paxos_campaign import FAST_TIMING, campaign_config, explain, judge, liveness_failure
from scripted_driver import Driver, between
from seedance.errors import SpecError
from seedance.models.protocols.epaxos import SPEC, EPaxosConfig
from seedance.models.protocols.epaxos.deps import dep_of
from seedance.models.protocols.epaxos.messages import Batch, PreAccept
from seedance.models.protocols.epaxos.node import COMMITTED, EPaxosNode

BATCHED = {"max_batch": 8}


def _batched_driver(n: int = 3, **config) -> Driver:
    d = Driver(SPEC, n, config={**BATCHED, **config}).start()
    d.eager = False  # requests wait for the flush timer, as several arriving in one instant do in a runtime
    return d


def test_commands_received_before_the_flush_share_one_instance():
    d = _batched_driver()
    d.request(0, "write", "x", 1, client_id=1)
    d.request(0, "write", "y", 2, client_id=2)
    d.request(0, "cas", "x", [1, 3], client_id=3)
    assert (0, 1) not in d.nodes[0].instances  # nothing proposed before the flush
    d.fire(0, "flush")
    inst = d.nodes[0].instances[(0, 1)]
    assert isinstance(inst.command, Batch) and [c.key for c in inst.command.commands] == ["x", "y", "x"]
    assert d.nodes[0].next_instance == 2
    d.deliver_all()
    assert d.nodes[0].fast_commits == 1
    assert [d.reply_to(c, 1).outcome.value for c in (1, 2, 3)] == ["ok", "ok", "ok"]
    for node in d.nodes.values():
        assert node.instances[(0, 1)].status == COMMITTED
        assert node.kv.read("x") == 3 and node.kv.read("y") == 2
        assert node.exec_log == [("x", (0, 1)), ("y", (0, 1))]
    assert d.violations == []


def test_max_batch_caps_the_commands_per_instance():
    d = _batched_driver(max_batch=2)
    for c in range(5):
        d.request(0, "write", f"k{c}", c, client_id=c)
    d.fire(0, "flush")
    sizes = [len(i.command.commands) if isinstance(i.command, Batch) else 1
             for _, i in sorted(d.nodes[0].instances.items())]
    assert sizes == [2, 2, 1]
    d.deliver_all()
    assert all(d.reply_to(c, 1).outcome.value == "ok" for c in range(5))


def test_a_batch_interferes_through_any_of_its_keys():
    """R1's write of y commits first; R0's batch {x, y} reaches R2, which knows R1's instance: the batch depends on
    it through y (not x), takes the slow path, and every replica executes y's writes in one order."""
    d = _batched_driver()
    d.request(1, "write", "y", 1, client_id=5)
    d.fire(1, "flush")
    d.drop(between(1, 0))
    d.deliver_all(lambda s, dst, m: {s, dst} == {1, 2})
    d.request(0, "write", "x", 2, client_id=6)
    d.request(0, "write", "y", 3, client_id=7)
    d.fire(0, "flush")
    d.drop(between(0, 1, PreAccept))
    d.deliver_all()
    assert dep_of(d.nodes[0].instances[(0, 1)].deps, 1) == 1 and d.nodes[0].slow_commits == 1
    d.run_timers(until=1.0)
    assert d.violations == [], d.story()
    assert {n.kv.read("y") for n in d.nodes.values()} == {3}
    orders = {tuple(iid for key, iid in n.exec_log if key == "y") for n in d.nodes.values()}
    assert orders == {((1, 1), (0, 1))}


def test_a_batch_survives_a_crash_and_recovery():
    d = _batched_driver()
    d.request(0, "write", "x", 1, client_id=1)
    d.request(0, "write", "y", 2, client_id=2)
    d.fire(0, "flush")
    d.deliver_all()
    d.crash(1)
    node = d.recover(1)
    assert isinstance(node.instances[(0, 1)].command, Batch)
    assert node.kv.read("x") == 1 and node.kv.read("y") == 2


def test_max_batch_is_validated():
    with pytest.raises(SpecError, match="max_batch"):
        EPaxosConfig.from_mapping({"max_batch": 0})
    assert EPaxosNode(0, 3, None, {}).config.max_batch == 1  # off by default


BATCHED_SEEDS = range(40)


def _check_batched(seed: int, request) -> None:
    """The campaign of tests/paxos_campaign.py with batching on and three clients per replica (so that commands do
    arrive together)."""
    from seedance.sim import WorkloadConfig

    base = campaign_config(seed, "epaxos", FAST_TIMING)
    config = campaign_config(seed, "epaxos", {**FAST_TIMING, **BATCHED},
                             workload=WorkloadConfig(clients=3 * base.nodes, keys=3, op_timeout_s=0.02))
    result, problems = judge(config)
    assert not problems, explain(result, problems, request.node.nodeid)
    assert result.progress_after_heal, liveness_failure(result, request.node.nodeid)
    assert result.ops_ok > 0


@pytest.mark.parametrize("seed", [pytest.param(s, marks=pytest.mark.campaign) if s >= 3 else s
                                  for s in BATCHED_SEEDS])
def test_batched_campaign(seed, request):
    _check_batched(seed, request)
