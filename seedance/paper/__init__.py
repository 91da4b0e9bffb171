"""The paper's figures and tables as sweeps (issue H items 4–6).

Every item of the paper (a table or a figure of the seed, plus sim-vs-real validation and the cost model against
published nccl-tests curves) is a sweep spec in ``paper/specs/`` run by :mod:`seedance.sweep`; its figure and table
functions read only the Parquet dataset of that sweep (so each number traces to rows) and draw with
:mod:`seedance.analysis.style`.

* :mod:`.runners` — the runners the built-in ones (cost, sim, real, train, experiment) do not cover: one
  pixel-vs-consensus point, one compressed-SGD run on a fabric, one published nccl-tests row against the model, one
  sim-vs-real pair of runs.
* :mod:`.figures` / :mod:`.tables` — DataFrame → Figure and DataFrame → LaTeX (booktabs), one per item.
* :mod:`.suite` — the items, the quick/full driver behind ``seedance report`` (``make run``) and ``make paper``,
  the headline numbers and the one-page HTML report.

Nothing heavy is imported here.
"""
