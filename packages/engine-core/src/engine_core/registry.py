"""Workflow definitions: the ``@workflow`` decorator, the validation of a step list (its markers are in
``markers``) and the registry.

Everything is validated when the decorator runs, so a broken workflow fails at import time, in the
deploy that introduced it, not hours later in the middle of an execution.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import re
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from typing import Any

from .errors import RegistrationError, UnknownWorkflowError, UnknownWorkflowVersionError
from .markers import (  # noqa: F401 - re-exported: written as engine_core.registry's for long
    DEFAULT_EVENT_TIMEOUT_S, MAX_SLEEP_S, FanOut, Sleep, Step, WaitForEvent, map_, parallel, sleep, step, wait_for_event,
)
from .model import RetryPolicy
from .steps import MAX_BRANCHES, FanOutSpec, SleepSpec, StepDef, TaskSpec, WaitSpec, WorkflowDef

ENTRY_POINT_GROUP = "loom.workflows"
# Anchored with \A and \Z, and used with fullmatch: `$` also matches before a trailing "\n".
WORKFLOW_NAME_RE = re.compile(r"\A[A-Za-z0-9_.-]{1,128}\Z")
_STEP_NAME_RE = re.compile(r"\A[^#\s]{1,100}\Z")
EVENT_NAME_RE = re.compile(r"\A[A-Za-z0-9_.-]{1,64}\Z")
_EVENT_NAME_RE = EVENT_NAME_RE


@dataclass
class Registry:
    """Workflows by name and version. ``get(name)`` is the newest version (what a start takes unless it
    asks for one); an execution resolves the version it is pinned to (``engine_core.versions``)."""

    _workflows: dict[str, dict[int, WorkflowDef]] = field(default_factory=dict)
    _loaded_groups: set[str] = field(default_factory=set)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    registrations: int = 0
    """How many definitions were registered here so far, the same one again included (what a module
    loaded into it contributed, even when it only registered again what an earlier import did)."""

    def register(self, definition: WorkflowDef) -> None:
        with self._lock:
            self.registrations += 1
            versions = self._workflows.setdefault(definition.name, {})
            existing = versions.get(definition.version)
            if existing is not None and existing.source != definition.source:
                raise RegistrationError(
                    f"workflow {definition.name!r} version {definition.version} is registered twice: by "
                    f"{existing.source} and by {definition.source}; a (name, version) must be unique across "
                    "installed packages (give the newer one version=N+1 to keep both)"
                )
            versions[definition.version] = definition

    def get(self, name: str, version: int | None = None) -> WorkflowDef:
        """The workflow ``name`` at ``version`` (None: its newest). Raises UnknownWorkflowError, or
        UnknownWorkflowVersionError when the workflow is registered but not at that version."""
        versions = self._workflows.get(name)
        if not versions:
            raise UnknownWorkflowError(name, list(self._workflows))
        if version is None:
            return versions[max(versions)]
        try:
            return versions[version]
        except KeyError:
            raise UnknownWorkflowVersionError(name, version, list(versions)) from None

    def versions(self, name: str) -> list[int]:
        """The versions of ``name`` registered here, oldest first (empty when there is none)."""
        return sorted(self._workflows.get(name, {}))

    def names(self) -> list[str]:
        return sorted(n for n, v in self._workflows.items() if v)

    def all(self) -> list[WorkflowDef]:
        """The newest version of each workflow, by name."""
        return [self.get(n) for n in self.names()]

    def all_versions(self) -> list[WorkflowDef]:
        """Every registered version of every workflow, by name then version."""
        return [self._workflows[n][v] for n in self.names() for v in self.versions(n)]

    def include(self, found: object) -> list[str]:
        """Register here the workflows of ``found``: a ``Registry``, or a module whose top-level ``Registry``
        objects hold them (a package written with ``registry = Registry()``, as its tests like it, is served
        like one using the default registry). What is registered here already wins over a module's other
        registries (a test's variant of a deployed workflow is not a conflict). The names taken in, in order."""
        sources = [found] if isinstance(found, Registry) else \
            [v for v in vars(found).values() if isinstance(v, Registry)] if inspect.ismodule(found) else []
        names: list[str] = []
        for other in sources:
            if other is self:
                continue
            for definition in other.all_versions():
                here = self._workflows.get(definition.name, {}).get(definition.version)
                if here is not None and here.source != definition.source and not isinstance(found, Registry):
                    continue
                self.register(definition)
                names.append(definition.name)
        return list(dict.fromkeys(names))

    def __contains__(self, name: object) -> bool:
        return bool(self._workflows.get(name)) if isinstance(name, str) else False

    def load_entry_points(self, group: str = ENTRY_POINT_GROUP) -> list[str]:
        """Import every installed workflow package that declares itself in ``group``.

        A Lambda package calls this once at cold start, so whatever workflow packages are installed
        beside it are available with no code change. Returns the entry point names loaded.
        """
        if group in self._loaded_groups:
            return []
        loaded = []
        for ep in sorted(entry_points(group=group), key=lambda e: e.name):
            try:
                self.include(ep.load())  # the module registered its workflows; an own Registry is taken in
            except RegistrationError:
                raise
            except Exception as exc:
                dist = getattr(ep.dist, "name", "?")
                raise RegistrationError(
                    f"workflow package {dist!r} (entry point {ep.name} = {ep.value}) failed to import: "
                    f"{type(exc).__name__}: {exc}"
                ) from exc
            loaded.append(ep.name)
        self._loaded_groups.add(group)
        return loaded


REGISTRY = Registry()


def workflow(
    name: str,
    *,
    version: int = 1,
    registry: Registry | None = None,
) -> Callable[[type], type]:
    """Register a class as a workflow.

    The class declares ``steps`` (functions, ``step(...)`` overrides and ``sleep(...)`` markers, in
    order), and optionally ``retry`` (a RetryPolicy), ``step_timeout_s`` and ``input_model`` (a pydantic
    model the start input must validate against; steps then see the validated values).

    ``version`` (default 1) lets a changed step list ship beside the one executions in flight run on:
    keep ``@workflow("x")`` (version 1) registered and add ``@workflow("x", version=2)``. An execution
    runs to its end on the version it started on; new starts take the newest unless they ask for one.

    Example:
        >>> @workflow("order_fulfillment")
        ... class OrderFulfillment:
        ...     steps = [reserve_inventory, charge_payment, sleep(hours=1), ship_order]
        ...     retry = RetryPolicy(max_attempts=5, base=2, max_delay=900)
    """

    def decorate(cls: type) -> type:
        definition = build_workflow(
            name,
            getattr(cls, "steps", None),
            retry=getattr(cls, "retry", None),
            step_timeout_s=getattr(cls, "step_timeout_s", None),
            source=f"{cls.__module__}.{cls.__qualname__}",
            input_model=getattr(cls, "input_model", None),
            version=version,
        )
        (registry or REGISTRY).register(definition)
        cls.__loom_workflow__ = definition  # type: ignore[attr-defined]
        return cls

    if not isinstance(name, str) or not WORKFLOW_NAME_RE.fullmatch(name):
        raise RegistrationError(
            f"workflow name {name!r} is invalid: use 1-128 characters from A-Z a-z 0-9 _ . -"
        )
    check_version(version, f"workflow {name!r}")
    return decorate


MAX_VERSION = 1_000_000


def check_version(version: Any, where: str) -> int:
    """A workflow version: an int from 1 to ``MAX_VERSION`` (RegistrationError otherwise)."""
    if isinstance(version, bool) or not isinstance(version, int) or not 1 <= version <= MAX_VERSION:
        raise RegistrationError(f"{where}: version must be an integer from 1 to {MAX_VERSION}, got {version!r}")
    return version


def build_workflow(
    name: str,
    steps: Iterable[Any] | None,
    *,
    retry: RetryPolicy | None = None,
    step_timeout_s: float | None = None,
    source: str = "",
    input_model: type | None = None,
    version: int = 1,
) -> WorkflowDef:
    where = f"workflow {name!r}" + (f" version {version}" if version != 1 else "") + (f" ({source})" if source else "")
    check_version(version, where)
    if not isinstance(name, str) or not WORKFLOW_NAME_RE.fullmatch(name):
        raise RegistrationError(f"workflow name {name!r} is invalid: use 1-128 characters from A-Z a-z 0-9 _ . -")
    if steps is None or isinstance(steps, (str, bytes)) or not isinstance(steps, Iterable):
        raise RegistrationError(f"{where}: declare `steps = [...]`, an ordered list of step functions")
    items = list(steps)
    if not items:
        raise RegistrationError(f"{where}: has no steps; a workflow needs at least one")
    if retry is not None and not isinstance(retry, RetryPolicy):
        raise RegistrationError(f"{where}: `retry` must be a RetryPolicy, got {type(retry).__name__}")
    timeout = step_timeout_s
    if timeout is not None and (not isinstance(timeout, (int, float)) or isinstance(timeout, bool)
                                or not 0 < timeout <= 900):
        raise RegistrationError(f"{where}: step_timeout_s must be in (0, 900] seconds (Lambda's ceiling)")

    if input_model is not None:
        from pydantic import BaseModel

        if not (isinstance(input_model, type) and issubclass(input_model, BaseModel)):
            raise RegistrationError(f"{where}: `input_model` must be a pydantic BaseModel subclass, got {input_model!r}")

    defs: list[StepDef] = []
    seen: dict[str, int] = {}
    for index, item in enumerate(items):
        d = _step_def(index, item, where)
        if d.name in seen:
            if isinstance(item, Sleep) and item.name is None:
                d = _dedupe_sleep_name(d, seen)
            else:
                raise RegistrationError(
                    f"{where}: step name {d.name!r} is used at positions {seen[d.name]} and {index}; "
                    "step names must be unique (pass name=... to step() to rename one)"
                )
        seen[d.name] = index
        defs.append(d)
    if defs[-1].is_sleep:
        raise RegistrationError(f"{where}: ends with a sleep, which would wait and then do nothing; remove it")
    return WorkflowDef(
        name=name,
        steps=tuple(defs),
        retry=retry or RetryPolicy(),
        step_timeout_s=None if timeout is None else float(timeout),
        fingerprint=fingerprint(name, defs),
        source=source,
        input_model=input_model,
        version=version,
        step_prints=tuple(step_print(d) for d in defs),
    )


def fingerprint(name: str, steps: Iterable[StepDef]) -> str:
    """Digest of the step list's shape. Retry and timeout changes are safe mid-flight; reordering is not."""
    shape = [name] + [[s.name, *s.kind.shape()] for s in steps]
    return hashlib.sha256(json.dumps(shape, sort_keys=True).encode()).hexdigest()[:32]


def step_print(step: StepDef) -> str:
    """One step's digest (its name and shape, as ``fingerprint`` includes it): what an execution pins per
    step, so a later deploy is judged by the steps it still has to run (``engine_core.versions``)."""
    return hashlib.sha256(json.dumps([step.name, *step.kind.shape()], sort_keys=True).encode()).hexdigest()[:12]


def _step_def(index: int, item: Any, where: str) -> StepDef:
    if isinstance(item, Sleep):
        if not 0 < item.seconds <= MAX_SLEEP_S:
            raise RegistrationError(f"{where}: sleep at position {index} must last more than 0 s and at most 366 days")
        name = item.name or f"sleep_{item.seconds:g}s"
        _check_step_name(name, index, where)
        return StepDef(index=index, name=name, kind=SleepSpec(float(item.seconds)))
    if isinstance(item, FanOut):
        return _fanout_def(index, item, where)
    if isinstance(item, WaitForEvent):
        return _wait_def(index, item, where)
    compensate = None
    if isinstance(item, Step):
        fn, name, retry, timeout, compensate = item.fn, item.name, item.retry, item.timeout_s, item.compensate
    else:
        fn, name, retry, timeout = item, None, None, None
    if not callable(fn):
        raise RegistrationError(
            f"{where}: position {index} is {type(fn).__name__} {fn!r}, not a callable; "
            "steps are functions taking a context, or sleep(...) markers"
        )
    name = name or getattr(fn, "__name__", None)
    _check_plain(fn, f"step at position {index}", where)
    if not name or name == "<lambda>":
        raise RegistrationError(f"{where}: step at position {index} has no usable name; pass step(fn, name=...)")
    _check_step_name(name, index, where)
    _check_policy(retry, timeout, name, where)
    undo, undo_retry, undo_timeout = _compensation(compensate, name, where)
    return StepDef(index=index, name=name, kind=TaskSpec(fn), retry=retry,
                   timeout_s=None if timeout is None else float(timeout), compensate=undo,
                   compensate_retry=undo_retry, compensate_timeout_s=undo_timeout)


def not_plain(fn: Callable[..., Any]) -> str | None:
    """Why ``fn`` is no plain function (``is async``, ``yields``), or None. Calling one only returns an object
    that does nothing: a coroutine, a generator."""
    if inspect.iscoroutinefunction(fn) or inspect.isasyncgenfunction(fn):
        return "is async"
    return "yields" if inspect.isgeneratorfunction(fn) else None


_INSTEAD = {"is async": "run the async code inside a plain function, with asyncio.run(...)",
            "yields": "return a list instead"}


def _check_plain(fn: Callable[..., Any], what: str, where: str) -> None:
    """A step's function runs and returns its result (the step would fail at run time otherwise, saying
    so): refuse an async or generator function here already."""
    why = not_plain(fn)
    if why is not None:
        raise RegistrationError(f"{where}: {what} ({getattr(fn, '__name__', fn)!r}) {why}; steps are plain "
                                f"functions: {_INSTEAD[why]}")


def _check_policy(retry: Any, timeout: Any, name: str, where: str) -> None:
    if retry is not None and not isinstance(retry, RetryPolicy):
        raise RegistrationError(f"{where}: step {name!r}: retry must be a RetryPolicy")
    if timeout is not None and (not isinstance(timeout, (int, float)) or isinstance(timeout, bool)
                                or not 0 < timeout <= 900):
        raise RegistrationError(f"{where}: step {name!r}: timeout_s must be in (0, 900] seconds")


def _compensation(compensate: Any, name: str, where: str) -> tuple[Callable[..., Any] | None, Any, Any]:
    if compensate is None:
        return None, None, None
    if isinstance(compensate, Step):
        if compensate.compensate is not None:
            raise RegistrationError(f"{where}: step {name!r}: a compensation cannot have a compensation")
        _check_policy(compensate.retry, compensate.timeout_s, name, where)
        fn, retry, timeout = compensate.fn, compensate.retry, compensate.timeout_s
    else:
        fn, retry, timeout = compensate, None, None
    if not callable(fn):
        raise RegistrationError(f"{where}: step {name!r}: compensate must be a function (or step(fn, ...)), "
                                f"got {type(fn).__name__}")
    _check_plain(fn, f"the compensation of step {name!r}", where)
    return fn, retry, None if timeout is None else float(timeout)


def _fanout_def(index: int, item: FanOut, where: str) -> StepDef:
    what = "map" if item.over is not None else "parallel"
    if not item.fns:
        raise RegistrationError(f"{where}: {what} at position {index} has no branches")
    if len(item.fns) > MAX_BRANCHES:
        raise RegistrationError(f"{where}: {what} at position {index} has {len(item.fns)} branches; "
                                f"at most {MAX_BRANCHES}")
    for fn in item.fns:
        if not callable(fn):
            raise RegistrationError(f"{where}: {what} at position {index}: branch {fn!r} is not a callable")
        _check_plain(fn, f"a branch of the {what} at position {index}", where)
    if item.over is not None and (not isinstance(item.over, str) or not item.over):
        raise RegistrationError(f"{where}: map at position {index}: over= names the context key holding the list")
    limit = item.max_concurrency
    if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= MAX_BRANCHES):
        raise RegistrationError(f"{where}: {what} at position {index}: max_concurrency must be 1-{MAX_BRANCHES}")
    name = item.name
    if name is None:
        names = [getattr(fn, "__name__", "") for fn in item.fns]
        if any(not n or n == "<lambda>" for n in names):
            raise RegistrationError(f"{where}: {what} at position {index} has a branch without a usable name; "
                                    "pass name=...")
        name = f"map_{names[0]}" if item.over is not None else "parallel_" + "_".join(names)
        if len(name) > 100:
            raise RegistrationError(f"{where}: {what} at position {index}: its default name is too long; pass name=...")
    _check_step_name(name, index, where)
    _check_policy(item.retry, item.timeout_s, name, where)
    return StepDef(index=index, name=name, kind=FanOutSpec(fns=item.fns, over=item.over, max_concurrency=limit),
                   retry=item.retry, timeout_s=None if item.timeout_s is None else float(item.timeout_s))


