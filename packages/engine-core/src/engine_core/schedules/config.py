"""The deployed schedules: ``LOOM_SCHEDULES`` (JSON, rendered by Terraform from its ``schedules`` input).

The control plane reads it once at start-up, so ``GET /schedules`` lists the schedules with their next
firing without any ``scheduler:`` permission, and a firing's workflow, input and overlap policy come from
the deployment, never from the event (whoever may invoke the function can only fire what is deployed).

    [{"name": "nightly-report", "workflow": "report", "expression": "cron(0 2 * * ? *)",
      "timezone": "Europe/Paris", "input": {"scope": "all"}, "overlap": "skip", "enabled": true}]
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..settings import ConfigurationError

if TYPE_CHECKING:
    from .expressions import Expression

ENV = "LOOM_SCHEDULES"


class ScheduleDef(BaseModel):
    # Built on first use: a control plane with no schedules deployed never validates one.
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    name: str = Field(pattern=r"^[0-9A-Za-z_.-]{1,64}$")
    """EventBridge Scheduler's name rule: 1-64 letters, digits, ``-``, ``_`` or ``.``."""
    workflow: str = Field(min_length=1)
    expression: str
    timezone: str = "UTC"
    input: dict[str, Any] = Field(default_factory=dict)
    overlap: Literal["skip", "allow"] = "skip"
    """``skip``: a firing while the schedule's previous execution is live starts nothing; ``allow``: it starts."""
    enabled: bool = True


@dataclass(frozen=True)
class Schedules:
    """The deployed schedules by name, each with its parsed expression."""

    defs: dict[str, ScheduleDef] = field(default_factory=dict)
    expressions: dict[str, Expression] = field(default_factory=dict)
    anchors: dict[str, dt.datetime] = field(default_factory=dict)
    """Where a rate schedule without a recorded firing counts from, by name, when the process that fires it knows
    (``loom dev``: its start). Empty on AWS: Scheduler does not say when it made a schedule."""

    @classmethod
    def parse(cls, text: str | None) -> Schedules:
        """From ``LOOM_SCHEDULES``'s text (empty: none); ConfigurationError saying what is wrong otherwise."""
        if not text or not text.strip():
            return cls()
        try:
            raw = json.loads(text)
        except ValueError as exc:
            raise ConfigurationError(f"{ENV} is not JSON ({exc}); Terraform's schedules input renders it") from None
        if not isinstance(raw, list):
            raise ConfigurationError(f"{ENV} must be a JSON list of schedules, got {type(raw).__name__}")
        # Here, not at the top: a deployment without schedules (most control planes' cold starts) never parses one.
        from .expressions import ExpressionError, parse

        defs: dict[str, ScheduleDef] = {}
        expressions: dict[str, Expression] = {}
        for i, item in enumerate(raw):
            try:
                d = ScheduleDef.model_validate(item)
            except ValidationError as exc:
                problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'item'}: {e['msg']}" for e in exc.errors())
                raise ConfigurationError(f"{ENV}[{i}] is not a schedule: {problems}") from None
            if d.name in defs:
                raise ConfigurationError(f"{ENV}: two schedules are named {d.name!r}; names must be unique")
            try:
                expressions[d.name] = parse(d.expression, d.timezone)
            except ExpressionError as exc:
                raise ConfigurationError(f"schedule {d.name!r}: {exc}") from None
            except (ValueError, OverflowError) as exc:  # a form the parser did not foresee: refused, not a crash
                raise ConfigurationError(f"schedule {d.name!r}: {d.expression!r} cannot be read ({exc}); write it as "
                                         "docs/schedules.md shows (ASCII digits, the forms EventBridge takes)") from None
            defs[d.name] = d
        return cls(defs, expressions)

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Schedules:
        return cls.parse(env.get(ENV))

    def get(self, name: str) -> ScheduleDef | None:
        return self.defs.get(name)

    def next_firing(self, name: str, after: dt.datetime, last: dt.datetime | None = None) -> dt.datetime | None:
        """The schedule's first firing after ``after``; a rate counts from its ``last`` firing, else from its anchor
        (None without either)."""
        return self.expressions[name].next_after(after, anchor=last if last is not None else self.anchors.get(name))

    def anchored(self, anchors: Mapping[str, dt.datetime]) -> Schedules:
        """The same schedules, each rate without a recorded firing counting from ``anchors[name]``."""
        return replace(self, anchors=dict(anchors))

    def __iter__(self):
        return iter(self.defs.values())

    def __len__(self) -> int:
        return len(self.defs)


__all__ = ["ENV", "ScheduleDef", "Schedules"]
