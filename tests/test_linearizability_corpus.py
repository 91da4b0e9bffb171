"""Real-world histories (Jepsen against etcd; Knossos' regression histories) get their published verdicts.

Sources, licences and verdict provenance: tests/data/histories/README.md.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from jepsen_formats import CORPUS, converted_name, converted_text, load
from seedance.history.events import read_jsonl
from seedance.history.linearizability import check
from seedance.history.linearizability.oracle import brute_force_linearizable

# Porcupine's porcupine_test.go, TestEtcdJepsenNNN; Knossos' data/cas-register/{good,bad}.
PUBLISHED = {
    "jepsen-etcd/etcd_000.log": False,
    "jepsen-etcd/etcd_001.log": False,
    "jepsen-etcd/etcd_002.log": True,
    "jepsen-etcd/etcd_003.log": False,
    "jepsen-etcd/etcd_005.log": True,
    "jepsen-etcd/etcd_007.log": True,
    "jepsen-etcd/etcd_018.log": True,
    "knossos/bad/immediate-failure.edn": False,
    "knossos/bad/rethink-fail-minimal.edn": False,
    "knossos/good/cas-register-bug.edn": True,
}


def test_corpus_is_complete_and_small():
    files = {p.relative_to(CORPUS).as_posix() for p in CORPUS.glob("*/*.log")} | {
        p.relative_to(CORPUS).as_posix() for p in CORPUS.glob("knossos/*/*.edn")}
    assert files == set(PUBLISHED)
    assert sum(p.stat().st_size for p in CORPUS.rglob("*") if p.is_file()) < 2_000_000


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_published_verdict(name):
    path = CORPUS / name
    converted = CORPUS / "converted" / converted_name(path)
    assert converted.read_text() == converted_text(path), "run: python tests/jepsen_formats.py"
    events = read_jsonl(converted)
    assert events == load(path)
    result = check(events, "cas-register")
    assert result.valid is PUBLISHED[name]
    if result.valid is False:
        violation = result.first_violation
        assert violation["op"]["invoke_line"] <= violation["op"]["return_line"]
        assert "cannot be linearized" in violation["explanation"]


def test_rethink_minimal_blames_the_impossible_read_not_the_next_op():
    """Knossos' comment on this history: WGL once blamed the op just after the violation."""
    result = check(load(CORPUS / "knossos/bad/rethink-fail-minimal.edn"), "cas-register")
    op = result.first_violation["op"]
    assert (op["f"], op["value"], op["process"]) == ("read", 3, 1)
    assert result.first_violation["state"] == 4  # after write 0 and the concurrent write 4


def test_small_corpus_histories_agree_with_the_oracle():
    for name in ("knossos/bad/immediate-failure.edn", "knossos/bad/rethink-fail-minimal.edn",
                 "knossos/good/cas-register-bug.edn"):
        events = load(CORPUS / name)
        assert brute_force_linearizable(events) is PUBLISHED[name]


def test_jepsen_log_parser_accepts_the_original_prefix():
    from jepsen_formats import events_from_jepsen_log

    original = "".join(f"INFO  jepsen.util - {line}\n".replace(" :", "\t:")
                       for line in (CORPUS / "jepsen-etcd/etcd_002.log").read_text().splitlines())
    assert events_from_jepsen_log(original) == load(CORPUS / "jepsen-etcd/etcd_002.log")
    assert Path(CORPUS / "README.md").exists()
