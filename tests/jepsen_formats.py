"""Converters from Jepsen's history formats to seedance's JSON Lines history (for the real-world test corpus).

Two formats occur in the published corpora (see tests/data/histories/README.md):

* Jepsen's console log, one operation event per line: ``PROCESS<TAB>:TYPE<TAB>:F<TAB>VALUE`` (optionally after
  a ``INFO  jepsen.util - `` prefix), VALUE being ``nil``, an integer, ``[expected new]`` or ``:timed-out``.
* Knossos' EDN vectors of maps, ``{:process 4, :type :invoke, :f :write, :value 2}``, with ``;`` comments.

Both use Jepsen's conventions, which are ours: ``fail`` did not happen, ``info`` is indeterminate, a process that
got ``info`` never invokes again. Read invokes are given value ``null`` (Knossos sometimes records the expected
value there); completions of indeterminate operations carry ``null``. Neither format has times, so event ``i``
gets time ``i`` milliseconds. Nemesis events (non-integer processes) are skipped.
"""

from __future__ import annotations

import re
from pathlib import Path

from seedance.history.events import Event, parse_lines

_LOG_LINE = re.compile(r"^(?:INFO\s+jepsen\.util\s+-\s+)?(\d+)\s+:(\w+)\s+:(\w+)\s+(.+?)\s*$")
_EDN_MAP = re.compile(r"\{([^{}]*)\}")
_EDN_PAIR = re.compile(r":(\w+)\s+(\[[^\]]*\]|:[\w-]+|-?\d+|nil|\"[^\"]*\")")


def _value(text: str):
    text = text.strip()
    if text == "nil" or text.startswith(":"):
        return None
    if text.startswith("["):
        return [_value(part) for part in text.strip("[]").replace(",", " ").split()]
    return int(text)


def _event(index: int, process: int, kind: str, f: str, value) -> Event:
    if f == "read" and kind == "invoke" or kind == "info":
        value = None
    return Event(process=process, type=kind, f=f, value=value, time=index / 1000.0)


def events_from_jepsen_log(text: str) -> list[Event]:
    """Events of a Jepsen console log; lines that are not client operations are ignored."""
    events = []
    for line in text.splitlines():
        match = _LOG_LINE.match(line)
        if match:
            process, kind, f, value = match.groups()
            events.append(_event(len(events), int(process), kind, f, _value(value)))
    return _revalidated(events)


def events_from_knossos_edn(text: str) -> list[Event]:
    """Events of a Knossos EDN history (a vector or list of operation maps)."""
    text = "\n".join(line.split(";", 1)[0] for line in text.splitlines())
    events = []
    for body in _EDN_MAP.findall(text):
        fields = dict(_EDN_PAIR.findall(body))
        if not re.fullmatch(r"\d+", fields.get("process", "")):
            continue
        events.append(_event(len(events), int(fields["process"]), fields["type"].lstrip(":"),
                             fields["f"].lstrip(":"), _value(fields.get("value", "nil"))))
    return _revalidated(events)


def _revalidated(events: list[Event]) -> list[Event]:
    """Round-trip through our own parser, so the converted history is exactly what a file of ours would give."""
    from seedance.history.jsonl import event_to_json

    return parse_lines([event_to_json(e) for e in events])


def load(path: Path) -> list[Event]:
    """Events of a corpus file, by extension (``.log`` Jepsen log, ``.edn`` Knossos)."""
    text = path.read_text()
    return events_from_knossos_edn(text) if path.suffix == ".edn" else events_from_jepsen_log(text)


CORPUS = Path(__file__).resolve().parent / "data" / "histories"


def converted_text(path: Path) -> str:
    """The JSON Lines form of a corpus file, exactly as stored under ``converted/``."""
    from seedance.history.jsonl import event_to_json

    return "".join(event_to_json(e) + "\n" for e in load(path))


def converted_name(path: Path) -> str:
    """``jepsen-etcd/etcd_000.log`` -> ``jepsen-etcd-etcd_000.jsonl``."""
    return path.relative_to(CORPUS).with_suffix("").as_posix().replace("/", "-") + ".jsonl"


def main() -> None:
    """Regenerate ``converted/*.jsonl`` from the raw corpus files (run: ``python tests/jepsen_formats.py``)."""
    out = CORPUS / "converted"
    out.mkdir(exist_ok=True)
    for path in sorted(CORPUS.glob("*/*.log")) + sorted(CORPUS.glob("knossos/*/*.edn")):
        (out / converted_name(path)).write_text(converted_text(path))


if __name__ == "__main__":
    main()
