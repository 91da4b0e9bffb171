"""`seedance experiment stress`: segments with seeded injections, the §4.4 memory table, determinism, bad input."""

import json

import pytest

from seedance.cli import main
from seedance.experiments.stress import RANKS, plan, run


def test_the_plan_draws_scenarios_at_seeded_rates_and_covers_the_run():
    segments = plan(72.0, seed=0)
    assert len(segments) == 72 * 6 and segments[-1]["start_s"] + segments[-1]["length_s"] == 72 * 3600
    drawn = {s["scenario"] for s in segments} - {None}
    assert drawn == {"F1", "F2", "F3", "F4", "F5", "F6", "F7", "F8"}  # every scenario bites over 72 h
    assert plan(72.0, seed=0) == segments and plan(72.0, seed=1) != segments


def test_a_short_stress_run_is_reproducible_and_writes_its_table_figure_and_provenance(tmp_path):
    first = run(hours=0.004, seed=3, out=tmp_path / "a", ranks=8)
    again = run(hours=0.004, seed=3, out=tmp_path / "b", ranks=8)
    assert first["summary"]["trace_sha256"] == again["summary"]["trace_sha256"]
    assert first["rows"] == again["rows"]
    summary = first["summary"]
    assert summary["all_finished"] and summary["violations"] == 0 and summary["steps"] > 0
    table = first["memory_table"]
    assert [w["period"] for w in table] == [1, 2, 3]
    # 18 bytes per parameter of a 1e9-parameter model (fp32 w, g, gsum, stage and an fp16 copy), in MiB
    assert table[0]["mean"] >= 18e9 / 2**20 * 0.999
    saved = json.loads((tmp_path / "a" / "summary.json").read_text())
    assert {"seed", "spec_sha256", "git_commit", "versions"} <= set(saved["summary"]["provenance"])
    for name in ("stress.pdf", "stress.png", "rows.csv", "memory.csv"):
        assert (tmp_path / "a" / name).stat().st_size > 0


def test_segments_on_two_processes_give_the_same_run_as_on_one(tmp_path):
    """--workers spreads the segments over spawned processes: rows, memory series and trace_sha256 are unchanged."""
    one = run(hours=0.004, seed=5, out=tmp_path / "one", ranks=8, segment_s=5.0)
    two = run(hours=0.004, seed=5, out=tmp_path / "two", ranks=8, segment_s=5.0, workers=2)
    assert len(one["rows"]) >= 2  # more than one segment, so the pool has work to share
    assert one["summary"]["trace_sha256"] == two["summary"]["trace_sha256"]
    assert one["rows"] == two["rows"] and one["memory_table"] == two["memory_table"]
    assert (tmp_path / "one" / "memory.csv").read_bytes() == (tmp_path / "two" / "memory.csv").read_bytes()
    assert two["summary"]["workers"] == 2


def test_bad_hours_exit_2_naming_the_field(tmp_path, capsys):
    assert main(["experiment", "stress", "--hours", "1000", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "--hours" in err and "72 h" in err
    assert main(["experiment", "stress", "--hours", "0", "--out", str(tmp_path)]) == 2
    assert "--hours" in capsys.readouterr().err
    assert main(["experiment", "stress", "--workers", "0", "--out", str(tmp_path)]) == 2
    assert "--workers" in capsys.readouterr().err
    assert RANKS == 64 and not any(tmp_path.iterdir())  # nothing written


def test_stress_is_a_study_of_the_one_experiment_registry(tmp_path):
    """`seedance experiment stress` and a sweep's `experiment` runner call the same entry of
    seedance.sweep.experiments; its options are checked there, naming params.options.hours."""
    from seedance.errors import SpecError
    from seedance.sweep.experiments import EXPERIMENTS, command, experiment, resolve_options
    from seedance.sweep.registry import validate_params

    assert "stress" in EXPERIMENTS and experiment("stress").seeded
    assert resolve_options("stress", {}) == {"hours": None, "workers": None}
    assert command("stress", True, 4, {"hours": 0.5}, tmp_path) == \
        f"seedance experiment stress --quick --seed 4 --hours 0.5 --out {tmp_path}"
    for bad in (0, 1000, "two"):
        with pytest.raises(SpecError, match="params.options.hours"):
            resolve_options("stress", {"hours": bad})
    validate_params("experiment", {"name": "stress", "options": {"hours": 0.01}})
    with pytest.raises(SpecError, match="stress"):  # the valid names listed include it
        validate_params("experiment", {"name": "stres"})


def test_a_segment_leaves_no_garbage_cycles_behind():
    """A finished segment's run is freed before the next starts: 72 h of segments on one worker process would
    otherwise hold the cyclic garbage of each (about 40 MB per 600 s segment, measured)."""
    import gc

    from seedance.experiments.stress import _segment

    gc.collect()
    gc.disable()
    try:
        summary, samples = _segment(plan(0.004, seed=2, segment_s=5.0)[0], 8, 1.0)
        assert summary["steps"] > 0 and samples
        assert gc.collect() == 0
    finally:
        gc.enable()
