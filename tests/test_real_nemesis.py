"""The real nemesis's kill loop against its heal: after the heal no node is killed, and every node the loop killed
comes back, healed or not (a kill that landed just before the heal's restarts passed its node left it down, and
the healed phase waited 30 s for it: seen once in a full test run on a loaded machine)."""

from __future__ import annotations

import asyncio
import time

import numpy as np

from _real_helpers import launcher
from seedance.real.nemesis import RealNemesis
from seedance.real.trace import TraceRecorder


def test_kills_stop_at_the_heal_and_every_killed_node_comes_back(tmp_path):
    with launcher(tmp_path / "run") as cluster:
        cluster.start_all()
        cluster.wait_ready()
        for attempt in range(3):  # many kills, the last ones close to the heal
            nemesis = RealNemesis(cluster, [], faulty_end_s=0.6, trace=TraceRecorder(None, cluster.t0_monotonic),
                                  restart_delay_s=0.05)

            async def faulty_phase() -> None:
                start = time.monotonic()
                rng = np.random.default_rng(attempt)
                await asyncio.gather(nemesis.run(start), nemesis.kill_loop(30.0, rng, start))
                await nemesis.heal()
                # healed: the loop's kills are refused from now on
                assert not await nemesis.kill(0, "SIGKILL", unless_healed=True)
                await nemesis.close()

            asyncio.run(faulty_phase())
            assert nemesis.kills > 0
            cluster.wait_ready(timeout_s=15.0)  # every node up and serving again
            assert all(cluster.alive(rank) for rank in range(cluster.num_nodes))
