"""paper/*.tex types no number by hand: every number of its text is a macro of the generated macros.tex
(seedance.paper.macros), defined before its first use, and every file the paper reads is one the suite writes.

There is no pdflatex here, so these tests parse the LaTeX themselves. What a digit may be in a hand-written .tex file:

* part of a comment (``% ...``): not typeset;
* in an optional argument right after a command (``\\documentclass[10pt]``, ``\\usepackage[margin=2cm]``,
  ``\\begin{figure}[h]``, ``\\includegraphics[width=.8\\linewidth]``, ``\\newcommand{\\x}[1]``): options, lengths and
  argument counts, not claims;
* in the argument of a cross-reference or file command (``\\ref``, ``\\label``, ``\\cite``, ``\\input``,
  ``\\includegraphics``, ``\\tablefit``, ``\\begin``/``\\end``, ``\\usepackage``, ``\\documentclass``): names of
  things, not numbers;
* a macro parameter (``#1``);
* a length: a number followed by a TeX unit (``2mm``, ``10pt``) or by a length register (``.5\\linewidth``);
* glued to a letter before it: part of a name (``F1``, ``A100``, ``dgx-a100``, ``p99``, ``L2``);
* a section number of the seed after ``\\S`` (``\\S2.5``): a citation of the seed's text, not a measurement.

Any other digit is a number typed into the prose, and fails the test with its line.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from seedance.paper import macros, suite

PAPER = Path(__file__).resolve().parents[1] / "paper"
NAME_COMMANDS = ("ref", "label", "cite", "input", "includegraphics", "tablefit", "begin", "end", "usepackage",
                 "documentclass", "eqref", "pageref", "autoref")
UNITS = r"(?:pt|cm|mm|in|em|ex|bp|pc|sp|dd|cc)\b"
LENGTHS = r"\\(?:linewidth|textwidth|columnwidth|hsize|textheight|baselineskip)"
NUMBER = re.compile(r"(?<![A-Za-z0-9.])\.?\d+(?:[.,]\d+)*")


def strip_allowed(line: str) -> str:
    """``line`` without everything a digit may legitimately be part of (see the module docstring)."""
    line = re.sub(r"(?<!\\)%.*", "", line)  # comments
    line = re.sub(r"(\\[A-Za-z]+\*?(?:\{[^{}]*\})?)\[[^\]]*\]", r"\1", line)  # optional arguments of commands
    line = re.sub(r"\\(%s)\*?\{[^{}]*\}" % "|".join(NAME_COMMANDS), r"\\\1{}", line)  # names and files
    line = re.sub(r"#\d", "", line)  # macro parameters
    line = re.sub(r"\d*\.?\d+\s*(?:%s|%s)" % (UNITS, LENGTHS), "", line)  # lengths
    line = re.sub(r"\\S\{?\}?\s*\d+(?:\.\d+)*", "", line)  # the seed's section numbers
    return line


def typed_numbers(text: str) -> list[tuple[int, str, str]]:
    """(line number, the number, the line) of every number typed by hand."""
    found = []
    for k, line in enumerate(text.splitlines(), 1):
        for match in NUMBER.finditer(strip_allowed(line)):
            found.append((k, match.group(), line.strip()))
    return found


def test_the_scanner_flags_typed_numbers_and_allows_names_options_and_lengths():
    flagged = ["a 512\\,MiB allreduce", "every 0.2\\,s", "rank 0's memory", "16 clients", "at 1,000 ops/s",
               "took 12ms", "\\textbf{42} runs", "(3 of 4)", "\\texttt{--runs 5}"]
    for text in flagged:
        assert typed_numbers(text), text
    allowed = ["F1--F8 on dgx-a100 and hgx-h100 (V100/A100), p99 and L2",
               "\\begin{figure}[h]\\centering\\includegraphics[width=.8\\linewidth]{figures/sim-vs-real.pdf}",
               "\\documentclass[10pt]{article}", "\\usepackage[margin=2cm]{geometry}",
               "\\newcommand{\\tablefit}[1]{\\resizebox{\\linewidth}{!}{\\input{#1}}}", "\\vspace{2mm}",
               "\\parbox{.5\\linewidth}{x}", "see~\\ref{fig:2} and \\cite{kaplan2020}", "the seed's \\S2.5 table",
               "\\sdRuns{} runs % 1,249 at full size", "\\label{tab:f2}"]
    for text in allowed:
        assert not typed_numbers(text), text


@pytest.mark.parametrize("path", sorted(PAPER.glob("*.tex")), ids=lambda p: p.name)
def test_no_number_is_typed_by_hand_in_the_paper(path):
    found = typed_numbers(path.read_text(encoding="utf-8"))
    assert not found, "numbers typed by hand (make them macros in seedance/paper/macros.py):\n" + "\n".join(
        f"{path.name}:{k}: {number!r} in {line}" for k, number, line in found)


def used_macros(text: str) -> list[str]:
    body = "\n".join(re.sub(r"(?<!\\)%.*", "", line) for line in text.splitlines())
    return re.findall(r"\\(sd[A-Za-z]+)", body)


def defined_macros(text: str) -> list[str]:
    return re.findall(r"\\newcommand\{\\(sd[A-Za-z]+)\}", text)


def read_files(text: str) -> set[str]:
    """Every file paper.tex reads: \\input, \\tablefit (a table file) and \\includegraphics arguments."""
    body = "\n".join(re.sub(r"(?<!\\)%.*", "", line) for line in text.splitlines())
    return set(re.findall(r"\\(?:input|tablefit|includegraphics)(?:\[[^\]]*\])?\{([^{}#]+)\}", body))


@pytest.fixture(scope="module")
def empty_macros(tmp_path_factory):
    out = tmp_path_factory.mktemp("nothing-run")
    macros.write(out, "quick")
    return (out / "macros.tex").read_text(encoding="utf-8")


def test_every_macro_the_paper_uses_is_defined_once_before_its_first_use(empty_macros):
    paper = (PAPER / "paper.tex").read_text(encoding="utf-8")
    defined = defined_macros(empty_macros)
    assert len(defined) == len(set(defined))
    used = used_macros(paper)
    assert used, "paper.tex uses no macro"
    assert sorted(set(used) - set(defined)) == []
    first_use = min(paper.index("\\" + name) for name in set(used))
    assert paper.index("\\input{macros.tex}") < first_use


def test_every_file_the_paper_reads_is_one_the_suite_writes():
    paper = (PAPER / "paper.tex").read_text(encoding="utf-8")
    written = {"macros.tex", "sizes.tex", "cost.tex"}  # macros.write; seedance report's cost section
    written |= {f"tables/{name}.tex" for name in suite.NAMES} | {f"figures/{name}.pdf" for name in suite.NAMES}
    assert read_files(paper) <= written
    assert {f"tables/{n}.tex" for n in suite.NAMES} <= read_files(paper)  # every item is in the paper


def test_without_results_every_measured_macro_says_so(empty_macros):
    values = dict(re.findall(r"\\newcommand\{\\(sd[A-Za-z]+)\}\{(.*)\}", empty_macros))
    assert values["sdRuns"] == "0" and values["sdItemsRun"] == "0"
    assert values["sdProtocolsRaftOps"] == values["sdMemoryBuggyLeak"] == macros.MISSING
    assert values["sdProtocolsFullRuns"] == "360" and values["sdMemoryFullRuns"] == "6"  # from the specs
    assert values["sdProtocolsSeedSection"] == "\\S{}2.5"


def balanced(text: str) -> bool:
    depth = 0
    for char in re.sub(r"\\[{}]", "", text):
        depth += {"{": 1, "}": -1}.get(char, 0)
        if depth < 0:
            return False
    return depth == 0


TINY = {"fabrics": {"axes": {"grid": {"collective": ["allreduce"], "size": ["1MiB", "1GiB"]},
                             "zip": {"topology": ["dgx-a100", "pcie-8gpu"], "nodes": [4, 1]}}},
        "nccl": {"axes": {"grid": {"curve": ["a100-1x8-allreduce"], "size": [8, 1048576, 1073741824]}}},
        "scenarios": {"axes": {"grid": {"scenario": ["F1", "F4"]}}, "repetitions": 2}}


@pytest.fixture(scope="module")
def tiny_paper(tmp_path_factory):
    """Three items of the paper, each a real (tiny) sweep of its runner, then macros.tex and sizes.tex."""
    import yaml

    from seedance.sweep.spec import merge

    root = tmp_path_factory.mktemp("paper-macros")
    specs = root / "specs"
    specs.mkdir()
    for name in suite.NAMES:
        doc = yaml.safe_load((suite.SPEC_DIR / f"{name}.yaml").read_text())
        if name in TINY:
            doc["quick"] = merge(doc.get("quick", {}), TINY[name])
        (specs / f"{name}.yaml").write_text(yaml.safe_dump(doc))
    results = suite.run_suite("quick", root / "out", names=list(TINY), workers=1, spec_dir=specs)
    assert all(r.error is None and not r.failures for r in results)
    macros.write(root / "out", "quick", spec_dir=specs, cost_size="1 GiB")
    text = (root / "out" / "macros.tex").read_text(encoding="utf-8")
    return root / "out", dict(re.findall(r"\\newcommand\{\\(sd[A-Za-z]+)\}\{(.*)\}", text)), text


def test_macros_are_computed_from_the_runs(tiny_paper):
    import numpy as np

    from seedance.sweep import load_results

    out, values, _ = tiny_paper
    fabrics = load_results(out / "fabrics" / "results.parquet")
    scenarios = load_results(out / "scenarios" / "results.parquet")
    nccl = load_results(out / "nccl" / "results.parquet")
    assert values["sdFabricsRuns"] == str(len(fabrics)) == "4"
    assert values["sdScenariosRuns"] == str(len(scenarios)) == "8"
    assert values["sdRuns"] == str(len(fabrics) + len(scenarios) + len(nccl))
    assert values["sdItemsRun"] == "3" and values["sdFailed"] == "0"
    largest = fabrics[(fabrics["size_bytes"] == fabrics["size_bytes"].max())]
    best = largest.sort_values("busbw_GBps").iloc[-1]
    assert values["sdFabricsBestCluster"].startswith(best["topology"])
    assert values["sdFabricsBestBusbw"] == macros.num(best["busbw_GBps"])
    assert values["sdFabricsLargest"] == "1\\,GiB" and values["sdCostSize"] == "1\\,GiB"
    buggy = scenarios[scenarios["variant"] == "buggy"]["detected"].astype(float).mean()
    assert values["sdScenariosBuggyDetected"] == macros.pct(buggy)
    present = nccl[nccl["present"].astype(str).str.lower() == "true"]
    model = present[present["model"] == "nccl"]["ratio"].astype(float)
    assert values["sdNcclNcclError"] == macros.pct(float(np.median(np.abs(model - 1))), 2)
    assert values["sdProtocolsRaftOps"] == macros.MISSING  # not run here


def test_macro_values_are_safe_latex(tiny_paper):
    _, values, text = tiny_paper
    for name, value in values.items():
        assert balanced(value), (name, value)
        assert not re.search(r"(?<!\\)[%#&_]", value), (name, value)
    assert text.count("\\newcommand") == len(values)


def test_the_sizes_table_lists_every_item_with_both_sizes(tiny_paper):
    out, _, _ = tiny_paper
    table = (out / "sizes.tex").read_text(encoding="utf-8")
    assert balanced(table)
    for name in suite.NAMES:
        assert f"\n{name} & " in table
    assert "duration 0.2 $\\to$ 1.0" in table  # protocols: simulated seconds per run, quick -> full


def test_number_formatting():
    assert macros.num(61500.4) == "61,500" and macros.num(0.3604) == "0.36"
    assert macros.num(3.7e-5) == "\\ensuremath{3.70\\times10^{-5}}" and macros.num(None) == macros.MISSING
    assert macros.words([3, 5, 7]) == "3, 5 and 7" and macros.words([3]) == "3" and macros.words([]) == "--"
    assert macros.duration(0.042) == "0.042\\,s" and macros.duration(0.0004) != "0\\,s"
    assert macros.duration(42) == "42\\,s" and macros.duration(390) == "6.5\\,min"
    assert macros.camel("sim-vs-real") == "SimVsReal"


def test_macros_cli_rewrites_both_files_and_refuses_a_bad_size(tiny_paper, capsys):
    out, _, _ = tiny_paper
    assert macros.main([str(out)]) == 0
    assert macros.main([str(out), "--size", "huge"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "huge" in err[0] and "quick" in err[0]


def test_seedance_report_writes_the_macros_and_sizes_beside_the_files_the_paper_reads(tmp_path):
    """The cost section alone (seconds): macros.tex and sizes.tex are written with cost.tex; every macro the paper
    uses is defined (items not run: --), and every file paper.tex reads but the items' is there."""
    from seedance.cli import main

    out = tmp_path / "report"
    assert main(["report", "--only", "none", "--out", str(out), "--json"]) == 0
    paper = (PAPER / "paper.tex").read_text(encoding="utf-8")
    text = (out / "macros.tex").read_text(encoding="utf-8")
    assert set(used_macros(paper)) <= set(defined_macros(text))
    assert "\\newcommand{\\sdCostSize}{1\\,GiB}" in text and "\\newcommand{\\sdItemsRun}{0}" in text
    items = {f"tables/{n}.tex" for n in suite.NAMES} | {f"figures/{n}.pdf" for n in suite.NAMES}
    assert sorted(f for f in read_files(paper) - items if not (out / f).is_file()) == []
