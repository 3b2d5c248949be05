"""What a step function receives."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
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

    @property
    def idempotency_key(self) -> str:
        return f"{self.execution_id}:{self.step_index}"

    def __getitem__(self, key: str) -> Any:
        return self.data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.data)

    def __len__(self) -> int:
        return len(self.data)
