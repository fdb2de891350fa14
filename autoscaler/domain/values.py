"""Frozen value types that are cheap to make: the dataclass's ``__init__`` without a guarded assignment per field.

Why it exists: a self-tuning replay makes tens of thousands of decisions, and each builds a few frozen values (what
the tick observed, the planner's state and its decision). A frozen dataclass's generated ``__init__`` assigns every
field through ``object.__setattr__`` (frozen instances refuse plain assignment), which on a decision of fourteen
fields cost about as much as the planner's arithmetic. ``quick_init`` gives the class an ``__init__`` with the same
signature (the fields in order, the same defaults) that fills the instance's ``__dict__`` at once and then calls
``__post_init__`` if there is one. Nothing else changes: the instance stays frozen, and equality, hashing, ``repr``,
``replace`` and pickling are the dataclass's own.
"""

from __future__ import annotations

import dataclasses
from typing import Any, TypeVar

__all__ = ["quick_init"]

T = TypeVar("T")


def quick_init(cls: type[T]) -> type[T]:
    """Replace the generated ``__init__`` of the frozen dataclass ``cls`` (not slotted, no ``InitVar``, no field
    left out of ``__init__``) by one that fills ``__dict__`` directly; apply it above ``@dataclass``."""
    if not dataclasses.is_dataclass(cls) or "__slots__" in cls.__dict__:
        raise TypeError(f"quick_init needs a dataclass with an instance __dict__, got {cls!r}")
    namespace: dict[str, Any] = {}
    params: list[str] = []
    for f in dataclasses.fields(cls):
        if not f.init:
            raise TypeError(f"quick_init: field {cls.__name__}.{f.name} is not in __init__")
        if f.default is not dataclasses.MISSING:
            namespace[f"_default_{f.name}"] = f.default
            params.append(f"{f.name}=_default_{f.name}")
        elif f.default_factory is not dataclasses.MISSING:
            raise TypeError(f"quick_init: field {cls.__name__}.{f.name} has a default factory")
        else:
            params.append(f.name)
    names = [f.name for f in dataclasses.fields(cls)]
    body = "    self.__dict__.update({" + ", ".join(f"{n!r}: {n}" for n in names) + "})\n"
    if hasattr(cls, "__post_init__"):
        body += "    self.__post_init__()\n"
    source = f"def __init__(self, {', '.join(params)}) -> None:\n{body}"
    exec(source, namespace)  # the same way ``dataclasses`` writes the ``__init__`` it replaces
    init = namespace["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__doc__ = f"Fill the fields of a {cls.__name__} at once (``autoscaler.domain.values.quick_init``)."
    setattr(cls, "__init__", init)  # noqa: B010 (a method replaced on the class, as dataclasses sets it)
    return cls
