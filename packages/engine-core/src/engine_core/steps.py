"""What a workflow declares, and nothing that runs: each position's kind and parameters (``TaskSpec``,
``SleepSpec``, ``WaitSpec``, ``FanOutSpec``), a position (``StepDef``) and a whole definition
(``WorkflowDef``).

The registry (``registry.py``) builds these from the ``@workflow`` class; the step kinds
(``kinds/``) run them. A spec only says what the fingerprint includes of its step, what ``GET
/workflows`` shows, and what time the step needs inside an invocation.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .model import RetryPolicy
from .validated import field_problems, rebuild_problems, secret_paths, storable

MAX_BRANCHES = 1000
"""A parallel step's branches, or a map step's items, at most (checked at registration or at the step)."""
SPLIT_ADVICE = (": split the items over several map steps (or executions), or map over batches of them (a branch "
                "may take a list)")


@dataclass(frozen=True)
class TaskSpec:
    """A plain function of the context, claimed, run under its budget and settled once."""

    fn: Callable[..., Any]
    kind = "task"

    def shape(self) -> list[Any]:
        return ["step", None]

    def describe(self) -> dict[str, Any]:
        return {}

    def needs_invocation_time(self) -> bool:
        """Its next attempt runs in the invocation that claims it: a chain claims it only with its budget left."""
        return True

    def runs_bodies(self) -> bool:
        """Something of it runs under the step's budget inside a worker invocation."""
        return True


@dataclass(frozen=True)
class SleepSpec:
    seconds: float
    kind = "sleep"

    def shape(self) -> list[Any]:
        return ["sleep", self.seconds]

    def describe(self) -> dict[str, Any]:
        return {"sleep_s": self.seconds}

    def needs_invocation_time(self) -> bool:
        return False

    def runs_bodies(self) -> bool:
        return False


