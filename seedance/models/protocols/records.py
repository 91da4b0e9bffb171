"""Faster construction of the frozen, slotted dataclasses that carry the per-operation traffic (effects, messages).

A frozen dataclass's generated ``__init__`` stores each field through ``object.__setattr__(self, name, value)``,
which looks the name up on the type for every field of every object. :func:`fast_init` gives such a class an
``__init__`` that stores through the fields' slot descriptors directly (what ``object.__setattr__`` ends up calling):
the same parameters, defaults, field order and resulting object, about half the cost. Hashing, equality, ``repr``,
pickling and immutability (assignment still raises ``FrozenInstanceError``) are the dataclass's own, unchanged.
A field with a ``default_factory`` defaults to a private marker, replaced by a fresh ``factory()`` when the caller
left it out (as the generated ``__init__`` does). A class it cannot reproduce exactly (an ``init=False`` field, a
``__post_init__``, no slots) keeps its generated ``__init__``.
"""

from __future__ import annotations

import dataclasses
from typing import Any, TypeVar

T = TypeVar("T")
_UNSET = object()  # "the caller left this field out": the default of a field with a default_factory


def fast_init(cls: type[T]) -> type[T]:
    """Replace the generated ``__init__`` of frozen slotted dataclass ``cls`` (see the module doc); returns ``cls``."""
    fields = dataclasses.fields(cls)  # type: ignore[arg-type]
    if (not getattr(cls, "__slots__", None) or hasattr(cls, "__post_init__")
            or any(not f.init for f in fields)):
        return cls
    namespace: dict[str, Any] = {"_UNSET": _UNSET}
    positional: list[str] = []
    keyword: list[str] = []
    body: list[str] = []
    for f in fields:
        namespace[f"_set_{f.name}"] = getattr(cls, f.name).__set__  # the slot's member descriptor
        param = f.name
        if f.default is not dataclasses.MISSING:
            namespace[f"_default_{f.name}"] = f.default
            param += f"=_default_{f.name}"
        elif f.default_factory is not dataclasses.MISSING:
            namespace[f"_factory_{f.name}"] = f.default_factory
            param += "=_UNSET"
            body.append(f"    if {f.name} is _UNSET: {f.name} = _factory_{f.name}()")
        (keyword if f.kw_only else positional).append(param)
        body.append(f"    _set_{f.name}(self, {f.name})")
    params = ", ".join(["self", *positional, *(["*", *keyword] if keyword else [])])
    exec(f"def __init__({params}):\n" + "\n".join(body or ["    pass"]), namespace)  # noqa: S102
    init = namespace["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__doc__ = cls.__init__.__doc__
    cls.__init__ = init  # type: ignore[misc]
    return cls


def fast_init_module(namespace: dict[str, Any]) -> None:
    """:func:`fast_init` every frozen dataclass defined in the module whose ``globals()`` is ``namespace``."""
    for value in list(namespace.values()):
        if (isinstance(value, type) and dataclasses.is_dataclass(value) and value.__module__ == namespace["__name__"]
                and value.__dataclass_params__.frozen):  # type: ignore[attr-defined]
            fast_init(value)


__all__ = ["fast_init", "fast_init_module"]
