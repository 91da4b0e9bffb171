"""Each paper item's runs, wall time and CPU time from its sweep's recorded timing columns
(``python -m seedance.paper.timings``), and the README's table of them: it is what the tool produces from the rows
kept in tests/data/paper-timings (saved with ``--save-rows`` from the quick paper and benchmarks/paper_items.py)."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pytest

from seedance.paper import suite, timings

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data" / "paper-timings"
SCALING = {"1 local": "quick.1-local.json", "2 local": "quick.2-local.json", "2 Dask": "quick.2-dask.json"}


def readme_args() -> list[str]:
    args = [str(DATA / "quick.json")]
    for label, name in SCALING.items():
        args += ["--scaling", f"{label}={DATA / name}"]
    return args


def test_the_readme_table_is_what_the_tool_makes_of_the_kept_runs(capsys):
    assert timings.main([*readme_args(), "--readme", str(ROOT / "README.md"), "--check"]) == 0
    table = capsys.readouterr().out
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert f"{timings.START}\n{table}{timings.END}" in readme
    for name in suite.NAMES:
        assert f"| `{name}` |" in table


@pytest.fixture(scope="module")
def tiny_runs(tmp_path_factory):
    """Two items of the paper as real (tiny) sweeps, one with 1 worker and once more with 2."""
    import yaml

    from seedance.sweep.spec import merge

    root = tmp_path_factory.mktemp("paper-timings")
    specs = root / "specs"
    specs.mkdir()
    tiny = {"fabrics": {"axes": {"grid": {"collective": ["allreduce"], "size": ["1MiB", "1GiB"]},
                                 "zip": {"topology": ["dgx-a100", "pcie-8gpu"], "nodes": [1, 1]}}},
            "scenarios": {"axes": {"grid": {"scenario": ["F1", "F4"]}}, "repetitions": 2}}
    for name, override in tiny.items():
        doc = yaml.safe_load((suite.SPEC_DIR / f"{name}.yaml").read_text())
        doc["quick"] = merge(doc.get("quick", {}), override)
        (specs / f"{name}.yaml").write_text(yaml.safe_dump(doc))
    for workers in (1, 2):
        suite.run_suite("quick", root / f"w{workers}", names=list(tiny), workers=workers, spec_dir=specs)
    return root


def test_costs_come_from_the_recorded_timing_columns(tiny_runs):
    from seedance.sweep import load_results

    result = timings.summary(timings.rows(tiny_runs / "w2"))
    assert [i["item"] for i in result["items"]] == ["scenarios", "fabrics"]  # the paper's order
    for item in result["items"]:
        df = load_results(tiny_runs / "w2" / item["item"])
        assert item["runs"] == int((df["status"] == "ok").sum()) and item["failed"] == 0
        assert item["cpu_s"] == pytest.approx(df["cpu_s"].sum(), abs=0.01)
        ends = [datetime.fromisoformat(t).timestamp() for t in df["finished_at"]]
        first_start = min(e - w for e, w in zip(ends, df["wall_s"]))
        assert item["wall_s"] == pytest.approx(max(ends) - first_start, abs=0.01)
        assert item["wall_s"] >= df["wall_s"].max() - 0.01  # at least its longest run
    assert result["total"]["runs"] == sum(i["runs"] for i in result["items"]) == 12


def test_scaling_columns_are_speedups_over_the_first_label(tiny_runs, capsys):
    code = timings.main([str(tiny_runs / "w2"), "--scaling", f"1 local={tiny_runs / 'w1'}",
                         "--scaling", f"2 local={tiny_runs / 'w2'}", "--json"])
    assert code == 0
    import json

    result = json.loads(capsys.readouterr().out)
    for item in result["items"]:
        one, two = item["scaling"]["1 local"], item["scaling"]["2 local"]
        assert one["speedup"] == 1.0 and two["wall_s"] == item["wall_s"]
        assert two["speedup"] == pytest.approx(one["wall_s"] / two["wall_s"], abs=0.01)


def test_saved_rows_give_the_same_table_as_the_directory(tiny_runs, tmp_path, capsys):
    saved = tmp_path / "rows.json"
    assert timings.main([str(tiny_runs / "w1"), "--save-rows", str(saved)]) == 0
    from_dir = capsys.readouterr().out
    assert timings.main([str(saved)]) == 0
    assert capsys.readouterr().out == from_dir


def test_the_readme_table_is_rewritten_between_its_markers_only(tiny_runs, tmp_path, capsys):
    readme = tmp_path / "README.md"
    readme.write_text(f"# x\nbefore\n{timings.START}\nold table\n{timings.END}\nafter\n", encoding="utf-8")
    assert timings.main([str(tiny_runs / "w1"), "--readme", str(readme), "--check"]) == 1
    assert timings.main([str(tiny_runs / "w1"), "--readme", str(readme)]) == 0
    table = capsys.readouterr().out
    text = readme.read_text(encoding="utf-8")
    assert text == f"# x\nbefore\n{timings.START}\n{table}{timings.END}\nafter\n"
    assert timings.main([str(tiny_runs / "w1"), "--readme", str(readme), "--check"]) == 0


@pytest.mark.parametrize("args, says", [
    (["/nonexistent/dir"], "DIR: /nonexistent/dir does not exist"),
    (["{dir}", "--scaling", "nolabel"], "--scaling: 'nolabel' is not LABEL=DIR"),
    (["{dir}", "--readme", "{nomarkers}"], "needs one <!-- paper-items:start -->"),
])
def test_bad_input_is_one_line_and_exit_2(tiny_runs, tmp_path, capsys, args, says):
    nomarkers = tmp_path / "plain.md"
    nomarkers.write_text("# no table here\n")
    args = [a.format(dir=tiny_runs / "w1", nomarkers=nomarkers) for a in args]
    assert timings.main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and says in err[0]


def test_clock_never_shows_zero_for_a_positive_time():
    assert timings.clock(0.004) == "0.004 s" and timings.clock(7.26) == "7.3 s"
    assert timings.clock(381) == "6 min 21 s" and timings.clock(6180) == "1 h 43 min" and timings.clock(None) == "–"


def test_the_readme_full_size_table_is_what_the_tool_makes_of_the_kept_full_run(capsys):
    """The full-size `make paper` of 2026-12-06 (its rows kept in full.json): the README's table of it."""
    assert timings.main([str(DATA / "full.json")]) == 0
    table = capsys.readouterr().out
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    rows = [line for line in table.splitlines() if line.startswith("|")]
    assert len(rows) == len(suite.NAMES) + 3 and "| all | 1,249 (0) |" in table
    assert "\n".join(rows) in readme
