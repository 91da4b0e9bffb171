"""``seedance experiment failure-scenarios``: the impact table's files and verdicts (simulator rows, one seed)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

from seedance.experiments.scenarios import ROW_FIELDS, run


def test_failure_scenarios_table(tmp_path: Path):
    result = run(quick=True, out=tmp_path, real=False, seeds=1)
    assert result["summary"]["fixed_clean"] and result["summary"]["buggy_detected"]
    rows = result["rows"]
    assert len(rows) == 16 and {r["runtime"] for r in rows} == {"sim"}
    by = {(r["scenario"], r["variant"]): r for r in rows}
    assert by[("F1", "buggy")]["global_resync"] == 0.0 and by[("F1", "buggy")]["param_l2_deviation"] > 0
    assert by[("F4", "buggy")]["global_resync"] == 1.0 and by[("F4", "buggy")]["false_alarms"] == 1
    assert by[("F8", "buggy")]["leaked_handles"] > 0 and by[("F8", "fixed")]["leaked_handles"] == 0
    with open(result["artifacts"]["csv"], newline="") as fh:
        table = list(csv.DictReader(fh))
    assert len(table) == 16 and tuple(table[0]) == ROW_FIELDS
    tex = Path(result["artifacts"]["tex"]).read_text()
    assert tex.startswith(r"\begin{tabular}") and "F1 & seed" in tex and r"\end{tabular}" in tex
    assert Path(result["artifacts"]["png"]).stat().st_size > 10_000
    assert json.loads(Path(result["artifacts"]["json"]).read_text())["summary"]["seed_rows"][0]["scenario"] == "F1"
