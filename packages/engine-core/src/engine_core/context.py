"""What a step function receives."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class StepContext(Mapping[str, Any]):
    """The accumulated context (start input merged with every earlier step's result), plus identity.

    It reads like a dict: ``ctx["order_id"]``, ``ctx.get("coupon")``. Pass ``ctx.idempotency_key`` to
    anything with side effects: it is ``f"{execution_id}:{step_index}"``, the same on every attempt.
    """

    execution_id: str
    workflow: str
    step_index: int
    step_name: str
    attempt: int
    data: dict[str, Any] = field(repr=False)
    branch: int | None = None
    """The branch of a parallel or map step this body runs (0-based), else None."""
    item: Any = None
    """For a map branch: its element of the list the step maps over."""
    result: Any = None
    """For a compensation: the result of the step it undoes."""
    compensating: bool = False
    """True in a compensation (``step(fn, compensate=undo)``): ``idempotency_key`` is the undone step's."""
    _tokens: Callable[[str], str] | None = field(default=None, repr=False, compare=False)

    @property
    def idempotency_key(self) -> str:
        """``{execution_id}:{step_index}``, the same on every attempt; a branch appends ``:{branch}``.
        A compensation gets the key of the step it undoes, to find what to undo."""
        if self.branch is not None:
            return f"{self.execution_id}:{self.step_index}:{self.branch}"
        return f"{self.execution_id}:{self.step_index}"

    def callback_token(self, event: str) -> str:
        """An opaque, single-use token for this execution's next ``wait_for_event(event)`` step, to hand
        to an outside system that completes the wait with ``POST /callbacks/{token}``."""
        if self._tokens is None:
            raise RuntimeError("callback tokens are only issued to steps run by the engine")
        return self._tokens(event)

    def __getitem__(self, key: str) -> Any:
        return self.data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.data)

    def __len__(self) -> int:
        return len(self.data)
