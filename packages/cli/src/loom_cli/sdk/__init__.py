"""Loom's Python SDK: a typed client for the control plane's API, the one the ``loom`` CLI, its web
console and its MCP server are built on.

    from loom_cli.sdk import LoomClient, LoomError

    client = LoomClient()                    # $LOOM_URL, else the local stack `make up` recorded
    started = client.start("order_fulfillment", {"order_id": "o-1", "amount_cents": 1200})
    done = client.wait(started.execution_id, timeout_s=120)

Against a deployment pass its Function URL (or ``env_dir="terraform/envs/dev"``): requests are then
SigV4-signed with your AWS credentials. Everything it returns is a pydantic model of the API's
document; every failure is a :class:`LoomError`.
"""

from .client import PAGE_MAX, LoomClient
from .errors import LoomError
from .locate import resolve_url, state_file
from .models import (
    ENDED_STATUSES,
    LIVE_STATUSES,
    STATUSES,
    BranchRecord,
    CorruptRecord,
    ErrorDocument,
    ErrorInfo,
    Event,
    EventSent,
    Execution,
    FanOutProgress,
    History,
    HistoryPage,
    Links,
    ListEntry,
    ListPage,
    Operation,
    RetryPolicy,
    Started,
    StepRecord,
    WaitingFor,
    Workflow,
    WorkflowVersion,
    WorkflowStep,
)
from .schedules import LastFiring, Schedule, ScheduleList
from .stream import Change, FailedAttempt

__all__ = [
    "ENDED_STATUSES", "LIVE_STATUSES", "PAGE_MAX", "STATUSES", "BranchRecord", "Change", "CorruptRecord",
    "ErrorDocument", "ErrorInfo", "Event", "EventSent", "Execution", "FailedAttempt", "FanOutProgress", "History",
    "HistoryPage", "LastFiring", "Links", "ListEntry", "ListPage", "LoomClient", "LoomError", "Operation", "RetryPolicy",
    "Schedule", "ScheduleList", "Started", "StepRecord", "WaitingFor", "Workflow", "WorkflowStep", "WorkflowVersion", "resolve_url", "state_file",
]
