"""Convergence of compressed SGD: bounds vs empirical runs (torch, CPU) and time to accuracy on fabrics (seed §2.4).

:mod:`.problems` (logistic regression, a small MLP), :mod:`.training` (compressed / error-feedback / local SGD over
many seeds), :mod:`.time_to_accuracy` (iterations × compute + communication from the cost model), :mod:`.figures`;
the whole study, behind ``seedance experiment convergence``, is :mod:`seedance.experiments.convergence`.
"""
