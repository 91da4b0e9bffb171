"""Studies that run the simulator and/or the real backend (above both runtimes; below sweeps, the paper and the CLI).

Each drives a runtime, then judges what it recorded with :mod:`seedance.history` and draws it with
:mod:`seedance.analysis`. Nothing below this floor imports it.
"""
