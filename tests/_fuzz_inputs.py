"""Input files for the CLI fuzz tests (tests/test_cli_fuzz.py): random bytes, random YAML/JSON structures, and
near-valid documents (a topology, a host profile, a sweep or report spec, a history) with one defect each: a YAML
alias (self-referential, "billion laughs", plain), an integer of 5,000 digits, a repeated key, nesting 5,000 deep,
a YAML 1.1 or Python tag, invalid UTF-8, a NUL byte, a truncation. Every command that reads a file is listed in
:data:`FILE_COMMANDS` with how it is driven; ``FILE_PROBES`` are the inputs that once hung or ended in a traceback.
"""

from __future__ import annotations

import contextlib
import io
import json
import signal
import time
from pathlib import Path
from typing import Any, Callable

import yaml
from hypothesis import strategies as st

from seedance.validation import dumps_yaml

BIG = "9" * 5000  # beyond Python's 4,300-digit limit on int(str)
SELF_ALIAS = "zz: &zz [*zz]\n"
LAUGHS = "l0: &l0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n" + "".join(
    f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]\n" for i in range(1, 10))
DEEP = "[" * 5000 + "]" * 5000
TAGS = ["!!binary aGk=", "!!set {a: null}", "!!python/object/apply:os.system ['true']", "!!omap [a: 1]",
        "!!pairs [a: 1]", "!!timestamp 2024-01-01", "!foo bar"]  # all refused (plain dates are strings)
DEFECTS = ["dup", "alias-self", "laughs", "alias", "bigint", "deep", "tag", "bytes", "badutf8", "nul", "truncated",
           "bom", "empty"]

_keys = st.one_of(st.text(max_size=6), st.sampled_from([
    "bandwidth_GBps", "latency_us", "devices", "links", "hosts", "name", "cores", "cpu", "fsync", "loopback",
    "process", "type", "f", "key", "value", "time", "runner", "fixed", "axes", "cost", "paper", "presets"]))
_scalars = st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(), st.text(max_size=8),
                     st.sampled_from(["__BIG__", "2024-01-01", "1e400", "yes", "0x1F", "1:2:3", "~", "-.inf"]))
STRUCTURES = st.recursive(_scalars, lambda kids: st.one_of(st.lists(kids, max_size=4),
                                                           st.dictionaries(_keys, kids, max_size=4)), max_leaves=12)


def _big(text: str) -> str:
    return text.replace('"__BIG__"', BIG).replace("'__BIG__'", BIG).replace("__BIG__", BIG)


def render(doc: Any, fmt: str) -> str:
    """``doc`` as JSON or block YAML, with every "__BIG__" string turned into a 5,000-digit integer."""
    return _big(json.dumps(doc, allow_nan=True) if fmt == "json" else dumps_yaml(doc))


def _append(text: str, fmt: str, key_value: str) -> str:
    """One more top-level ``key: value`` entry (YAML: a line; JSON: before the closing brace, the value as is)."""
    if fmt == "yaml":
        return text + key_value + "\n"
    key, _, value = key_value.partition(": ")
    return text.rstrip().rstrip("}") + f', "{key}": {value}}}'


def defective(text: str, fmt: str, defect: str, data: st.DataObject) -> bytes:
    """``text`` (a document whose top level is a mapping) with ``defect``."""
    first_key = next(iter(yaml.safe_load(text) or {"zz": 0}), "zz")
    if defect == "dup":
        return _append(text, fmt, f"{first_key}: 1").encode()
    if defect in ("alias-self", "laughs", "alias"):
        extra = {"alias-self": SELF_ALIAS, "laughs": LAUGHS, "alias": "zz: &zz {a: 1}\nzy: *zz\n"}[defect]
        return (text + extra if fmt == "yaml" else extra + text).encode()
    if defect == "bigint":
        return _append(text, fmt, f"zz: {BIG}").encode()
    if defect == "deep":
        return _append(text, fmt, f"zz: {DEEP}").encode()
    if defect == "tag":
        return _append(text, fmt, f"zz: {data.draw(st.sampled_from(TAGS))}").encode()
    return _raw_defect(text, defect, data)


def _raw_defect(text: str, defect: str, data: st.DataObject) -> bytes:
    raw = text.encode()
    at = data.draw(st.integers(0, len(raw)))
    if defect == "bytes":
        return data.draw(st.binary(max_size=300))
    if defect == "badutf8":
        return raw[:at] + b"\xff\xfe\xc3" + raw[at:]
    if defect == "nul":
        return raw[:at] + b"\x00" + raw[at:]
    if defect == "truncated":
        return raw[:at]
    if defect == "bom":
        return "\ufeff".encode() + raw
    return b""  # empty


