"""Immutable dataclasses that are cheap to build: ``@frozen_dataclass``.

Theory of operation
-------------------
The messages nodes exchange and the effects they return are ``@dataclass(frozen=True)``:
immutable, compared and hashed by value. A simulated campaign builds some twenty thousand
of them per schedule, and the ``__init__`` that ``dataclasses`` writes for a frozen class
calls ``object.__setattr__`` once per field (its ``__setattr__`` refuses assignment), which
made building them a tenth of a campaign's time. ``frozen_dataclass`` is exactly
``dataclass(frozen=True)`` (the same fields, ``__eq__``, ``__hash__``, ``__repr__`` and
refusal to change), except that ``__init__`` fills the instance's ``__dict__`` directly: the
same parameters, in the same order, with the same defaults, and the same attributes after.

Only classes it can do that for exactly get the new ``__init__``: every field in
``__init__``, plain defaults (no ``default_factory``), no keyword-only fields, no
``__post_init__``, no ``__slots__``. Any other class keeps the ``__init__`` of
``dataclasses``. Never: validate or convert a value (``dataclasses`` does not either).
"""

from __future__ import annotations

import dataclasses
from dataclasses import MISSING
from typing import TypeVar

T = TypeVar("T", bound=type)


def frozen_dataclass(cls: T) -> T:
    cls = dataclasses.dataclass(frozen=True)(cls)
    fields = dataclasses.fields(cls)
    if (hasattr(cls, "__post_init__") or "__slots__" in cls.__dict__
            or any(not f.init or f.kw_only or f.default_factory is not MISSING or f.name in ("self", "_state_")
                   for f in fields)):
        return cls
    namespace: dict = {}
    params = []
    for f in fields:
        if f.default is MISSING:
            params.append(f.name)
        else:
            namespace[f"_default_{f.name}"] = f.default
            params.append(f"{f.name}=_default_{f.name}")
    lines = [f"def __init__(self, {', '.join(params)}):" if params else "def __init__(self):",
             "    _state_ = self.__dict__"]
    lines += [f"    _state_[{f.name!r}] = {f.name}" for f in fields]
    exec("\n".join(lines), namespace)  # noqa: S102 (our own field names, checked by dataclasses)
    init = namespace["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__module__ = cls.__module__
    cls.__init__ = init
    return cls
