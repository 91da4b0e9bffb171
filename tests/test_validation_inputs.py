"""The one YAML/JSON loader (seedance.validation) and file reading: aliases, over-long integers, deep nesting,
YAML 1.1 types, binary files, repeated keys; each refused in one SpecError naming the file and the line."""

from __future__ import annotations

import json
import time

import pytest

from seedance import validation
from seedance.errors import SpecError
from seedance.models.host import load_profile
from seedance.models.topology import load

BIG = "9" * 5000


@pytest.mark.parametrize("text, says", [
    ("a: &a [*a]\n", "line 1: YAML alias *a"),
    ("a: &x {b: 1}\nc: *x\n", "line 2: YAML alias *x"),
    ("a: &x 1\nb: [1, *x]\n", "line 2: YAML alias *x"),
    ("&k a: *k\n", "alias *k"),
    ("base: &b {x: 1}\nother:\n  <<: *b\n  y: 2\n", "alias *b"),  # merge keys need aliases: refused too
])
def test_every_yaml_alias_is_refused_naming_it_and_its_line(text, says):
    with pytest.raises(SpecError, match="not supported") as err:
        validation.loads_yaml(text, "spec x.yaml")
    assert str(err.value).startswith("spec x.yaml: ") and says in str(err.value)


def test_billion_laughs_is_refused_at_once():
    text = "a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n" + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join([f'*{chr(97 + i)}'] * 9)}]\n" for i in range(8))
    start = time.perf_counter()
    with pytest.raises(SpecError, match=r"line 2: YAML alias \*a"):
        validation.loads_yaml(text, "t")
    assert time.perf_counter() - start < 1.0  # 9**9 strings, were they expanded


def test_written_yaml_has_no_aliases_and_reads_back():
    row = [0.0, 25.0]
    doc = {"bandwidth_GBps": [row, row], "meta": {"same": row}}  # shared objects: safe_dump writes &id001/*id001
    text = validation.dumps_yaml(doc)
    assert "&" not in text and "*" not in text
    assert validation.loads_yaml(text, "t") == doc


@pytest.mark.parametrize("fmt, text", [("yaml", f"a: 1\nb: {BIG}\n"), ("json", '{"a": 1,\n "b": %s}' % BIG),
                                       ("yaml", "a: 1\nb: " + ":".join(["1"] * 3000) + "\n")])
def test_an_integer_too_long_to_convert_names_its_line(fmt, text):
    loads = validation.loads_yaml if fmt == "yaml" else validation.loads_json
    with pytest.raises(SpecError, match=r"f: line 2: an integer of \d+ (digits|characters); an integer of at most"):
        loads(text, "f")


@pytest.mark.parametrize("loads, text", [(validation.loads_json, "[" * 100_000 + "]" * 100_000),
                                         (validation.loads_json, "[" * 150 + "]" * 150),
                                         (validation.loads_yaml, "[" * 150 + "]" * 150),
                                         (validation.loads_yaml, "[" * 5000 + "]" * 5000)])
def test_deep_nesting_is_refused(loads, text):
    with pytest.raises(SpecError, match="nest|depth"):
        loads(text, "f")


def test_finite_tree_ends_on_shared_and_self_containing_values():
    cycle: list = [1.0]
    cycle.append(cycle)
    shared = [1.0] * 4
    assert validation.finite_tree("x", {"a": cycle, "b": [shared] * 50}) is not None
    cycle.append(float("nan"))
    with pytest.raises(SpecError, match=r"x\.a\[2\]: must be finite"):
        validation.finite_tree("x", {"a": cycle})


def test_yaml_is_limited_to_what_json_can_say():
    for tagged in ("!!binary aGk=", "!!set {a: null}", "!!omap [a: 1]", "!!pairs [a: 1]", "!!timestamp 2024-01-01"):
        with pytest.raises(SpecError, match=r"f: line 2: !!\w+ values are not supported"):
            validation.loads_yaml(f"a: 1\nb: {tagged}\n", "f")
    with pytest.raises(SpecError, match="YAML syntax error"):
        validation.loads_yaml("a: !!python/object/apply:os.system ['true']\n", "f")


