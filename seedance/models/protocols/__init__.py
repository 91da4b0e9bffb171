"""Protocol nodes written once, free of I/O, driven by :mod:`seedance.sim` and :mod:`seedance.real`.

:mod:`.contract` defines what a node receives and what it asks its runtime to do; :mod:`.registry` names the
protocols a runtime can build.
"""
