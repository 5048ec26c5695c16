"""``frozen_dataclass``: exactly ``dataclass(frozen=True)``, built faster."""

from __future__ import annotations

import dataclasses
import inspect

import pytest

import minikafka.messages as messages
import minikafka.node as node
from minikafka.frozen import frozen_dataclass

CLASSES = [c for m in (messages, node) for c in vars(m).values()
           if isinstance(c, type) and dataclasses.is_dataclass(c) and c.__module__ == m.__name__]


def reference(cls: type) -> type:
    """The same fields as a plain ``dataclass(frozen=True)``."""
    return dataclasses.make_dataclass(cls.__name__, [
        (f.name, f.type, dataclasses.field(default=f.default)) if f.default is not dataclasses.MISSING
        else (f.name, f.type) for f in dataclasses.fields(cls)], frozen=True)


def test_every_message_and_effect_gets_the_fast_init():
    assert len(CLASSES) > 80
    assert all(c.__init__.__qualname__ == f"{c.__qualname__}.__init__" for c in CLASSES)
    assert all("_state_" in c.__init__.__code__.co_varnames for c in CLASSES)


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_same_signature_same_object_still_frozen(cls):
    ref = reference(cls)
    assert inspect.signature(cls.__init__).parameters.keys() == inspect.signature(ref.__init__).parameters.keys()
    for ours, theirs in zip(inspect.signature(cls.__init__).parameters.values(),
                            inspect.signature(ref.__init__).parameters.values()):
        assert (ours.name, ours.kind, ours.default) == (theirs.name, theirs.kind, theirs.default)
    required = [f.name for f in dataclasses.fields(cls) if f.default is dataclasses.MISSING]
    args = [object() for _ in required]
    built, expected = cls(*args), ref(*args)
    assert vars(built) == vars(expected)
    assert built == cls(*args) and hash(built) == hash(cls(*args))
    by_name = cls(**dict(zip(required, args)))
    assert by_name == built
    for f in dataclasses.fields(cls):
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(built, f.name, 1)
    with pytest.raises(TypeError):
        cls(*args, *[None] * (len(dataclasses.fields(cls)) - len(required) + 1))


def test_classes_it_cannot_build_exactly_keep_the_dataclass_init():
    @frozen_dataclass
    class Checked:
        x: int

        def __post_init__(self) -> None:
            if self.x < 0:
                raise ValueError("x must be >= 0")

    @frozen_dataclass
    class Factory:
        xs: list = dataclasses.field(default_factory=list)

    with pytest.raises(ValueError):
        Checked(-1)
    assert Factory().xs == [] and Factory().xs is not Factory().xs
    assert "_state_" not in Checked.__init__.__code__.co_varnames
    assert "_state_" not in Factory.__init__.__code__.co_varnames
