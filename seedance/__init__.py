"""seedance: consistency and consensus protocols on GPU clusters.

Protocol code lives in :mod:`seedance.models` (pure, sans-I/O); :mod:`seedance.sim` drives it in virtual time over a
modelled fabric; :mod:`seedance.real` drives the same nodes in real processes; :mod:`seedance.analysis` judges and
plots the results.
"""

__version__ = "0.1.0"
