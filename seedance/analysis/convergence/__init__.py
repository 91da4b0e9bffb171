"""Convergence of compressed SGD: bounds vs empirical runs (torch, CPU) and time to accuracy on fabrics (seed §2.4).

:mod:`.problems` (logistic regression, a small MLP), :mod:`.training` (compressed / error-feedback / local SGD over
many seeds), :mod:`.time_to_accuracy` (iterations × compute + communication from the cost model), :mod:`.figures`,
:mod:`.experiment` (the whole study, behind ``seedance experiment convergence``).
"""

from .experiment import ExperimentConfig, ExperimentResult, rankings, run_experiment, save, total_iterations

__all__ = ["ExperimentConfig", "ExperimentResult", "rankings", "run_experiment", "save", "total_iterations"]