def _wait_def(index: int, item: WaitForEvent, where: str) -> StepDef:
    if not isinstance(item.event, str) or not _EVENT_NAME_RE.fullmatch(item.event):
        raise RegistrationError(f"{where}: wait_for_event at position {index}: event name {item.event!r} is invalid: "
                                "1-64 characters from A-Z a-z 0-9 _ . -")
    if not 0 < item.timeout_s <= MAX_SLEEP_S:
        raise RegistrationError(f"{where}: wait_for_event({item.event!r}) timeout must be more than 0 s and at most 366 days")
    if item.has_default and not isinstance(item.default, dict):
        raise RegistrationError(f"{where}: wait_for_event({item.event!r}) default must be a dict (an event's data "
                                "is a JSON object), got " + type(item.default).__name__)
    if item.has_default and isinstance(item.retry, RetryPolicy) and item.retry.max_attempts > 1:
        raise RegistrationError(f"{where}: {default_with_retry(item.event, item.retry.max_attempts)}")
    if item.model is not None:
        from pydantic import BaseModel

        if not (isinstance(item.model, type) and issubclass(item.model, BaseModel)):
            raise RegistrationError(f"{where}: wait_for_event({item.event!r}) model must be a pydantic BaseModel "
                                    f"subclass, got {item.model!r}")
        if item.has_default:
            from pydantic import ValidationError

            try:
                item.model.model_validate(item.default)
            except ValidationError as exc:
                raise RegistrationError(f"{where}: wait_for_event({item.event!r}) default does not fit its model: "
                                        f"{exc.errors(include_url=False)[0]['msg']}") from None
    name = item.name or f"wait_{item.event}"
    _check_step_name(name, index, where)
    _check_policy(item.retry, None, name, where)
    # A wait is not retried unless it says so: a timeout fails the step (or takes the default) at once.
    return StepDef(index=index, name=name, retry=item.retry or RetryPolicy(max_attempts=1),
                   kind=WaitSpec(event=item.event, timeout_s=item.timeout_s, default=item.default,
                                 has_default=item.has_default, model=item.model))


def default_with_retry(event: str, attempts: int) -> str:
    """Why a wait may not have both a default and a retry policy of several wait periods."""
    return (f"wait_for_event({event!r}) has a default and retry=RetryPolicy(max_attempts={attempts}): a timeout takes "
            f"the default at once, so it would never wait again; drop retry, or drop the default to wait {attempts} "
            "times and then fail")


def _check_step_name(name: str, index: int, where: str) -> None:
    if not isinstance(name, str) or not _STEP_NAME_RE.fullmatch(name):
        raise RegistrationError(
            f"{where}: step name {name!r} at position {index} is invalid: 1-100 characters, "
            "no '#' and no whitespace (names are part of storage keys)"
        )


def _dedupe_sleep_name(d: StepDef, seen: dict[str, int]) -> StepDef:
    n = 2
    while f"{d.name}_{n}" in seen:
        n += 1
    return StepDef(index=d.index, name=f"{d.name}_{n}", kind=d.kind)
