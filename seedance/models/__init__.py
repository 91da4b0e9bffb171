"""Pure, deterministic models: protocol nodes (sans-I/O), topologies, costs, clocks, CRDTs, compressors, bounds.

Rules of this package (enforced by ``tests/test_architecture.py``): no sockets, asyncio, simpy, threads,
torch.distributed, wall clock or global random state. Time is passed in; randomness is a ``numpy.random.Generator``
handed in by the caller.
"""