def history_text(events: list[dict[str, Any]], defect: str | None, data: st.DataObject) -> bytes:
    """JSON Lines of ``events`` with ``defect`` in one line (None: as they are)."""
    lines = [json.dumps(e) for e in events]
    at = data.draw(st.integers(0, len(lines)))
    bad = {"bigint": '{"process": 0, "type": "invoke", "f": "write", "key": "k", "value": %s, "time": 0.5}' % BIG,
           "deep": DEEP, "dup": '{"process": 0, "process": 1, "type": "invoke", "f": "read", "time": 0.1}',
           "structure": json.dumps(data.draw(STRUCTURES), allow_nan=True)}.get(defect or "")
    if bad is not None:
        lines.insert(at, _big(bad))
    elif defect is not None:
        return _raw_defect("\n".join(lines) + "\n", defect, data)
    return ("\n".join(lines) + "\n").encode()


# ------------------------------------------------------------------------------------------- running under a deadline
class _Hang(BaseException):
    """An example ran past its deadline (a BaseException, so no `except Exception` in the CLI swallows it)."""


@contextlib.contextmanager
def _deadline(seconds: float):
    """Interrupt the block after ``seconds`` (SIGALRM; pytest-timeout's own alarm is put back afterwards)."""

    def expire(signum, frame):
        raise _Hang(f"still running after {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    outer, _ = signal.setitimer(signal.ITIMER_REAL, seconds)
    start = time.monotonic()
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        if outer:
            signal.setitimer(signal.ITIMER_REAL, max(1e-3, outer - (time.monotonic() - start)))


def run_guarded(argv: list[str], seconds: float) -> tuple[int, str, str, float]:
    """``seedance ARGV`` in this process under a deadline: (exit status, stdout, stderr, seconds)."""
    from seedance.cli import main

    out, err = io.StringIO(), io.StringIO()
    start = time.monotonic()
    with _deadline(seconds), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue(), err.getvalue(), time.monotonic() - start


# ------------------------------------------------------------------------------------------ near-valid documents
def _host_profile() -> dict[str, Any]:
    from _host_helpers import small_host

    return small_host().to_dict()


HISTORY = [{"process": 0, "type": "invoke", "f": "write", "key": "k", "value": 1, "time": 0.0},
           {"process": 0, "type": "ok", "f": "write", "key": "k", "value": 1, "time": 0.1},
           {"process": 1, "type": "invoke", "f": "read", "key": "k", "value": None, "time": 0.2},
           {"process": 1, "type": "ok", "f": "read", "key": "k", "value": 1, "time": 0.3}]
BASES: dict[str, Callable[[], Any]] = {
    "topology": lambda: {"name": "two", "bandwidth_GBps": [[0, 25], [25, 0]], "latency_us": [[0, 1], [1, 0]]},
    "host": _host_profile,
    "sweep": lambda: yaml.safe_load(Path("examples/sweeps/cost-allreduce.yaml").read_text()),
    "report": lambda: {"cost": {"presets": [["dgx-a100", 1]], "colour": "red"}},
    "curves": lambda: {"curves": [{"id": "a100", "file": "a100.txt", "collective": "allreduce",
                                   "topology": {"preset": "dgx-a100", "nodes": 1}, "nccl": {}, "targets": True}]},
}
NCCL_OUTPUT = Path("tests/data/nccl/a100-sxm4-80gb_1x8_allreduce.txt")


def _fresh(base: Path, counter: Any) -> str:
    return str(base / f"out-{next(counter)}")


def _data_dir(file: str, base: Path, counter: Any) -> str:
    """A --data directory: ``file`` as its curves.yaml, beside the nccl-tests output that the valid one names."""
    folder = base / f"data-{next(counter)}"
    folder.mkdir()
    Path(file).rename(folder / "curves.yaml")
    (folder / "a100.txt").write_bytes(NCCL_OUTPUT.read_bytes())
    return str(folder)


# name: (document kind, suffixes, argv for FILE, exit statuses allowed, whether a random structure may be drawn; a
# command whose valid input would start processes or minutes of work always gets a defect or an invalid option)
FILE_COMMANDS: dict[str, tuple[str, tuple[str, ...], Callable[[str, Path, Any], list[str]], set[int], bool]] = {
    "topology show": ("topology", ("yaml", "json"), lambda f, b, c: ["topology", "show", f], {0, 2}, True),
    "topology heatmap": ("topology", ("yaml", "json"), lambda f, b, c: [
        "topology", "heatmap", f, "--out", _fresh(b, c)], {0, 2}, True),
    "cost --topology": ("topology", ("yaml", "json"),
                        lambda f, b, c: ["cost", "allreduce", "--topology", f, "--size", "1MiB"], {0, 2}, True),
    "sim run --topology": ("topology", ("yaml", "json"), lambda f, b, c: [
        "sim", "run", "--topology", f, "--duration", "0.02", "--no-trace", "--out", _fresh(b, c)], {0, 1, 2}, True),
    "sim run --host-profile": ("host", ("yaml", "json"), lambda f, b, c: [
        "sim", "run", "--host-profile", f, "--duration", "0.02", "--no-trace", "--out", _fresh(b, c)], {0, 1, 2},
        True),
    "train sim --topology": ("topology", ("yaml", "json"), lambda f, b, c: [
        "train", "sim", "--topology", f, "--world-size", "2", "--steps", "2", "--commit-every", "1"], {0, 2}, True),
    "sim train --topology": ("topology", ("yaml", "json"), lambda f, b, c: [
        "sim", "train", "--topology", f, "--world-size", "2", "--steps", "2", "--commit-every", "1"], {0, 2}, True),
    "real validate --topology": ("topology", ("yaml", "json"), lambda f, b, c: [
        "real", "validate", "--world-size", "2", "--topology", f, "--figure", "/proc/seedance-fuzz/v"], {2}, True),
    "experiment sim-vs-real --host-profile": ("host", ("yaml", "json"), lambda f, b, c: [
        "experiment", "sim-vs-real", "--quick", "--host-profile", f, "--out", _fresh(b, c)], {2}, False),
    "experiment protocols --host-profile": ("host", ("yaml", "json"), lambda f, b, c: [
        "experiment", "protocols", "--quick", "--real", "--host-profile", f, "--out", _fresh(b, c)], {2}, False),
    "report --spec": ("report", ("yaml", "json"), lambda f, b, c: [
        "report", "--spec", f, "--out", _fresh(b, c)], {2}, False),
    "sweep": ("sweep", ("yaml", "json"), lambda f, b, c: ["sweep", f, "--out", _fresh(b, c)], {2}, False),
    "figure validation --data": ("curves", ("yaml",), lambda f, b, c: [
        "figure", "validation", "--data", _data_dir(f, b, c), "--out", _fresh(b, c)], {2}, False),
    "check linearizable": ("history", ("jsonl",), lambda f, b, c: ["check", "linearizable", f], {0, 1, 2, 3}, True),
    "check causal": ("history", ("jsonl",), lambda f, b, c: ["check", "causal", f], {0, 1, 2}, True),
}

# the inputs of issue L that hung forever or ended in a traceback: (id, command, file suffix, file content, what the
# one-line error must say besides the file's name or line)
_LIN = '{"process": 0, "type": "invoke", "f": "write", "key": "k", "value": %s, "time": 0.0}\n' % BIG
_SELF = b"a: &a [*a]\n"
FILE_PROBES = [
    ("self-alias topology show", "topology show", "yaml", _SELF, "alias *a"),
    ("self-alias sim run --topology", "sim run --topology", "yaml", _SELF, "alias *a"),
    ("self-alias report --spec", "report --spec", "yaml", _SELF, "alias *a"),
    ("self-alias sweep", "sweep", "yaml", _SELF, "alias *a"),
    ("self-alias cost --topology", "cost --topology", "yaml", _SELF, "alias *a"),
    ("billion laughs topology show", "topology show", "yaml", LAUGHS.encode(), "alias *l0"),
    ("binary sim run --host-profile", "sim run --host-profile", "yaml", Path("/bin/ls").read_bytes(), "not UTF-8"),
    ("5000-digit check linearizable", "check linearizable", "jsonl", _LIN.encode(), "integer"),
    ("5000-digit check causal", "check causal", "jsonl", _LIN.encode(), "integer"),
    ("!!timestamp topology show", "topology show", "yaml", b"d: !!timestamp 2024-01-01\n", "!!timestamp values"),
    ("!!timestamp report --spec", "report --spec", "yaml", b"d: !!timestamp 2024-01-01\n", "!!timestamp values"),
]
