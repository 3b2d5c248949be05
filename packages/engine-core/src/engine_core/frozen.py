"""Copies of frozen dataclasses with some fields changed, for the delivery path's own dataclasses."""

from __future__ import annotations

from typing import Any, TypeVar

_D = TypeVar("_D")


def with_fields(obj: _D, **changes: Any) -> _D:
    """``dataclasses.replace(obj, **changes)`` for a frozen dataclass with no ``__post_init__``, no
    ``init=False`` field and no slots (``ExecutionState``, ``WorkflowDef``): the same object, without the
    generated ``__init__`` setting every field again through ``object.__setattr__``. Every delivery makes
    a few; a test holds the result equal to ``dataclasses.replace``'s."""
    fields = obj.__dict__
    if not changes.keys() <= fields.keys():
        raise TypeError(f"{type(obj).__name__} has no field {sorted(changes.keys() - fields.keys())[0]!r}")
    new = object.__new__(type(obj))
    new.__dict__.update(fields)
    new.__dict__.update(changes)
    return new