def test_yaml_dates_stay_strings():
    """A plain date or time is a string, as in JSON (YAML 1.1 would make it a date object no field takes)."""
    doc = validation.loads_yaml("a: 2024-01-01\nb: 2024-01-01 10:00:00\nc: [2001-12-14t21:59:43.10-05:00]\n", "f")
    assert doc == {"a": "2024-01-01", "b": "2024-01-01 10:00:00", "c": ["2001-12-14t21:59:43.10-05:00"]}


@pytest.mark.parametrize("content, says", [(b"\x7fELF\x02\x01\x01\x00\xff\xfe", "is not UTF-8 text"),
                                           (b"a: 1\n\x00b: 2\n", "holds NUL bytes")])
def test_binary_files_are_named_with_what_was_expected(tmp_path, content, says):
    path = tmp_path / "thing.yaml"
    path.write_bytes(content)
    with pytest.raises(SpecError, match=f"--thing: {path} {says}.*; a thing file"):
        validation.load_file(path, "--thing", expected="a thing file")
    with pytest.raises(SpecError, match=f"{path} {says}.*topology file"):
        load(str(path))


def test_host_profile_names_a_repeated_key_and_a_binary_file(tmp_path):
    from _host_helpers import small_host

    text = small_host().to_yaml()
    path = tmp_path / "host.yaml"
    path.write_text(text + "cores: 4\n")
    with pytest.raises(SpecError, match=r"--host-profile .*host.yaml: line \d+: duplicate key 'cores'"):
        load_profile(path)
    as_json = tmp_path / "host.json"
    as_json.write_text(json.dumps(small_host().to_dict())[:-1] + ', "cores": 4}')
    with pytest.raises(SpecError, match="duplicate key 'cores'"):
        load_profile(as_json)
    path.write_bytes(b"\x00\x01\x02\xff" * 64)
    with pytest.raises(SpecError, match="not UTF-8 text.*a host profile"):
        load_profile(path)
    path.write_text(text)
    assert load_profile(path) == small_host()


def test_messages_show_long_values_shortened():
    with pytest.raises(SpecError) as err:
        validation.integer("--nodes", 10**3999, lo=1, hi=32)
    assert "an integer of about 4000 digits is out of range" in str(err.value) and len(str(err.value)) < 200
    with pytest.raises(SpecError) as err:
        validation.number("--rate", "x" * 10_000, lo=0)
    assert "(10002 characters)" in str(err.value) and len(str(err.value)) < 200


def test_files_past_their_ceiling_are_refused_before_parsing(tmp_path):
    path = tmp_path / "spec.yaml"
    path.write_text("a: [" + "1, " * 600_000 + "1]\n")  # 1.8 MB: tens of seconds of YAML parsing here
    start = time.perf_counter()
    with pytest.raises(SpecError, match=r"spec.yaml is 1,800,007 bytes; at most 1 MiB \(a sweep spec"):
        validation.load_file(path, "SPEC", expected="a sweep spec")
    assert time.perf_counter() - start < 1.0


def test_history_faults_name_the_file_and_line(tmp_path):
    import io

    from seedance.errors import HistoryError
    from seedance.history.events import parse_lines, read_jsonl

    path = tmp_path / "h.jsonl"
    path.write_text('{"process": 0, "type": "invoke", "f": "read", "time": 0.0}\n{"value": %s}\n' % BIG)
    with pytest.raises(HistoryError, match=f"^{path} line 2: holds an integer too long to convert"):
        read_jsonl(path)
    path.write_text("[" * 100_000 + "]" * 100_000 + "\n")
    with pytest.raises(HistoryError, match=f"^{path} line 1: nests too deeply"):
        read_jsonl(path)
    binary = io.TextIOWrapper(io.BytesIO(b'{"a": 1}\n\xff\xfe\x00\x01' * 4), encoding="utf-8")  # stdin, binary
    with pytest.raises(HistoryError, match="^history: not UTF-8 text"):
        parse_lines(binary)
