"""Loom engine-core: durable, checkpointed step execution on one DynamoDB table.

The adapters (``engine_core.adapters``: DynamoDB, memory, SQS, EventBridge, the Lambda bootstrap) are not
imported here, since some need boto3: ``from engine_core.adapters.dynamodb import DynamoStore``.

Every name below loads its module on first use (PEP 562), so ``import engine_core`` and a workflow module's
``from engine_core import workflow, step`` load the authoring API only, not the engine's step path: a
process that never runs a step (the sweeper, a CLI listing) never imports it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # what a type checker and an editor see; at run time ``__getattr__`` below loads each name
    from .clock import Clock, ManualClock, SystemClock
    from .context import StepContext
    from .engine import Engine, StartResult, check_fits
    from .errors import (
        CorruptStateError, EngineError, ExecutionExistsError, ExecutionNotFoundError, ExecutionStateConflictError,
        IdempotencyConflictError, InsufficientTimeError, InvalidInputError, InvalidRequestError, MalformedMessageError,
        NonSerializableResultError, PermanentStepError, RegistrationError, ResultTooLargeError, StepSupersededError,
        StorageError, TransitionConflictError, UnknownWorkflowError,
    )
    from .model import (
        CorruptRecord, ErrorInfo, EventRecord, Execution, ExecutionState, ListEntry, OperationRecord, RetryPolicy,
        Status, StepMessage, StepRecord, StepStatus, Timer,
    )
    from .outcome import Outcome
    from .ports import Metrics, NullMetrics, StateStore, StepQueue
    from .registry import (
        ENTRY_POINT_GROUP, REGISTRY, Registry, WorkflowDef, map_, parallel, sleep, step, wait_for_event, workflow,
    )
    from .registry import map_ as map  # noqa: A001  (the issue's spelling: ``from engine_core import map``)
    from .settings import ConfigurationError, EngineSettings
    from .sweeper import Sweeper, SweepReport

_EXPORTS: dict[str, tuple[str, ...]] = {
    "clock": ("Clock", "ManualClock", "SystemClock"),
    "context": ("StepContext",),
    "engine": ("Engine", "StartResult", "check_fits"),
    "errors": ("CorruptStateError", "EngineError", "ExecutionExistsError", "ExecutionNotFoundError",
               "ExecutionStateConflictError", "IdempotencyConflictError", "InsufficientTimeError",
               "InvalidInputError", "InvalidRequestError", "MalformedMessageError", "NonSerializableResultError",
               "PermanentStepError", "RegistrationError", "ResultTooLargeError", "StepSupersededError",
               "StorageError", "TransitionConflictError", "UnknownWorkflowError"),
    "model": ("CorruptRecord", "ErrorInfo", "EventRecord", "Execution", "ExecutionState", "ListEntry",
              "OperationRecord", "RetryPolicy", "Status", "StepMessage", "StepRecord", "StepStatus", "Timer"),
    "outcome": ("Outcome",),
    "ports": ("Metrics", "NullMetrics", "StateStore", "StepQueue"),
    "registry": ("ENTRY_POINT_GROUP", "REGISTRY", "Registry", "WorkflowDef", "map_", "parallel", "sleep", "step",
                 "wait_for_event", "workflow"),
    "settings": ("ConfigurationError", "EngineSettings"),
    "sweeper": ("SweepReport", "Sweeper"),
}
_MODULE_OF = {name: module for module, names in _EXPORTS.items() for name in names}
_MODULE_OF["map"] = "registry"  # the spelling, ``from engine_core import map`` (``map_`` beside it)


def __getattr__(name: str) -> Any:
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module 'engine_core' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"engine_core.{module}"), "map_" if name == "map" else name)
    globals()[name] = value  # the next lookup is a plain module attribute
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_MODULE_OF))


__version__ = "0.3.0"

__all__ = sorted([*_MODULE_OF, "__version__"])
