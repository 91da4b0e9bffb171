"""The paper suite (seedance.paper): every spec of paper/specs is valid in both sizes; each item's figure, table and
headline come from a tiny real sweep of its runner and read only its Parquet dataset; bad specs are one-line errors.

The tiny sweeps shrink each item's quick spec further (fewer axes values, shorter runs); the items that start real
processes (sim-vs-real, memory) and the whole quick suite run in the slow tests.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml
from matplotlib.colors import to_hex

from seedance.analysis import style
from seedance.errors import SpecError
from seedance.paper import figures, suite, tables
from seedance.sweep import aggregate, load_results
from seedance.sweep.spec import merge

TINY = {
    "protocols": {"fixed": {"duration": 0.05}, "axes": {"grid": {"protocol": ["raft", "epaxos"],
                                                                  "conflict_rate": [0.0]}}, "repetitions": 1},
    "scenarios": {"axes": {"grid": {"scenario": ["F1", "F4"]}}, "repetitions": 2},
    "fabrics": {"axes": {"grid": {"collective": ["allreduce"], "size": ["1MiB", "1GiB"]},
                         "zip": {"topology": ["dgx-a100", "pcie-8gpu"], "nodes": [1, 2]}}},
    "convergence": {"fixed": {"iterations": 60}, "axes": {"grid": {"compressor": ["identity", "top_k:0.1"],
                                                                   "fabric": ["nvlink-node (dgx-a100)"]}},
                    "repetitions": 2},
    "pixel": {"fixed": {"grid": 4, "duration_s": 0.05}, "axes": {"grid": {"background": [False, True],
                                                                          "writes_per_frame": [1]}},
              "repetitions": 1},
    "nccl": {"axes": {"grid": {"curve": ["a100-1x8-allreduce"], "size": [8, 1048576, 3]}}},
}
SLOW_TINY = {
    "sim-vs-real": {"fixed": {"duration_s": 0.5, "profile_duration_s": 0.5, "profile_runs": 1},
                    "axes": {"zip": {"clients": [2], "value_size": [0], "read_fraction": [0.0], "fsync": [True],
                                     "crash": [False]}},
                    "repetitions": 1},
    "memory": {"fixed": {"duration_s": 6, "interval_s": 0.25}, "repetitions": 1},
}


def _tiny_specs(directory: Path, overrides: dict) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    for name, tiny in overrides.items():
        doc = yaml.safe_load((suite.SPEC_DIR / f"{name}.yaml").read_text())
        doc["quick"] = merge(doc.get("quick", {}), tiny)
        (directory / f"{name}.yaml").write_text(yaml.safe_dump(doc))
    return directory


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    root = tmp_path_factory.mktemp("paper")
    specs = _tiny_specs(root / "specs", TINY)
    results = suite.run_suite("quick", root / "out", names=list(TINY), workers=1, spec_dir=specs)
    return root / "out", {r.name: r for r in results}


def test_every_paper_spec_is_valid_in_both_sizes():
    assert sorted(p.stem for p in suite.SPEC_DIR.glob("*.yaml")) == sorted(suite.NAMES)
    for name in suite.NAMES:
        quick = suite.load_item_spec(name, "quick")
        full = suite.load_item_spec(name, "full")
        assert quick.sweep.name == full.sweep.name == name
        from seedance.sweep.expand import runs

        assert 0 < len(runs(quick.sweep)) <= len(runs(full.sweep))


def test_each_item_draws_its_figure_table_and_headline(tiny):
    out, results = tiny
    for name, result in results.items():
        assert result.error is None, (name, result.error)
        assert result.failures == [], (name, result.failures)
        assert [p.name for p in result.figures] == [f"{name}.pdf", f"{name}.png"]
        assert all(p.stat().st_size > 1000 for p in result.figures)
        text = result.table.read_text()
        assert r"\toprule" in text and r"\bottomrule" in text and f"{name}/results.parquet" in text.splitlines()[0]
        assert result.headline, name
        assert (out / name / "results.parquet").is_file()
    assert results["scenarios"].counts["points_total"] == 2 * 2 * 2
    nccl = {k.split(": ")[0]: float(v.rstrip(" %")) for k, v in results["nccl"].headline.items()}
    assert set(nccl) == {"a100-1x8-allreduce nccl", "a100-1x8-allreduce alpha-beta"}
    assert nccl["a100-1x8-allreduce nccl"] < nccl["a100-1x8-allreduce alpha-beta"]  # deterministic models


def test_a_figure_draws_the_means_of_its_rows(tiny):
    out, _ = tiny
    df = load_results(out / "fabrics")
    figure = figures.fabrics(df)
    ax = figure.axes[0]
    drawn = {c.get_label(): c.lines[0] for c in ax.containers}  # one errorbar series per cluster
    line = drawn["pcie-8gpu+2 servers"]
    rows = df[(df["topology"] == "pcie-8gpu") & (df["collective"] == "allreduce")].sort_values("size_bytes")
    assert np.allclose(line.get_ydata(), rows["busbw_GBps"].to_numpy())
    assert to_hex(line.get_color()) == style.color("pcie-8gpu")
    assert to_hex(drawn["dgx-a100"].get_color()) == style.color("dgx-a100")


def test_one_colour_per_protocol_across_figures(tiny):
    out, _ = tiny
    protocol_fig = figures.protocols(load_results(out / "protocols"))
    pixel_fig = figures.pixel(load_results(out / "pixel"))
    seen: dict[str, set[str]] = {}
    for fig in (protocol_fig, pixel_fig):
        for ax in fig.axes:
            drawn = [(line.get_label(), line) for line in ax.lines]
            drawn += [(c.get_label(), c.lines[0]) for c in ax.containers if hasattr(c, "has_xerr")]
            for label, line in drawn:
                name = str(label).split("+")[0]
                if name in ("raft", "epaxos", "causal"):
                    seen.setdefault(name, set()).add(to_hex(line.get_color()))
    assert seen["raft"] == {style.color("raft")} and seen["epaxos"] == {style.color("epaxos")}
    assert seen["causal"] == {style.color("causal")}


def test_tables_aggregate_with_bootstrap_intervals(tiny):
    out, _ = tiny
    df = load_results(out / "scenarios")
    agg = aggregate(df, by=["scenario", "variant"], metrics=["param_l2_deviation"])
    assert set(agg["n"]) == {2}
    text = tables.scenarios(df)
    assert text.count(r"\\") == 1 + 4  # header and one row per (scenario, variant)
    assert "F1 & buggy & 2" in text


def test_nccl_rows_absent_from_a_curve_are_kept_and_left_out_of_the_figure(tiny):
    out, _ = tiny
    df = load_results(out / "nccl")
    assert len(df) == 2 * 3 and (df[df["size"] == 3]["present"].astype(str).str.lower() == "false").all()
    errors = tables.nccl_errors(df)
    assert set(errors["rows"]) == {2}


def test_rerun_runs_nothing_and_draws_the_same(tiny):
    out, results = tiny
    again = suite.run_item(suite.item("fabrics"), "quick", out, workers=1, progress=False,
                           spec_dir=out.parent / "specs")
    assert again.counts["points_run"] == 0 and again.counts["points_skipped"] == results["fabrics"].counts[
        "points_total"]
    assert again.headline == results["fabrics"].headline


def test_report_html_links_figures_relatively(tiny):
    out, results = tiny
    page = suite.write_html(out / "report.html", list(results.values()), size="quick",
                            metadata={"reproduce": "seedance report"})
    text = page.read_text()
    for name in results:
        assert f"src='figures/{name}.png'" in text
    assert "Provenance" in text and "/tmp" not in text.split("<h2>Provenance")[0].split("dataset")[0]


@pytest.mark.parametrize("doc, field", [
    ({"quick": [1]}, "quick"),
    ({"paper": {"workers": 1}}, "paper"),
    ({"quick": {"repetitons": 2}}, "quick.repetitons"),
    ({"max_workers": 0}, "max_workers"),
    ({"axes": {"grid": {"nosuch": [1]}}}, "params.nosuch"),
    ({"runner": "nosuch"}, "runner"),
])
def test_bad_item_spec_is_one_line_naming_file_and_field(tmp_path, doc, field):
    base = yaml.safe_load((suite.SPEC_DIR / "fabrics.yaml").read_text())
    (tmp_path / "fabrics.yaml").write_text(yaml.safe_dump({**base, **doc}))
    with pytest.raises(SpecError) as err:
        suite.load_item_spec("fabrics", "quick", tmp_path)
    message = str(err.value)
    assert "\n" not in message and str(tmp_path / "fabrics.yaml") in message and field in message


def test_unknown_item_and_size():
    with pytest.raises(SpecError, match="paper.items"):
        suite.item("nosuch")
    with pytest.raises(SpecError, match="paper.suite"):
        suite.load_item_spec("fabrics", "huge")


@pytest.mark.slow
def test_items_on_real_processes(tmp_path):
    specs = _tiny_specs(tmp_path / "specs", SLOW_TINY)
    results = suite.run_suite("quick", tmp_path / "out", names=list(SLOW_TINY), spec_dir=specs)
    for r in results:
        assert r.error is None and r.failures == [], (r.name, r.error, r.failures)
        assert r.figures and r.table and r.headline
    memory = {r.name: r for r in results}["memory"].headline
    assert memory["buggy F8"]["leak_flagged"] == 1.0 and memory["fixed"]["leak_flagged"] == 0.0
    # sim-vs-real: the profile fitted on 8 clients, so the 2-client point is held out and predicted at the CPU
    # level of a real 8-client run just before it (its own run never seen); the unanchored prediction beside it
    rows = load_results(tmp_path / "out" / "sim-vs-real")
    assert rows["held_out"].astype(bool).all() and (rows["config"] == "clients=2").all()
    assert (rows["anchor_factor"].astype(float) > 0).all() and (rows["anchor_real_ops_s"].astype(float) > 0).all()
    assert rows["unanchored_sim_throughput_ops_s"].astype(float).gt(0).all()


@pytest.mark.slow
def test_make_run_quick_suite(tmp_path):
    """The main job end to end (what `make run` runs): every item of the quick suite, report.html, exit 0."""
    from seedance.cli import main

    assert main(["report", "--out", str(tmp_path / "report"), "--json"]) == 0
    summary = json.loads((tmp_path / "report" / "summary.json").read_text())
    items = summary["sections"][1]["summary"]["items"]
    assert [i["name"] for i in items] == list(suite.NAMES)
    assert all(i["error"] is None and i["points_failed"] == 0 for i in items)
    assert (tmp_path / "report" / "report.html").is_file()


def test_the_sweeps_host_profile_is_fitted_on_profile_clients_whichever_point_measures_it(tmp_path, monkeypatch):
    """The sweep's first point (2 clients in the suite's order) used to fit the profile on its own clients; now it
    is measured on ``profile_clients`` (8), once per profile setting, and a profile already there for the same
    setting is reused."""
    from seedance.models.host import HostProfile, LogNormal
    from seedance.paper import runners
    from seedance.experiments import host_profile as real_profile
    from seedance.sweep.runners import POINT_DIR_ENV

    measured = []

    def fake_profile_host(work_dir, *, nodes, clients, duration_s, runs):
        measured.append((Path(work_dir).name, nodes, clients, duration_s, runs))
        return HostProfile(cores=2, cpu={k: LogNormal(2e-5) for k in ("message", "timer", "client", "persisted",
                                                                          "collective", "work")},
                           io_per_input=LogNormal(1e-4), fsync=LogNormal(4e-4), write_bandwidth_GBps=0.4,
                           loopback=LogNormal(1e-5), client_per_op=LogNormal(1e-4),
                           measured={"config": {"protocol": "raft", "nodes": nodes, "clients": clients,
                                                "duration_s": duration_s, "runs": runs}})

    monkeypatch.setattr(real_profile, "profile_host", fake_profile_host)
    monkeypatch.setenv(POINT_DIR_ENV, str(tmp_path / "runs" / "point-0"))
    first = runners._sim_vs_real_setup({"clients": 2, "profile_duration_s": 1.0, "profile_runs": 1})
    profile, path = runners._sweep_profile(first)
    assert measured == [("profile-work", 3, 8, 1.0, 1)] and path == str(tmp_path / "host.yaml")
    assert profile.measured["config"]["clients"] == 8
    again = runners._sweep_profile(runners._sim_vs_real_setup({"clients": 8, "profile_duration_s": 1.0,
                                                               "profile_runs": 1}))
    assert len(measured) == 1 and again[1] == path  # the same setting: measured once
    other = runners._sweep_profile(runners._sim_vs_real_setup({"clients": 2, "profile_clients": 4,
                                                               "profile_duration_s": 1.0, "profile_runs": 1}))
    assert measured[1][2] == 4 and other[1] != path and other[0].measured["config"]["clients"] == 4
    with pytest.raises(SpecError, match="params.profile_clients"):
        runners._sim_vs_real_setup({"profile_clients": 0})


def test_the_sim_vs_real_figure_marks_the_fitted_workload_as_reproducibility():
    """The profile's own workload compares the fit with its own data: drawn hollow and labelled so; the held-out
    ones filled."""
    import pandas as pd

    rows = [{"status": "ok", "protocol": "raft", "config": config, "held_out": held, "real_throughput_ops_s": real,
             "sim_throughput_ops_s": real * 0.9, "real_latency_ms_p99": 5.0, "sim_latency_ms_p99": 4.5}
            for config, held, real in (("clients=2", True, 900.0), ("clients=8", False, 2500.0)) for _ in range(2)]
    figure = figures.sim_vs_real(pd.DataFrame(rows))
    ax = figure.axes[0]
    labels = {bars.get_label(): bars.lines[0] for bars in ax.containers}  # errorbar: label and data line
    assert set(labels) == {"raft, clients=2", "raft, clients=8 (fitted: reproducibility)"}
    assert labels["raft, clients=8 (fitted: reproducibility)"].get_markerfacecolor() == "none"
    assert labels["raft, clients=2"].get_markerfacecolor() != "none"
