"""Plain-data wire codec for protocol messages: frozen dataclasses <-> msgpack-able values, never pickle.

Rules (network input is plain data, length-prefixed and size-bounded; never pickle):

* Only the types a :class:`~seedance.models.protocols.contract.ProtocolSpec` lists in ``message_types`` (plus the
  contract's own input types and the enums their fields use) can be decoded; an unknown type tag is rejected with
  :class:`~seedance.errors.FrameError`. Decoding never imports or calls anything named by the input.
* A registered dataclass is ``{"\\x00dp": [type name, field values in declared order...]}`` (positional: the field
  names are not on the wire; each type's field list is cached once). The named form ``{"\\x00dc": [type name,
  {field: value}]}`` that earlier versions wrote (and durable files may still hold) still decodes.
* Plain values (None, bool, int, float, str, bytes, lists, string-keyed dicts) pass through unchanged. Tuples, sets,
  dicts with non-string keys, enums, numpy scalars and numeric numpy arrays are tagged one-key dicts (``"\\x00t"``
  etc.) so they come back as the same Python type; a dict whose keys collide with a tag is itself escaped.
* A registered dataclass may check its decoded fields: a method ``wire_check(num_nodes)`` runs on every instance
  :meth:`Codec.decode` builds (``num_nodes``: the cluster's size when the codec was given it, else None) and raises
  :class:`~seedance.errors.FrameError` naming the field (EPaxos's ``PreAccept.deps``); encoding never calls it.
* Pure: no I/O; :func:`pack`/:func:`unpack` are msgpack of :func:`encode`/:func:`decode`.
"""

from __future__ import annotations

import dataclasses
import enum
import typing
from collections.abc import Iterable, Mapping
from typing import Any

import msgpack
import numpy as np

from seedance.errors import FrameError
from seedance.models.protocols import contract

_DC, _DP, _TUPLE, _SET, _FSET, _MAP, _ENUM, _ND, _ESC = (
    "\x00dc", "\x00dp", "\x00tu", "\x00set", "\x00fset", "\x00map", "\x00enum", "\x00nd", "\x00esc",
)
_TAGS = frozenset({_DC, _DP, _TUPLE, _SET, _FSET, _MAP, _ENUM, _ND, _ESC})
_ND_KINDS = frozenset("biufc")  # bool, signed/unsigned int, float, complex: never object arrays
_MAX_DEPTH = 64
_MEMO_SIZE = 8192  # nested frozen values whose encoding is kept (by identity, with the value kept alive)

CONTRACT_TYPES: tuple[type, ...] = (
    contract.ClientRequest, contract.CollectiveDone, contract.DurableState, contract.Reply,
    contract.Operation, contract.Outcome,
)


def _enums_in_hints(cls: type) -> list[type]:
    """Enum classes named in a dataclass's field annotations (``Role``, ``Role | None``, ``tuple[Role, ...]``)."""
    try:
        hints = typing.get_type_hints(cls)
    except Exception:  # unresolved forward reference: the protocol can list the enum in message_types
        return []
    found: list[type] = []
    stack = list(hints.values())
    while stack:
        hint = stack.pop()
        if isinstance(hint, type) and issubclass(hint, enum.Enum):
            found.append(hint)
        stack.extend(typing.get_args(hint))
    return found


_PLAIN = frozenset({type(None), bool, int, float, str, bytes})  # encoded and decoded as they are


