"""``LoomClient``: Loom's control-plane API as typed methods."""

from __future__ import annotations

import datetime as dt
import re
import time
import urllib.parse
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from .errors import ENDED_ELSEWHERE, INVALID_ARGUMENT, WAIT_TIMEOUT, LoomError
from .locate import resolve_url
from .schedules import ScheduleList
from .models import (
    ENDED_STATUSES,
    STATUSES,
    EventSent,
    Execution,
    History,
    HistoryPage,
    ListEntry,
    ListPage,
    Started,
    Workflow,
)
from .stream import Change, check_interval, stream
from .transport import Transport

PAGE_MAX = 100
"""The most the API returns in one page, of executions or of history records."""
EVENT_NAME = re.compile(r"\A[A-Za-z0-9_.-]{1,64}\Z")
"""The API's rule for event names (checked here too, so a bad name is refused before anything is sent)."""


_WHERE_FROM = {"execution id": "the one its start answered with (or `loom list` shows)",
               "callback token": "the token the wait handed your system"}
"""Where each argument ``_q`` takes comes from (an event name is checked against ``EVENT_NAME`` first)."""


def _q(value: str, what: str = "execution id") -> str:
    if not isinstance(value, str):
        raise LoomError(INVALID_ARGUMENT, f"an execution id, event name or callback token is a string, got "
                                          f"{type(value).__name__} {value!r}")
    if not value.strip():
        raise LoomError(INVALID_ARGUMENT, f"the {what} is empty; pass {_WHERE_FROM[what]}; nothing was sent")
    return urllib.parse.quote(value, safe="")


