"""The convergence experiment end to end on a tiny configuration, and ``seedance experiment convergence``'s input
errors (one line, exit status 2)."""

from __future__ import annotations

import json

import pandas as pd
import pytest
import torch

from seedance.experiments.convergence import ExperimentConfig, run_experiment, save, total_iterations
from seedance.cli import main
from seedance.provenance import run_metadata

ROW_FIELDS = {"compressor", "problem", "topology", "iterations", "empirical_gap", "bound", "time_to_accuracy_s"}


@pytest.fixture(scope="module")
def tiny():
    threads = torch.get_num_threads()
    config = ExperimentConfig(seeds=3, iterations=60, common_iterations=40, mlp_iterations=20, logistic_samples=200,
                              logistic_dim=20, mlp_samples=64, compressors=("identity", "top_k:0.1", "qsgd:4"),
                              target_factor=0.5, dense_until=30, points=10)
    done = []
    result = run_experiment(config, progress=done.append)
    assert torch.get_num_threads() == threads  # the experiment restores the caller's setting
    return config, result, sum(done)


def test_rows_cover_every_compressor_problem_schedule_and_fabric(tiny):
    config, result, progressed = tiny
    rows = result.rows
    assert ROW_FIELDS <= set(rows.columns)
    assert progressed == total_iterations(config)
    assert set(rows.compressor) == {"identity", "top_k(10%)", "qsgd(s=4)", "local_sgd(K=4,H=4)"}
    assert len(rows) == 4 * 3 * 5  # (theorem logistic, common logistic, common mlp) × 5 fabrics
    theorem = rows[rows.schedule == "theorem"]
    assert theorem.bound.notna().all() and theorem.bound_holds.all()
    assert rows[rows.problem == "mlp"].bound.isna().all()  # non-convex: empirical only
    reached = rows[rows.iterations.notna()]
    assert len(reached) > 0
    per_iteration = reached.compute_s_per_iteration + reached.communication_s_per_iteration
    pd.testing.assert_series_equal(reached.time_to_accuracy_s, reached.iterations * per_iteration,
                                   check_names=False)


def test_save_writes_tables_figures_and_provenance(tiny, tmp_path):
    config, result, _ = tiny
    paths = save(result, tmp_path, provenance=run_metadata(seed=config.root_seed, spec={"tiny": True}),
                 formats=("png",))
    for name in ("rows.csv", "curves.csv", "summary.json", "gap_vs_bound.png", "time_to_accuracy_logistic.png",
                 "time_to_accuracy_mlp.png", "gap_curves.png"):
        assert (tmp_path / name).stat().st_size > 0
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["provenance"]["seed"] == 0 and "git_commit" in summary["provenance"]
    assert set(summary["rankings_differ_across_fabrics"]) == {"logistic", "mlp"}
    assert summary["problems"]["logistic"]["f_star_certified"] is True
    assert len(pd.read_csv(paths["rows"])) == len(result.rows)


@pytest.mark.parametrize("args, field", [(["--seeds", "1"], "--seeds"), (["--seed", "-3"], "--seed")])
def test_cli_input_errors_are_one_line_and_exit_2(args, field, tmp_path, capsys):
    code = main(["experiment", "convergence", "--quick", "--out", str(tmp_path), *args])
    captured = capsys.readouterr()
    assert code == 2
    assert captured.err.count("\n") == 1 and field in captured.err
    assert main(["experiment", "convergence"]) == 2  # --out is required


def test_compute_model_waits_for_the_slowest_generation():
    """6·N·tokens FLOPs at mfu × peak; the mixed A100 + V100 cluster runs at the V100's pace."""
    from seedance.analysis.convergence.time_to_accuracy import ComputeModel, load_fabric
    from seedance.errors import SpecError

    model = ComputeModel(parameters=1.3e9, tokens_per_device=4096, mfu=0.4)
    flops = 6 * 1.3e9 * 4096
    assert model.seconds(load_fabric("mixed-generations (mixed)")) == pytest.approx(flops / (0.4 * 125e12))
    assert model.seconds(load_fabric("infiniband-4-nodes (hgx-h100 x4)")) == pytest.approx(flops / (0.4 * 989e12))
    with pytest.raises(SpecError, match="device_kinds"):
        model.peak_flops("TPUv4")
    with pytest.raises(SpecError, match="topology"):
        load_fabric("token-ring")