class Codec:
    """Encoder/decoder for one set of message types (names must be unique); ``num_nodes``, when given, is handed to
    the types' ``wire_check``."""

    def __init__(self, types: Iterable[type], *, num_nodes: int | None = None) -> None:
        self.num_nodes = num_nodes
        self._checks: dict[type, Any] = {}  # registered dataclass -> its wire_check (decoded instances only)
        self._by_name: dict[str, type] = {}
        self._fields: dict[type, tuple[str, tuple[str, ...]]] = {}  # registered dataclass -> (its name, fields)
        self._known: dict[str, tuple[type, frozenset[str]]] = {}  # name -> (dataclass, its field names)
        self._positional: dict[str, tuple[type, tuple[str, ...]]] = {}  # name -> (dataclass, fields in order)
        self._frozen: set[type] = set()  # registered frozen dataclasses: nested instances' encodings memoised
        self._memo: dict[int, tuple[Any, Any]] = {}  # id -> (instance, its encoding); bounded by _MEMO_SIZE
        self._enum_kinds: set[type] = set()  # registered enums: each member's encoding made once
        self._enum_wire: dict[Any, Any] = {}
        pending = list(CONTRACT_TYPES) + list(types)
        while pending:
            cls = pending.pop()
            if not (dataclasses.is_dataclass(cls) and isinstance(cls, type)) and not (
                isinstance(cls, type) and issubclass(cls, enum.Enum)
            ):
                raise FrameError("message_types", f"{cls!r} is neither a dataclass nor an enum",
                                 "list frozen dataclasses and enums")
            name = cls.__qualname__
            if name in self._by_name:
                if self._by_name[name] is not cls:
                    raise FrameError("message_types", f"two types named {name!r}", "names must be unique")
                continue
            self._by_name[name] = cls
            if issubclass(cls, enum.Enum):
                self._enum_kinds.add(cls)
                self._enum_wire.update({member: {_ENUM: [name, member.name]} for member in cls})
            if dataclasses.is_dataclass(cls):
                # the field names once per type, not per message (dataclasses.fields walks the class each call)
                names = tuple(f.name for f in dataclasses.fields(cls))
                self._fields[cls] = (name, names)
                self._known[name] = (cls, frozenset(names))
                self._positional[name] = (cls, names)
                if cls.__dataclass_params__.frozen:
                    self._frozen.add(cls)
                if callable(getattr(cls, "wire_check", None)):
                    self._checks[cls] = cls.wire_check
                pending.extend(e for e in _enums_in_hints(cls) if e.__qualname__ not in self._by_name)

    @property
    def type_names(self) -> tuple[str, ...]:
        return tuple(sorted(self._by_name))

    # ----------------------------------------------------------------------------------------------- encode
    def encode(self, obj: Any, _depth: int = 0) -> Any:
        kind = type(obj)
        if kind in _PLAIN:  # exact types: an int- or str-valued enum is not one of them
            return obj
        if _depth > _MAX_DEPTH:
            raise FrameError("message", "nesting deeper than 64", "flatten the message")
        d = _depth + 1
        registered = self._fields.get(kind)
        if registered is not None:  # positional; plain field values inline: no call per field
            memo = self._memo if _depth and kind in self._frozen else None
            if memo is not None:  # a nested frozen value (a log entry) sent to several peers and written to disk
                hit = memo.get(id(obj))
                if hit is not None and hit[0] is obj:
                    return hit[1]
            values = [registered[0]]
            plain = True
            for n in registered[1]:
                v = getattr(obj, n)
                if type(v) in _PLAIN:
                    values.append(v)
                else:
                    plain = False
                    values.append(self.encode(v, d))
            encoded = {_DP: values}
            if memo is not None and plain:  # only all-plain fields: nothing inside can change after this
                if len(memo) >= _MEMO_SIZE:
                    memo.clear()
                memo[id(obj)] = (obj, encoded)
            return encoded
        if kind is tuple:  # before the isinstance chain below (a log's entries)
            return {_TUPLE: [v if type(v) in _PLAIN else self.encode(v, d) for v in obj]}
        wire_enum = self._enum_wire.get(obj) if kind in self._enum_kinds else None
        if wire_enum is not None:
            return wire_enum
        if isinstance(obj, enum.Enum):  # before str/int: str- and int-valued enums must keep their type
            name = type(obj).__qualname__
            if self._by_name.get(name) is not type(obj):
                raise FrameError("message", f"enum {name} is not registered", "add it to message_types")
            return {_ENUM: [name, obj.name]}
        if obj is None or isinstance(obj, (bool, str, bytes)):
            return obj
        if isinstance(obj, (int, float)):
            return obj
        if isinstance(obj, np.generic):
            return self.encode(obj.item(), d)
        if isinstance(obj, np.ndarray):
            if obj.dtype.kind not in _ND_KINDS:
                raise FrameError("message", f"numpy dtype {obj.dtype} not allowed", "numeric arrays only")
            return {_ND: [obj.dtype.str, list(obj.shape), np.ascontiguousarray(obj).tobytes()]}
        if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
            name = type(obj).__qualname__
            if self._by_name.get(name) is not type(obj):
                raise FrameError("message", f"type {name} is not registered", "add it to message_types")
            return {_DP: [name, *(self.encode(getattr(obj, f.name), d) for f in dataclasses.fields(obj))]}
        if isinstance(obj, tuple):
            return {_TUPLE: [self.encode(v, d) for v in obj]}
        if isinstance(obj, list):
            return [v if type(v) in _PLAIN else self.encode(v, d) for v in obj]
        if isinstance(obj, frozenset):
            return {_FSET: [self.encode(v, d) for v in obj]}
        if isinstance(obj, set):
            return {_SET: [self.encode(v, d) for v in obj]}
        if isinstance(obj, Mapping):
            if all(isinstance(k, str) for k in obj):
                plain = {k: self.encode(v, d) for k, v in obj.items()}
                return {_ESC: plain} if len(plain) == 1 and next(iter(plain)) in _TAGS else plain
            return {_MAP: [[self.encode(k, d), self.encode(v, d)] for k, v in obj.items()]}
        raise FrameError("message", f"cannot encode {type(obj).__name__}", "plain data, registered dataclasses")

    # ----------------------------------------------------------------------------------------------- decode
    def decode(self, data: Any, _depth: int = 0) -> Any:
        if type(data) in _PLAIN:
            return data
        if _depth > _MAX_DEPTH:
            raise FrameError("message", "nesting deeper than 64", "flatten the message")
        d = _depth + 1
        if data is None or isinstance(data, (bool, int, float, str, bytes)):
            return data
        if isinstance(data, list):
            return [v if type(v) in _PLAIN else self.decode(v, d) for v in data]
        if not isinstance(data, dict):
            raise FrameError("message", f"unexpected {type(data).__name__}", "msgpack of plain data")
        if len(data) == 1:
            (tag, body), = data.items()
            if tag in _TAGS:
                return self._decode_tagged(tag, body, d)
        if not all(isinstance(k, str) for k in data):
            raise FrameError("message", "dict with non-string keys", "tagged maps")
        return {k: self.decode(v, d) for k, v in data.items()}

    def _decode_tagged(self, tag: str, body: Any, d: int) -> Any:
        try:
            if tag == _DP:
                if not isinstance(body, list) or not body:
                    raise FrameError("message", "empty positional dataclass value", "[type name, field values...]")
                name = body[0]
                cls, names = self._positional.get(name, (None, ())) if isinstance(name, str) else (None, ())
                if cls is None:
                    raise FrameError("message", f"unknown type tag {name!r}", "one of the protocol's message_types")
                if len(body) - 1 != len(names):
                    raise FrameError("message", f"{len(body) - 1} field values for {name}",
                                     f"{len(names)}: {', '.join(names)}")
                obj = cls(**{k: v if type(v) in _PLAIN else self.decode(v, d) for k, v in zip(names, body[1:])})
                return self._checked(obj)
            if tag == _DC:
                name, fields = body
                cls, known = self._known.get(name, (None, frozenset()))
                if cls is None:
                    raise FrameError("message", f"unknown type tag {name!r}", "one of the protocol's message_types")
                if not isinstance(fields, dict) or not known.issuperset(fields):
                    raise FrameError("message", f"bad fields for {name}", f"fields of {name}: {sorted(known)}")
                obj = cls(**{k: v if type(v) in _PLAIN else self.decode(v, d) for k, v in fields.items()})
                return self._checked(obj)
            if tag == _ENUM:
                name, member = body
                cls = self._by_name.get(name)
                if cls is None or not issubclass(cls, enum.Enum) or member not in cls.__members__:
                    raise FrameError("message", f"unknown enum {name}.{member}", "a registered enum member")
                return cls[member]
            if tag == _ND:
                dtype_str, shape, raw = body
                dtype = np.dtype(dtype_str)
                if dtype.kind not in _ND_KINDS or not isinstance(raw, bytes):
                    raise FrameError("message", f"numpy dtype {dtype_str} not allowed", "numeric arrays only")
                return np.frombuffer(raw, dtype=dtype).reshape([int(s) for s in shape]).copy()
            if tag == _TUPLE:
                return tuple(self.decode(v, d) for v in body)
            if tag == _SET:
                return {self.decode(v, d) for v in body}
            if tag == _FSET:
                return frozenset(self.decode(v, d) for v in body)
            if tag == _MAP:
                return {self.decode(k, d): self.decode(v, d) for k, v in body}
            if tag == _ESC:
                return {k: self.decode(v, d) for k, v in body.items()}
        except FrameError:
            raise
        except (TypeError, ValueError, KeyError, AttributeError) as err:
            raise FrameError("message", f"malformed {tag.strip(chr(0))} value: {err}", "a seedance wire value") from None
        raise AssertionError(tag)  # pragma: no cover - _TAGS is exhaustive

    def _checked(self, obj: Any) -> Any:
        """``obj`` once its type's ``wire_check`` (if any) accepted it; :class:`FrameError` naming the field if not."""
        check = self._checks.get(type(obj))
        if check is not None:
            check(obj, self.num_nodes)
        return obj

    # ------------------------------------------------------------------------------------------------ bytes
    def pack(self, obj: Any) -> bytes:
        return msgpack.packb(self.encode(obj), use_bin_type=True)

    def unpack(self, raw: bytes) -> Any:
        try:
            data = msgpack.unpackb(raw, raw=False, strict_map_key=False)
        except Exception as err:  # msgpack raises ValueError/TypeError/UnpackException subclasses
            raise FrameError("frame", f"not msgpack: {err}", "a msgpack value") from None
        return self.decode(data)


def codec_for(message_types: Iterable[type]) -> Codec:
    """The codec of a protocol (``ProtocolSpec.message_types``)."""
    return Codec(message_types)