def _time(value: dt.datetime | str | None) -> str | None:
    if value is None or isinstance(value, str):
        return value
    if not isinstance(value, dt.datetime):
        raise LoomError(INVALID_ARGUMENT, f"started_after and started_before take a datetime or an ISO-8601 string "
                                          f"such as '2026-03-01T12:00:00Z', got {type(value).__name__} {value!r}")
    if value.tzinfo is None:
        value = value.replace(tzinfo=dt.timezone.utc)
    return value.astimezone(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LoomClient:
    """A Loom deployment's control plane.

    ``LoomClient()`` finds the API as ``loom`` does: ``$LOOM_URL``, else the local stack that ``make up``
    recorded (``~/.local/state/loom/local.json``, or ``$LOOM_STATE_FILE``). Pass a Function URL (or
    ``env_dir="terraform/envs/dev"``) for a deployment: its requests are SigV4-signed with the standard
    AWS credential chain (``profile=``, ``region=`` to choose). Every method returns the API's document
    as a model (``.document()`` gives the JSON back) and raises :class:`~loom_cli.sdk.errors.LoomError`
    on a refusal or when the API cannot be reached.

    Example:
        >>> client = LoomClient()
        >>> started = client.start("order_fulfillment", {"order_id": "o-1", "amount_cents": 1200})
        >>> client.wait(started.execution_id, timeout_s=120).status
        'COMPLETED'
    """

    def __init__(self, url: str | None = None, *, env_dir: str | Path | None = None, sign: bool | None = None,
                 region: str | None = None, profile: str | None = None, timeout_s: float = 30.0,
                 transport: Transport | None = None):
        self.transport = transport or Transport.create(resolve_url(url, env_dir), sign=sign, region=region,
                                                       profile=profile, timeout_s=timeout_s)

    @property
    def url(self) -> str:
        return self.transport.url

    @property
    def signed(self) -> bool:
        """True when requests are SigV4-signed (a deployment); False on the local stack."""
        return self.transport.sign

    def request(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        """One raw call: ``(HTTP status, JSON document)``; a refusal raises :class:`LoomError`."""
        return self.transport.request(method, path, body)

    # -- executions -----------------------------------------------------------------------------------------
    def start(self, workflow: str, input: dict[str, Any] | None = None, *,
              idempotency_token: str | None = None, version: int | None = None) -> Started:
        """Start an execution (on ``version`` of the workflow; None: the newest deployed). With
        ``idempotency_token`` the same token and input start it at most once (``created`` is False the second
        time); the same token with another input is ``idempotency_conflict``."""
        body: dict[str, Any] = {"workflow": workflow, "input": {} if input is None else input}
        if idempotency_token is not None:
            body["idempotency_token"] = idempotency_token
        if version is not None:
            body["version"] = version
        status, doc = self.request("POST", "/executions", body)
        return Started.model_validate({"created": status == 202, **doc})

    def get(self, execution_id: str) -> Execution:
        return Execution.model_validate(self.request("GET", f"/executions/{_q(execution_id)}")[1])

    def list_page(self, *, workflow: str | None = None, status: str | None = None,
                  started_after: dt.datetime | str | None = None, started_before: dt.datetime | str | None = None,
                  limit: int = 20, next_token: str | None = None, check_more: bool = False) -> ListPage:
        """One page of executions, newest first. The API hands out a ``next_token`` whenever a page is full,
        even when nothing follows; ``check_more=True`` reads one entry past it and clears the token then."""
        query = {k: v for k, v in (("workflow", workflow), ("status", status), ("started_after", _time(started_after)),
                                   ("started_before", _time(started_before)), ("limit", limit),
                                   ("next_token", next_token)) if v is not None}
        page = ListPage.model_validate(self.request("GET", f"/executions?{urllib.parse.urlencode(query)}")[1])
        if check_more and page.next_token:
            after = self.list_page(workflow=workflow, status=status, started_after=started_after,
                                   started_before=started_before, limit=1, next_token=page.next_token)
            if not after.executions:
                page = page.model_copy(update={"next_token": None})
        return page

    def list(self, *, workflow: str | None = None, status: str | None = None,
             started_after: dt.datetime | str | None = None, started_before: dt.datetime | str | None = None,
             limit: int | None = None, page_size: int = PAGE_MAX) -> Iterator[ListEntry]:
        """Every execution that matches, newest first, page after page (at most ``limit`` of them). A limit
        that is not a whole number of at least 1, or a page size outside 1-100, is refused at the call, before
        any request."""
        if limit is not None and (type(limit) is not int or limit < 1):
            raise LoomError(INVALID_ARGUMENT, f"limit must be a whole number of at least 1, got {limit!r}; leave "
                                              "limit out (None) for every execution")
        _check_page_size(page_size)
        return self._list(workflow, status, started_after, started_before, limit, page_size)

    def _list(self, workflow: str | None, status: str | None, started_after: dt.datetime | str | None,
              started_before: dt.datetime | str | None, limit: int | None, page_size: int) -> Iterator[ListEntry]:
        token, seen = None, 0
        while True:
            page = self.list_page(workflow=workflow, status=status, started_after=started_after,
                                  started_before=started_before, limit=page_size, next_token=token)
            for entry in page.executions:
                yield entry
                seen += 1
                if limit is not None and seen >= limit:
                    return
            token = page.next_token
            if not token:
                return

    def history_pages(self, execution_id: str, page_size: int = PAGE_MAX) -> Iterator[HistoryPage]:
        """The history page by page (a page of near-limit results is large: read it in pages); ``page_size``
        1-100, checked at the call."""
        _check_page_size(page_size)
        return self._history_pages(execution_id, page_size)

    def _history_pages(self, execution_id: str, page_size: int) -> Iterator[HistoryPage]:
        path, token = f"/executions/{_q(execution_id)}/history", None
        while True:
            query = {"limit": page_size, **({"next_token": token} if token else {})}
            page = HistoryPage.model_validate(self.request("GET", f"{path}?{urllib.parse.urlencode(query)}")[1])
            yield page
            token = page.next_token
            if not token:
                return

    def history(self, execution_id: str) -> History:
        """Every page of step records as one document, with every operator action and every event sent."""
        pages = iter(self.history_pages(execution_id))
        first = next(pages)
        steps = list(first.steps)
        for page in pages:
            steps += page.steps
        operations = list(first.operations) + self._rest(execution_id, "operations", first.operations_next_token)
        whole: dict[str, Any] = {"execution_id": first.execution_id, "steps": steps, "operations": operations,
                                 "next_token": None}
        if first.events is not None:
            whole["events"] = list(first.events) + self._rest(execution_id, "events", first.events_next_token)
        if first.cost is not None:
            whole["cost"] = first.cost
        return History.model_validate(whole)

    def _rest(self, execution_id: str, what: str, token: str | None) -> list[Any]:
        """The pages of ``GET /executions/{id}/<what>`` from ``token`` on (events, operations)."""
        out: list[Any] = []
        while token:
            query = urllib.parse.urlencode({"limit": PAGE_MAX, "next_token": token})
            page = self.request("GET", f"/executions/{_q(execution_id)}/{what}?{query}")[1]
            out += page[what]
            token = page.get("next_token")
        return out

    def cancel(self, execution_id: str, reason: str | None = None) -> Execution:
        """End a live execution CANCELLED (compensations, if any, run first); cancelling it again changes nothing."""
        body = {"reason": reason} if reason is not None else None
        return Execution.model_validate(self.request("POST", f"/executions/{_q(execution_id)}/cancel", body)[1])

    def redrive(self, execution_id: str, *, to_version: int | None = None) -> Execution:
        """Resume a FAILED execution from its failed step, with fresh attempts, under the same id; with
        ``to_version``, on that version of its workflow (refused ``steps_differ`` unless the steps before
        the failed one are the same there)."""
        body = None if to_version is None else {"to_version": to_version}
        return Execution.model_validate(self.request("POST", f"/executions/{_q(execution_id)}/redrive", body)[1])

    def wake(self, execution_id: str) -> Execution:
        """End the current sleep or retry backoff now. On an event wait it ends the wait as a timeout: the
        wait's default is taken, it waits again if its retry policy allows, or the step fails (and compensations run)."""
        return Execution.model_validate(self.request("POST", f"/executions/{_q(execution_id)}/wake")[1])

    def send(self, execution_id: str, event: str, data: dict[str, Any] | None = None, *,
             event_id: str | None = None) -> EventSent:
        """Send an event: delivered to the ``wait_for_event`` waiting for it, or kept until one does; the same
        ``event_id`` is applied once."""
        if not EVENT_NAME.fullmatch(event):
            raise LoomError(INVALID_ARGUMENT, f"event name {event!r} is invalid: 1-64 characters from A-Z a-z 0-9 "
                                              "_ . - (the name the workflow's wait_for_event step waits for)")
        body: dict[str, Any] = {"data": {} if data is None else data}
        if event_id is not None:
            body["event_id"] = event_id
        doc = self.request("POST", f"/executions/{_q(execution_id)}/events/{_q(event)}", body)[1]
        return EventSent.model_validate(doc)

    def complete_callback(self, token: str, data: dict[str, Any] | None = None) -> EventSent:
        """Answer a callback token a step issued (``ctx.callback_token(event)``): its wait completes, once."""
        doc = self.request("POST", f"/callbacks/{_q(token, 'callback token')}", {"data": {} if data is None else data})[1]
        return EventSent.model_validate(doc)

    def workflows(self, *, live: bool = True) -> list[Workflow]:
        """The deployed workflows: steps, retry policies, input JSON Schemas, and each version with the
        executions live on it (``live=False``: without counting them)."""
        path = "/workflows" if live else "/workflows?live=0"
        return [Workflow.model_validate(w) for w in self.request("GET", path)[1].get("workflows", [])]

    def live_versions(self) -> dict[str, Any]:
        """``GET /workflows`` as the API sent it: each version's live executions, ``undeployed`` (live ones on
        versions this deployment lacks) and whether the count is ``complete``."""
        return self.request("GET", "/workflows")[1]

    def workflow(self, name: str, *, live: bool = False) -> Workflow | None:
        """One deployed workflow's definition (None: no workflow of that name); ``live=True`` also counts the
        executions live on each version (a scan of the due index: ``workflows`` says more)."""
        return next((w for w in self.workflows(live=live) if w.name == name), None)

    def schedules(self) -> ScheduleList:
        """The deployed schedules, each with its next firing and its last one (outcome, execution)."""
        return ScheduleList.model_validate(self.request("GET", "/schedules")[1])

    # -- following one -----------------------------------------------------------------------------------
    def wait(self, execution_id: str, until: str | Iterable[str] = ENDED_STATUSES, *, timeout_s: float | None = 300.0,
             interval_s: float = 1.0) -> Execution:
        """Poll until the execution is in one of ``until`` (by default: ended) and return it.

        Raises :class:`LoomError` ``wait_timeout`` after ``timeout_s`` (None: no limit), and
        ``execution_ended`` when it ends in a status it was not waited for (``execution_status`` says which).
        """
        check_interval("interval_s", interval_s)
        if timeout_s is not None and not (isinstance(timeout_s, (int, float)) and timeout_s >= 0):
            raise LoomError(INVALID_ARGUMENT, f"timeout_s must be a number of seconds (None: no limit), got {timeout_s!r}")
        wanted = {until} if isinstance(until, str) else set(until)
        unknown = wanted - set(STATUSES)
        if unknown:
            raise LoomError(INVALID_ARGUMENT, f"unknown status {sorted(unknown)}; statuses are {', '.join(STATUSES)}")
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            e = self.get(execution_id)
            if e.status in wanted:
                return e
            if e.ended:
                raise LoomError(ENDED_ELSEWHERE, f"execution {execution_id} ended {e.status} before reaching "
                                f"{' or '.join(sorted(wanted))}", execution_status=e.status)
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise LoomError(WAIT_TIMEOUT, f"execution {execution_id} is still {e.status} after {timeout_s:g} s "
                                f"(waited for {' or '.join(sorted(wanted))})", execution_status=e.status)
            time.sleep(interval_s if left is None else min(interval_s, left))

    def stream(self, execution_id: str, **options: Any) -> Iterator[Change]:
        """The changes an SSE client of the console sees: see :func:`loom_cli.sdk.stream.stream`."""
        return stream(self, execution_id, **options)


def _check_page_size(page_size: Any) -> None:
    if type(page_size) is not int or not 1 <= page_size <= PAGE_MAX:
        raise LoomError(INVALID_ARGUMENT, f"page_size must be a whole number from 1 to {PAGE_MAX} (the API's "
                                          f"largest page), got {page_size!r}")
