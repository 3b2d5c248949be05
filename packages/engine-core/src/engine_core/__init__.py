"""Loom engine-core: durable, checkpointed step execution on one DynamoDB table.

The adapters (``engine_core.adapters``: DynamoDB, memory, SQS, EventBridge, the Lambda bootstrap) are not
imported here, since some need boto3: ``from engine_core.adapters.dynamodb import DynamoStore``.
"""

from .clock import Clock, ManualClock, SystemClock
from .context import StepContext
from .engine import Engine, InvalidInputError, Outcome, StartResult, check_fits
from .errors import (
    CorruptStateError,
    EngineError,
    ExecutionExistsError,
    ExecutionNotFoundError,
    ExecutionStateConflictError,
    IdempotencyConflictError,
    InsufficientTimeError,
    InvalidRequestError,
    MalformedMessageError,
    NonSerializableResultError,
    PermanentStepError,
    RegistrationError,
    ResultTooLargeError,
    StepSupersededError,
    StorageError,
    TransitionConflictError,
    UnknownWorkflowError,
)
from .model import CorruptRecord, ErrorInfo, Execution, ExecutionState, ListEntry, OperationRecord, RetryPolicy, Status, EventRecord, StepMessage, StepRecord, StepStatus, Timer
from .ports import Metrics, NullMetrics, StateStore, StepQueue
from .registry import ENTRY_POINT_GROUP, REGISTRY, Registry, WorkflowDef, map_, parallel, sleep, step, wait_for_event, workflow

map = map_  # noqa: A001  (the issue's spelling: ``from engine_core import map``)
from .settings import ConfigurationError, EngineSettings
from .sweeper import Sweeper, SweepReport

__version__ = "0.3.0"

__all__ = [
    "Clock", "ConfigurationError", "CorruptRecord", "CorruptStateError", "ENTRY_POINT_GROUP", "Engine",
    "EngineError", "EngineSettings", "ErrorInfo", "Execution", "ExecutionExistsError",
    "ExecutionNotFoundError", "ExecutionState", "ExecutionStateConflictError", "IdempotencyConflictError",
    "InsufficientTimeError", "InvalidInputError", "InvalidRequestError", "ListEntry", "MalformedMessageError",
    "ManualClock", "EventRecord", "Metrics", "NonSerializableResultError", "NullMetrics", "OperationRecord", "Outcome",
    "PermanentStepError", "REGISTRY", "RegistrationError", "Registry", "ResultTooLargeError", "RetryPolicy",
    "StartResult", "StateStore", "Status", "StepContext", "StepMessage", "StepQueue", "StepRecord",
    "StepStatus", "StepSupersededError", "StorageError", "SweepReport", "Sweeper", "SystemClock", "Timer",
    "TransitionConflictError", "UnknownWorkflowError", "WorkflowDef", "__version__", "check_fits", "map", "map_",
    "parallel", "sleep", "step", "wait_for_event", "workflow",
]
