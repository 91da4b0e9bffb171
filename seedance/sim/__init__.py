"""The SimPy runtime: drives protocol nodes in virtual time over a modelled fabric, with seeded faults."""
