"""The scheduler's calls (seedance.sim.kernel): order, stops, and SimPy's own loop reading them as events."""

import simpy
from simpy.core import StopSimulation

from seedance.sim.kernel import call_at, run_until


def test_calls_run_by_time_then_in_the_order_scheduled():
    env = simpy.Environment()
    seen = []
    for name, at in (("b", 2.0), ("a", 1.0), ("c", 2.0), ("d", 5.0)):
        call_at(env, at, lambda event: seen.append((env.now, event.args)), name)
    assert run_until(env, 3.0) is False
    assert seen == [(1.0, "a"), (2.0, "b"), (2.0, "c")] and env.now == 3.0
    call_at(env, 0.5, lambda event: seen.append((env.now, event.args)), "late")  # never before now
    assert run_until(env, 10.0) is False
    assert seen[3:] == [(3.0, "late"), (5.0, "d")]


def test_a_call_that_stops_the_run_is_not_made_again():
    env = simpy.Environment()
    seen = []

    def stop(event):
        seen.append(event.args)
        raise StopSimulation(None)

    call_at(env, 1.0, stop, "stop")
    call_at(env, 2.0, lambda event: seen.append(event.args), "after")
    assert run_until(env, 5.0) is True and env.now == 1.0
    assert run_until(env, 5.0) is False
    assert seen == ["stop", "after"] and env.now == 5.0


def test_simpy_runs_calls_with_its_own_processes():
    env = simpy.Environment()
    seen = []

    def process(env):
        yield env.timeout(1.5)
        seen.append(("process", env.now))

    env.process(process(env))
    call_at(env, 1.0, lambda event: seen.append(("call", env.now)))
    call_at(env, 2.0, lambda event: seen.append(("call", env.now)))
    env.run()
    assert seen == [("call", 1.0), ("process", 1.5), ("call", 2.0)]
