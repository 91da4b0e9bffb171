"""Hypothesis drives every CLI command with random argument values and random input files (issue R).

The properties, for every command line drawn:

* never a traceback: :func:`seedance.cli.main` returns (an exception escaping it would print one);
* the exit status is 0 or 2 (``check linearizable`` may also answer 1 "not linearizable" or 3 "unknown", and a
  simulation 1 on a safety violation — verdicts, not errors); an exit 2 prints exactly one line on stderr;
* after an exit 2 nothing exists under ``--out`` (it is a fresh path each time): inputs are checked before work.

Values mix the valid (kept small, so a run that is accepted finishes in well under a second) with the invalid: NaN,
infinities, overflow, negatives, huge sizes, garbage, empty and repeated list items, unwritable and occupied
output paths. Input files (topologies, histories, report specs) are drawn as random YAML/JSON documents, near-valid
and broken, duplicate keys included. Commands that start processes or minutes of work (``real run``, ``real
calibrate``/``validate``, ``experiment convergence``) are driven with at least one invalid value, so they must be
refused before starting anything. The default run takes a few tens of seconds; ``test_cli_fuzz_long`` (slow) runs
ten times as many examples.
"""

from __future__ import annotations

import contextlib
import io
import itertools
import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import _fuzz_inputs as fuzz_inputs
from seedance.cli import main

pytestmark = pytest.mark.filterwarnings("ignore")

_COUNTER = itertools.count()
BAD_NUMBERS = ["nan", "inf", "-inf", "1e400", "-1", "-0.5", "0", "1e308", "abc", "", " ", "1,2", "0x10", "1e-400",
               "99999999999999999999999"]
BAD_INTS = ["-5", "0", "1.5", "nan", "inf", "1e3", "abc", "", "100000", "99999999999999999999999", "-1"]
FAULTS = ["crash", "loss", "duplicate", "partition", "leader-crash", "pause", "nosuch", "", "crash,,crash",
          "loss,loss", "none"]


def _num(valid: list[str]) -> st.SearchStrategy[str]:
    return st.one_of(st.sampled_from(valid), st.sampled_from(BAD_NUMBERS))


def _int(valid: list[str]) -> st.SearchStrategy[str]:
    return st.one_of(st.sampled_from(valid), st.sampled_from(BAD_INTS))