@dataclass(frozen=True)
class WaitSpec:
    event: str
    timeout_s: float
    default: Any = None
    has_default: bool = False
    model: type | None = None
    """A pydantic model the event's data must validate against (checked when it is sent, and again
    when the wait consumes it); None accepts any JSON object."""
    kind = "event"

    def shape(self) -> list[Any]:
        return ["wait_for_event", self.event]

    def describe(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": "wait_for_event", "event": self.event, "timeout_s": self.timeout_s}
        if self.has_default:
            out["default"] = self.default
        if self.model is not None:
            out["event_schema"] = self.model.model_json_schema()
        return out

    def needs_invocation_time(self) -> bool:
        return False

    def runs_bodies(self) -> bool:
        return False

    def validate(self, data: dict[str, Any]) -> dict[str, Any]:
        """The event's data as the context will hold it (through ``model`` if one is declared). Raises
        pydantic's ValidationError."""
        if self.model is None:
            return data
        return storable(self.model.model_validate(data))


@dataclass(frozen=True)
class FanOutSpec:
    """``parallel(a, b, c)`` (one branch per function) or ``map(fn, over=key)`` (one branch per item)."""

    fns: tuple[Callable[..., Any], ...]
    over: str | None = None
    """map: the context key holding the list; None: parallel."""
    max_concurrency: int | None = None
    values: tuple[Any, ...] | None = None
    """A code-first map's items, as the function passed them (``over`` is then None)."""
    kind = "fanout"

    def shape(self) -> list[Any]:
        if self.over is not None:
            return ["map", self.over]
        return ["parallel", [getattr(fn, "__name__", "?") for fn in self.fns]]

    def describe(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": "map" if self.over is not None else "parallel",
                               "max_concurrency": self.max_concurrency}
        if self.over is not None:
            out["over"] = self.over
            out["branch"] = getattr(self.fns[0], "__name__", "?")
        else:
            out["branches"] = [getattr(fn, "__name__", "?") for fn in self.fns]
        return out

    def needs_invocation_time(self) -> bool:
        return False

    def runs_bodies(self) -> bool:
        return True  # its branches, each under the step's budget

    def items(self, data: dict[str, Any]) -> tuple[int, list[Any] | None] | tuple[None, tuple[str, str]]:
        """(branch count, the map's list) or (None, (error code, message)) when a map's input is unusable."""
        if self.values is not None:
            if len(self.values) > MAX_BRANCHES:
                return None, ("too_many_items", f"map: {len(self.values)} items; at most {MAX_BRANCHES}{SPLIT_ADVICE}")
            return len(self.values), list(self.values)
        if self.over is None:
            return len(self.fns), None
        value = data.get(self.over)
        if not isinstance(value, list):
            what = "missing" if self.over not in data else f"a {type(value).__name__}"
            return None, ("invalid_map_input", f"map over {self.over!r}: the context value is {what}, not a list")
        if len(value) > MAX_BRANCHES:
            return None, ("too_many_items", f"map over {self.over!r}: {len(value)} items; at most {MAX_BRANCHES}{SPLIT_ADVICE}")
        return len(value), value

    def window(self, total: int) -> int:
        return max(1, min(self.max_concurrency or total, total))

    def body(self, branch: int) -> Callable[..., Any]:
        return self.fns[0] if self.over is not None or self.values is not None else self.fns[branch]


StepSpec = TaskSpec | SleepSpec | WaitSpec | FanOutSpec


@dataclass(frozen=True)
class StepDef:
    """One position in a workflow: its name, its kind's spec (what runs there) and overrides."""

    index: int
    name: str
    kind: Any
    """The spec (``TaskSpec``, ``SleepSpec``, ``WaitSpec``, ``FanOutSpec``); ``kind.kind`` names its kind."""
    retry: RetryPolicy | None = None
    timeout_s: float | None = None
    compensate: Callable[..., Any] | None = None
    """Undoes this step when the execution fails (or is cancelled) after it completed."""
    compensate_retry: RetryPolicy | None = None
    compensate_timeout_s: float | None = None

    @property
    def fn(self) -> Callable[..., Any] | None:
        return getattr(self.kind, "fn", None)

    @property
    def sleep_s(self) -> float | None:
        return getattr(self.kind, "seconds", None)

    @property
    def is_sleep(self) -> bool:
        return self.kind.kind == "sleep"


@dataclass(frozen=True)
class CodeSpec:
    """A code-first workflow (``engine_core.durable``): a plain function whose ``step()`` calls are its
    positions, discovered by running it."""

    fn: Callable[..., Any]
    model_argument: bool = False
    """The function takes the validated ``input_model`` instance (else the input as a dict)."""
    events: dict[str, type | None] | None = None
    """The events it may wait for, each with the pydantic model its data must fit (or None), when the
    decorator declares them: sends of other events are refused, and data is checked when it is sent.
    None: any event name is accepted, and kept until a wait for it."""


@dataclass(frozen=True)
class WorkflowDef:
    name: str
    steps: tuple[StepDef, ...]
    retry: RetryPolicy
    step_timeout_s: float | None
    """None: steps get the default derived from the worker's timeout (``EngineSettings``)."""
    fingerprint: str
    source: str = ""
    """Where the definition lives (module.qualname), for error messages."""
    input_model: type | None = None
    """A pydantic model the start input must validate against (None: any JSON object)."""
    code: CodeSpec | None = None
    """Code-first: the function; ``steps`` is then what this execution's run of it has called so far."""
    version: int = 1
    """``@workflow(name, version=N)``: executions pin the version they started on (``engine_core.versions``)."""
    step_prints: tuple[str, ...] = ()
    """Each step's digest (``registry.step_print``), in order; empty for code-first."""

    def validate_input(self, data: dict[str, Any]) -> dict[str, Any]:
        """The input as the steps will see it: validated (and coerced) by ``input_model``, if any.
        Raises InvalidInputError listing every field error."""
        if self.input_model is None:
            return data
        from pydantic import ValidationError

        from .errors import InvalidInputError

        try:
            validated = self.input_model.model_validate(data)
        except ValidationError as exc:
            problems = field_problems(exc)
            summary = "; ".join(f"{p['field']}: {p['problem']}" for p in problems)
            raise InvalidInputError(f"input for workflow {self.name!r} is invalid: {summary}", problems) from None
        secrets = secret_paths(validated)
        if secrets:
            problems = [{"field": f, "type": "secret_not_kept",
                         "problem": "a secret would be stored as its mask '**********', never as the secret"}
                        for f in secrets]
            raise InvalidInputError(
                f"input for workflow {self.name!r} cannot be kept: {', '.join(secrets)} "
                f"{'is a secret' if len(secrets) == 1 else 'are secrets'}, which the stored input would keep "
                "only as its mask. Pass a reference to the secret (a Secrets Manager or SSM parameter name) "
                "and read it inside the step that needs it", problems)
        stored = storable(validated)
        if self.code is not None and self.code.model_argument:  # each delivery builds the argument from ``stored``
            problems = rebuild_problems(self.input_model, validated, stored)
            if problems:
                summary = "; ".join(f"{p['field']}: {p['problem']}" for p in problems)
                raise InvalidInputError(
                    f"input for workflow {self.name!r} cannot be kept as the function would get it: {summary}. Each "
                    f"delivery builds {self.input_model.__name__} again from the stored input, so the function "
                    "would see other values than the start validated: make those validators give the same value "
                    "when they run again, or take the field as plain data (no Json or secret types: pass a "
                    "reference to a secret, not the secret)", problems) from None
        return stored

    def input_schema(self) -> dict[str, Any] | None:
        return None if self.input_model is None else self.input_model.model_json_schema()

    def policy_for(self, index: int) -> RetryPolicy:
        return self.steps[index].retry or self.retry

    def compensation_policy(self, index: int) -> RetryPolicy:
        """A compensation's retries: its own (``compensate=step(undo, retry=...)``), else its step's."""
        return self.steps[index].compensate_retry or self.policy_for(index)

    def timeout_for(self, index: int) -> float | None:
        """The step's own budget, else the workflow's; None means the engine's default."""
        return self.steps[index].timeout_s or self.step_timeout_s

    def waits(self) -> set[str] | None:
        """The event names the workflow's ``wait_for_event`` steps wait for (None: any, for a code-first
        workflow that does not declare its events)."""
        if self.code is not None:
            return None if self.code.events is None else set(self.code.events)
        return {s.kind.event for s in self.steps if s.kind.kind == "event"}

    def wait_step(self, index: int) -> StepDef | None:
        """The ``wait_for_event`` step at ``index``, if that is one."""
        if 0 <= index < len(self.steps) and self.steps[index].kind.kind == "event":
            return self.steps[index]
        return None


_PATHS: dict[type, str | None] = {}


def model_path(model: type) -> str | None:
    """``module:qualname`` of a wait's model class, if it can be found again by name (not one defined
    inside a function): a code-first wait's position names it (``CodeStep.model``)."""
    if model not in _PATHS:
        qualname = getattr(model, "__qualname__", "")
        _PATHS[model] = None if "<locals>" in qualname or "#" in qualname else f"{model.__module__}:{qualname}"
    return _PATHS[model]


def wait_model(path: str | None) -> type | None:
    """The model class ``model_path`` named, from a module this process already imported (the workflow's
    own: registering it imported it). Nothing is imported here: a stored string never loads code."""
    if not path:
        return None
    module, _, qualname = path.partition(":")
    found: Any = sys.modules.get(module)
    for part in qualname.split("."):
        found = getattr(found, part, None)
    from pydantic import BaseModel

    return found if isinstance(found, type) and issubclass(found, BaseModel) else None