def run_cli(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue(), err.getvalue()


def _fresh(base: Path) -> Path:
    return base / f"out-{next(_COUNTER)}"


OUT_KINDS = st.sampled_from(["fresh", "fresh", "fresh", "proc", "file", "nested"])


def _out_path(base: Path, kind: str) -> tuple[str, Path | None]:
    """An --out value and the path that must not exist after an exit 2 (None: not ours to judge)."""
    if kind == "proc":
        return "/proc/seedance-fuzz/x", None
    if kind == "file":
        occupied = base / f"file-{next(_COUNTER)}"
        occupied.write_text("occupied")
        return str(occupied), None
    path = _fresh(base) / "a" / "b" if kind == "nested" else _fresh(base)
    return str(path), path


def _check(code: int, err: str, argv: list[str], out: Path | None, allowed: set[int] = frozenset({0, 2})) -> None:
    assert code in allowed, f"exit {code} for {argv}: {err[-2000:]}"
    assert "Traceback" not in err, f"traceback for {argv}: {err}"
    if code == 2:
        lines = [line for line in err.splitlines() if line.strip()]
        assert len(lines) == 1 and lines[0].startswith("seedance: error:"), f"{argv}: {err!r}"
        if out is not None:
            assert not out.exists(), f"{out} was left behind after exit 2 for {argv}"


# ------------------------------------------------------------------------------------------------ input documents
_scalar = st.one_of(st.none(), st.booleans(), st.integers(-10, 10**6), st.floats(allow_nan=True, allow_infinity=True),
                    st.text(max_size=6))
_matrix = st.integers(1, 4).flatmap(lambda n: st.lists(st.lists(st.one_of(
    st.sampled_from([0, 1, 25, 300, 1e308, -1, "x", None]), st.floats(0.1, 1e3)), min_size=n, max_size=n),
    min_size=n, max_size=n))
TOPOLOGY_DOCS = st.one_of(
    st.fixed_dictionaries({"bandwidth_GBps": _matrix},
                          optional={"latency_us": st.one_of(_scalar, _matrix), "name": _scalar,
                                    "hosts": st.lists(_scalar, max_size=4), "device_kinds": _scalar}),
    st.dictionaries(st.sampled_from(["devices", "links", "switches", "name", "bandwidth_GBps"]),
                    st.one_of(_scalar, st.lists(st.dictionaries(st.sampled_from(["id", "kind", "host", "ends",
                                                                                  "bandwidth_GBps"]),
                                                                _scalar, max_size=3), max_size=3))),
    _scalar,
)


def _text_of(doc: object, fmt: str, dup: bool) -> str:
    text = json.dumps(doc, allow_nan=True) if fmt == "json" else json.dumps(doc, allow_nan=True)  # JSON is YAML
    if dup and isinstance(doc, dict) and doc:
        key = next(iter(doc))
        text = text.rstrip("}") + (", " if len(doc) else "") + json.dumps(key) + ": 1}"
    return text


def _write_doc(base: Path, doc: object, fmt: str, dup: bool) -> str:
    path = base / f"doc-{next(_COUNTER)}.{fmt}"
    path.write_text(_text_of(doc, fmt, dup), encoding="utf-8")
    return str(path)


TOPOLOGY_ARGS = st.one_of(st.sampled_from(["dgx-a100", "hgx-h100", "pcie-8gpu", "mixed", "nosuch", ""]),
                          st.tuples(TOPOLOGY_DOCS, st.sampled_from(["yaml", "json"]), st.booleans()))


def _topology(base: Path, value: object) -> str:
    return value if isinstance(value, str) else _write_doc(base, *value)


# ------------------------------------------------------------------------------------------------------ sim run
SIM_OPTIONS = {
    "--nodes": _int(["1", "3", "5"]),
    "--clients": _int(["0", "1", "4"]),
    "--duration": _num(["0.01", "0.03"]),
    "--seed": _int(["0", "7", "123456789"]),
    "--nemesis": st.sampled_from(FAULTS),
    "--faulty-fraction": _num(["0.5", "1"]),
    "--workload": st.sampled_from(["closed", "open", "nosuch"]),
    "--rate": _num(["100", "2000"]),
    "--mix": st.sampled_from(["0.5,0.4,0.1", "1,0,0", "0.5,0.5", "nan,0,1", "-1,1,1", "a,b,c"]),
    "--keys": _int(["1", "3"]),
    "--key-dist": st.sampled_from(["uniform", "zipf", "zipf:1.5", "zipf:inf", "conflict:0.5", "conflict:2", "x"]),
    "--op-timeout": _num(["0.01", "0.5"]),
    "--set": st.sampled_from(["heartbeat_s=0.01", "nosuch=1", "reads=\"log\"", "heartbeat_s=NaN", "max_inflight=0",
                              "heartbeat_s=1e400", "x", "reads={\"a\":1,\"a\":2}"]),
    "--extra": st.sampled_from(['{"cpu": {"message_s": 5e-6}}', '{"cpu": {"message_s": 1e999}}', "{", "[]",
                                '{"cpu": {}, "cpu": {}}', '{"nosuch": {}}', '{"workload": {"think_s": NaN}}']),
    "--check-timeout": _num(["5"]),
    "--hosts": _int(["1", "2"]),
}


@st.composite
def sim_argv(draw, base: Path) -> tuple[list[str], Path | None]:
    argv = ["sim", "run", "--duration", "0.02", "--no-trace"]
    chosen = draw(st.lists(st.sampled_from(sorted(SIM_OPTIONS)), unique=True, max_size=5))
    for name in chosen:
        argv += [name, draw(SIM_OPTIONS[name])]
    if draw(st.booleans()):
        argv += ["--topology", _topology(base, draw(TOPOLOGY_ARGS))]
    out, judged = _out_path(base, draw(OUT_KINDS))
    argv += ["--out", out]
    if draw(st.booleans()):
        argv.append("--json")
    return argv, judged


# -------------------------------------------------------------------------------------------------------- cost
@st.composite
def cost_argv(draw, base: Path) -> tuple[list[str], Path | None]:
    argv = ["cost", draw(st.sampled_from(["allreduce", "allgather", "sendrecv", "nosuch", ""])),
            "--topology", _topology(base, draw(TOPOLOGY_ARGS)),
            "--size", draw(st.sampled_from(["1GiB", "8B:1MiB", "1e9", "0", "-1", "1e400", "8B:8x", "nan", "1.5B",
                                            "64MiB:1KiB", "8B:1GiB:1"]))]
    if draw(st.booleans()):
        argv += ["--nodes", draw(_int(["1", "2"]))]
    if draw(st.booleans()):
        argv += ["--tau", draw(st.sampled_from(["1ms", "0=1ms,0=2ms", "0=1ms", "1e400", "nan", "-1", "0,1", ",",
                                                "0=1ms,1"]))]
    if draw(st.booleans()):
        argv += ["--algorithm", draw(st.sampled_from(["auto", "ring", "tree", "nosuch"]))]
    if draw(st.booleans()):
        argv += ["--model", draw(st.sampled_from(["nccl", "alpha-beta", "nosuch"]))]
    return argv + (["--json"] if draw(st.booleans()) else []), None


# ---------------------------------------------------------------------------------------------------- topology
@st.composite
def topology_argv(draw, base: Path) -> tuple[list[str], Path | None]:
    sub = draw(st.sampled_from(["list", "show", "show", "heatmap"]))
    argv = ["topology", sub]
    judged = None
    if sub != "list":
        argv.append(_topology(base, draw(TOPOLOGY_ARGS)))
        if draw(st.booleans()):
            argv += ["--nodes", draw(_int(["1", "2"]))]
    if sub == "heatmap":
        out, judged = _out_path(base, draw(OUT_KINDS))
        argv += ["--out", out]
        if draw(st.integers(0, 3)):  # drawing is slow: mostly refuse before it
            argv += ["--nodes", draw(st.sampled_from(BAD_INTS))]
    return argv + (["--json"] if draw(st.booleans()) else []), judged


# ------------------------------------------------------------------------------------------------------- check
_event = st.fixed_dictionaries(
    {"process": st.one_of(st.integers(0, 3), st.sampled_from([-1, "p", None])),
     "type": st.sampled_from(["invoke", "ok", "fail", "info", "nosuch"]),
     "f": st.sampled_from(["read", "write", "cas", "nosuch"]),
     "time": st.one_of(st.floats(0, 10), st.sampled_from([-1.0, float("nan"), float("inf")]))},
    optional={"key": st.sampled_from(["k0", "k1", 3, None]),
              "value": st.one_of(st.integers(-3, 3), st.none(), st.lists(st.integers(0, 3), max_size=3),
                                 st.sampled_from([float("nan"), 1e308]))},
)


@st.composite
def check_argv(draw, base: Path) -> tuple[list[str], Path | None]:
    path = base / f"history-{next(_COUNTER)}.jsonl"
    events = draw(st.lists(_event, max_size=8))
    lines = [json.dumps(e, allow_nan=True) for e in events]
    extra = draw(st.sampled_from(["", "garbage", "{}", '{"process": 1, "process": 2}', '{"value": 1e400}', "\n\n"]))
    path.write_text("\n".join(lines + ([extra] if extra else [])) + "\n", encoding="utf-8")
    argv = ["check", "linearizable", str(path), "--model", draw(st.sampled_from(["kv", "register", "cas-register",
                                                                                  "nosuch"]))]
    if draw(st.booleans()):
        argv += ["--timeout", draw(_num(["1", "0"]))]
    return argv + (["--json"] if draw(st.booleans()) else []), None


# ---------------------------------------------------------------------------------------- report, figure, slow ones
@st.composite
def report_argv(draw, base: Path) -> tuple[list[str], Path | None]:
    spec = {"cost": draw(st.fixed_dictionaries({}, optional={
        "presets": st.sampled_from([[], [["dgx-a100", 1]], [["dgx-a100", 1], ["dgx-a100", 1]], [["mixed", 1]],
                                    [["nosuch", 1]], [["dgx-a100", 1000]], "x"]),
        "table_sizes": st.sampled_from([[], ["8B"], ["8B", "8B"], ["1e400"], [1e308], "x"]),
        "curve_sizes": st.sampled_from(["8B:1x", "8B:1MiB:0", 5, "nan"]),
        "collectives": st.sampled_from([[], ["allreduce", "allreduce"], ["nosuch"]]),
    }))}
    bad_key, bad_value = draw(st.sampled_from([  # always one invalid value: a valid report takes many seconds
        ("presets", []), ("presets", [["dgx-a100", 1], ["dgx-a100", 1]]), ("presets", [["mixed", 1]]),
        ("table_sizes", []), ("table_sizes", ["8B", "8B"]), ("table_sizes", [1e308]), ("curve_sizes", "8B:1x"),
        ("curve_sizes", "nan"), ("collectives", []), ("collectives", ["allreduce", "allreduce"]), ("colour", "red"),
        ("algorithm", "nosuch"), ("heatmap_presets", [["nosuch", 1]])]))
    spec["cost"][bad_key] = bad_value
    spec_path = _write_doc(base, spec, draw(st.sampled_from(["yaml", "json"])), draw(st.booleans()))
    out, judged = _out_path(base, draw(OUT_KINDS))
    return ["report", "--spec", spec_path, "--out", out], judged


@st.composite
def figure_argv(draw, base: Path) -> tuple[list[str], Path | None]:
    out, judged = _out_path(base, draw(OUT_KINDS))
    argv = ["figure", "fabric", "--out", out,
            "--presets", draw(st.sampled_from(["mixed", "dgx-a100,dgx-a100", "nosuch", "", ",", "dgx-a100"]))]
    argv += ["--nodes", draw(st.sampled_from(BAD_INTS + ["1"]))]
    return argv, judged


@st.composite
def refused_argv(draw, base: Path) -> tuple[list[str], Path | None]:
    """Commands that would start processes or minutes of work: always with at least one invalid value."""
    out, judged = _out_path(base, draw(st.sampled_from(["fresh", "nested", "proc"])))
    kind = draw(st.sampled_from(["real-run", "calibrate", "validate", "experiment"]))
    if kind == "real-run":
        bad = draw(st.sampled_from([
            ["--seed", "-5"], ["--set", "nosuch=1"], ["--bind", "999.1.1.1"], ["--restart-delay", "-1"],
            ["--nodes", "60"], ["--duration", "inf"], ["--duration", "nan"], ["--kill-rate", "1e400"],
            ["--nemesis", "crash,,crash"], ["--value-size", "99999999999"], ["--mix", "1,1,1"],
            ["--protocol", "nosuch"], ["--faulty-fraction", "0"], ["--clients", "0"]]))
        good = draw(st.sampled_from([[], ["--nodes", "3"], ["--duration", "1"], ["--kill-rate", "5"]]))
        return ["real", "run", *good, *bad, "--out", out], judged
    if kind == "calibrate":
        bad = draw(st.sampled_from([["--world-size", "0"], ["--world-size", "999"], ["--reps", "0"],
                                    ["--sizes", "1e400"], ["--warmups", "-1"], ["--min-sample-ms", "nan"]]))
        return ["real", "calibrate", "--world-size", "2", *bad, "--out", str(Path(out) / "t.yaml")], judged
    if kind == "validate":
        bad = draw(st.sampled_from([["--world-size", "0"], ["--reps", "-1"], ["--min-sample-ms", "inf"]]))
        topo = _write_doc(base, {"bandwidth_GBps": [[0, 1], [1, 0]]}, "yaml", False)
        return ["real", "validate", "--world-size", "2", "--topology", topo, *bad,
                "--figure", str(Path(out) / "v")], judged
    bad = draw(st.sampled_from([["--seeds", "1"], ["--seeds", "100000"], ["--seed", "-1"], ["--seeds", "nan"]]))
    return ["experiment", "convergence", "--quick", *bad, "--out", out], judged


COMMANDS = {
    "sim": (sim_argv, {0, 1, 2}, 40),
    "cost": (cost_argv, {0, 2}, 40),
    "topology": (topology_argv, {0, 2}, 30),
    "check": (check_argv, {0, 1, 2, 3}, 60),
    "report": (report_argv, {2}, 25),
    "figure": (figure_argv, {0, 2}, 15),
    "refused": (refused_argv, {2}, 40),
}


def _fuzz(name: str, tmp_path_factory, scale: int) -> None:
    strategy, allowed, examples = COMMANDS[name]
    base = tmp_path_factory.mktemp(f"fuzz-{name}")

    @settings(max_examples=examples * scale, deadline=None, database=None, derandomize=scale == 1,
              suppress_health_check=list(HealthCheck))
    @given(strategy(base))
    def prop(case):
        argv, judged = case
        code, _, err = run_cli(argv)
        _check(code, err, argv, judged, allowed)

    prop()


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_cli_fuzz(name, tmp_path_factory):
    _fuzz(name, tmp_path_factory, 1)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_cli_fuzz_long(name, tmp_path_factory):
    _fuzz(name, tmp_path_factory, 10)


@pytest.mark.parametrize("argv, code", [([], 0), (["--help"], 0), (["sim"], 0), (["nosuch"], 2),
                                        (["sim", "faults"], 0), (["topology", "list", "--json"], 0)])
def test_bare_and_help_commands(argv, code):
    """Bare ``seedance`` (and a bare group) prints its help on stdout and exits 0; an unknown command is one line."""
    got, out, err = run_cli(argv)
    assert got == code
    if argv in ([], ["--help"], ["sim"]):
        assert out.startswith("Usage: seedance") and "Commands:" in out
    if code == 2:
        assert len(err.strip().splitlines()) == 1


def test_refused_commands_start_nothing(tmp_path):
    """An exit 2 from ``real run`` happens before any process: no node log, no key file, no directory."""
    out = tmp_path / "real"
    code, _, err = run_cli(["real", "run", "--nodes", "3", "--bind", "999.1.1.1", "--out", str(out)])
    assert code == 2 and "--bind" in err and not out.exists()


# ------------------------------------------------------------------------- every command, found by walking the tree
def _walk(cmd=None, path=()):
    """Every leaf command of the CLI with its path of names."""
    import click

    from seedance.cli import cli

    cmd = cli if cmd is None else cmd
    if isinstance(cmd, click.Group):
        for name, sub in sorted(cmd.commands.items()):
            yield from _walk(sub, [*path, name])
    else:
        yield list(path), cmd


def _leaf_commands():
    import click

    for path, cmd in _walk():
        for p in cmd.params:
            numeric = isinstance(p.type, (click.types.IntParamType, click.types.FloatParamType)) or \
                type(p.type).__name__ in ("Number", "Integer")
            if isinstance(p, click.Option) and not p.is_flag and numeric:
                yield pytest.param(path, cmd, p.opts[0], id=f"{' '.join(path)} {p.opts[0]}")


@pytest.mark.parametrize("path, cmd, option", list(_leaf_commands()))
@pytest.mark.parametrize("bad", ["nan", "inf", "1e400", "abc"])
def test_every_numeric_option_of_every_command_refuses_non_numbers(path, cmd, option, bad, tmp_path):
    """Commands added later are covered too: each numeric option given NaN, infinity, an overflowing literal or
    garbage is refused in one line with exit 2 before any work (no --out left behind)."""
    import click

    out = tmp_path / "out"
    argv = [*path, option, bad]
    for p in cmd.params:
        if isinstance(p, click.Option) and p.name and ("out" in p.name or "figure" in p.name) and not p.is_flag:
            argv += [p.opts[0], str(out)]
        elif isinstance(p, click.Argument):
            argv.append("allreduce" if "collective" in (p.name or "") else str(tmp_path / "missing"))
        elif p.required and p.opts[0] != option:
            argv += [p.opts[0], "2"]
    code, _, err = run_cli(argv)
    _check(code, err, argv, out, {2})


def _output_commands():
    import click

    for path, cmd in _walk():
        outs = [p for p in cmd.params if isinstance(p, click.Option) and not p.is_flag
                and p.name in ("out", "out_dir", "out_file", "figure_stem")]
        if outs:
            yield pytest.param(path, cmd, outs, id=" ".join(path))


@pytest.mark.parametrize("path, cmd, outs", list(_output_commands()))
def test_every_command_checks_its_output_before_any_work(path, cmd, outs):
    """An output under /proc cannot be written: every command that writes files says so in one line, exit 2, at
    once (with --quick where there is one; a command that did its work first would take seconds to minutes)."""
    import click

    argv = list(path)
    for p in cmd.params:
        if p in outs:
            argv += [p.opts[0], "/proc/seedance-fuzz/y" + (".yaml" if p.name == "out_file" else "")]
        elif isinstance(p, click.Argument):
            argv.append("allreduce" if "collective" in (p.name or "") else "dgx-a100")
        elif p.required:
            argv += [p.opts[0], "2"]
        elif "--quick" in p.opts:
            argv.append("--quick")
    code, _, err = run_cli(argv)
    _check(code, err, argv, None, {2})


# ---------------------------------------------------------------------------------- every command that reads a file
@st.composite
def file_content(draw, kind: str, fmt: str, random_ok: bool) -> bytes:
    """A file for a command reading ``kind``: a random structure (if ``random_ok``) or a near-valid one with one
    defect (always, if not)."""
    data = draw(st.data())
    if kind == "history":
        defect = draw(st.sampled_from([*([None, "structure"] if random_ok else []), "bigint", "deep", "dup", "bytes",
                                       "badutf8", "nul", "truncated"]))
        return fuzz_inputs.history_text(fuzz_inputs.HISTORY, defect, data)
    if random_ok and draw(st.integers(0, 3)) == 0:
        return fuzz_inputs.render(draw(fuzz_inputs.STRUCTURES), fmt).encode()
    text = fuzz_inputs.render(fuzz_inputs.BASES[kind](), fmt)
    defects = [d for d in fuzz_inputs.DEFECTS if random_ok or d not in ("bom", "truncated")]
    return fuzz_inputs.defective(text, fmt, draw(st.sampled_from(defects)), data)


def _file_fuzz(name: str, tmp_path_factory, examples: int, derandomize: bool) -> None:
    kind, suffixes, argv_of, allowed, random_ok = fuzz_inputs.FILE_COMMANDS[name]
    base = tmp_path_factory.mktemp("fuzz-files")

    @settings(max_examples=examples, deadline=None, database=None, derandomize=derandomize,
              suppress_health_check=list(HealthCheck))
    @given(st.sampled_from(suffixes).flatmap(lambda fmt: st.tuples(st.just(fmt), file_content(kind, fmt, random_ok))))
    def prop(case):
        fmt, content = case
        path = base / f"input-{next(_COUNTER)}.{fmt}"
        path.write_bytes(content)
        argv = argv_of(str(path), base, _COUNTER)
        code, _, err, _ = fuzz_inputs.run_guarded(argv, 30.0)
        _check(code, err, argv, None, allowed)

    prop()


@pytest.mark.parametrize("name", sorted(fuzz_inputs.FILE_COMMANDS))
def test_file_inputs_fuzz(name, tmp_path_factory):
    """Every command that reads a file, given random bytes, random YAML/JSON structures and near-valid files with
    aliases, 5,000-digit integers, repeated keys, deep nesting, tags, bad UTF-8: exit 0 or 2 (a verdict where the
    command gives one), one line on stderr for 2, never a traceback, never past the per-example deadline."""
    _file_fuzz(name, tmp_path_factory, 16, True)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(fuzz_inputs.FILE_COMMANDS))
def test_file_inputs_fuzz_long(name, tmp_path_factory):
    _file_fuzz(name, tmp_path_factory, 300, False)


@pytest.mark.parametrize("name, command, fmt, content, says", fuzz_inputs.FILE_PROBES,
                         ids=[p[0] for p in fuzz_inputs.FILE_PROBES])
def test_issue_probes_exit_2_at_once(name, command, fmt, content, says, tmp_path):
    """The inputs that hung forever (a self-referential alias, a billion laughs) or ended in a traceback (a binary
    host profile, a 5,000-digit integer in a history): exit 2 within 5 s, one line naming the file or line."""
    path = tmp_path / f"probe.{fmt}"
    path.write_bytes(content)
    argv = fuzz_inputs.FILE_COMMANDS[command][2](str(path), tmp_path, _COUNTER)
    code, _, err, elapsed = fuzz_inputs.run_guarded(argv, 5.0)
    _check(code, err, argv, None, {2})
    assert elapsed < 5.0
    assert path.name in err and ("line 1" in err or fmt != "jsonl"), err
    assert says in err, err
