"""Who may start and operate which workflow: the control plane's per-workflow allow-list.

The Function URL's ``AWS_IAM`` auth decides who may call the API at all; this decides, per workflow,
which of those callers may change its executions. It is configured by ``LOOM_WORKFLOW_ACCESS`` (the
Terraform input ``workflow_access``), a JSON object::

    {"expense_approval": {"start": ["arn:aws:iam::123456789012:role/expenses-app"],
                          "operate": ["arn:aws:iam::123456789012:role/oncall"],
                          "send": ["arn:aws:iam::123456789012:role/approvals"]},
     "*": {"start": ["*"], "operate": ["arn:aws:iam::123456789012:role/oncall"]}}

- ``start``: ``POST /executions`` of the workflow; ``operate``: cancel, redrive and wake its executions;
  ``send`` (optional, defaults to ``operate``'s list): send them events and complete their callbacks.
- ``"*"`` as a workflow applies to every workflow not listed by name. A workflow that neither names is
  open to every caller the Function URL lets in (what happens with no allow-list at all).
- A principal is the caller identity the control plane records (``requestContext.authorizer.iam``:
  ``userArn``, else ``callerId``, else ``accountId``; ``local`` on the local stack). An entry matches
  it exactly; a ``*`` in it matches any characters; an IAM role ARN also matches that role's sessions
  (``arn:aws:sts::<account>:assumed-role/<role name>/<session>``, the identity a role's caller has);
  ``"*"`` alone matches every caller; an empty list matches none.
- Reads (``GET``) are not restricted here.

A caller not on the list is refused 403 ``access_denied`` before anything is written. A malformed
setting refuses every guarded request (500 ``access_policy_invalid``, saying what is wrong) rather than
letting it through.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from engine_core import ExecutionNotFoundError
from engine_core.callbacks import InvalidCallbackTokenError, parse
from engine_core.errors import CallbackNotFoundError

from .errors import ApiError

ENV = "LOOM_WORKFLOW_ACCESS"
TERRAFORM_INPUT = "workflow_access"
ANY_WORKFLOW = "*"
_VERBS = {"start": "start", "operate": "cancel, redrive or wake executions of", "send": "send events to executions of"}
_ROLE_ARN = re.compile(r"^arn:(?P<partition>aws[a-z-]*):iam::(?P<account>\d{12}):role/(?:[^/]+/)*(?P<name>[^/*]+)$")
# A caller identity as recorded (at most 512 characters, see request_models.caller_identity), or a pattern.
Principal = Annotated[str, Field(min_length=1, max_length=512, pattern=r"^\S+$")]


class _Rule(BaseModel):
    """One workflow's lists, as configured (unknown keys are refused: a typo must not open a door)."""

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)  # built only when an allow-list is set

    start: list[Principal] = Field(description="who may start the workflow")
    operate: list[Principal] = Field(description="who may cancel, redrive and wake its executions")
    send: list[Principal] | None = Field(default=None, description="who may send events and complete callbacks; "
                                                             "null: the operate list")


def _pattern(entry: str) -> re.Pattern[str]:
    """``entry`` as a whole-string pattern: ``*`` matches any characters; a role ARN also matches its sessions."""
    alternatives = [".*".join(re.escape(part) for part in entry.split("*"))]
    role = _ROLE_ARN.match(entry)
    if role is not None:
        alternatives.append(re.escape(f"arn:{role['partition']}:sts::{role['account']}:assumed-role/{role['name']}/")
                            + "[^/]+")
    return re.compile("|".join(f"(?:{a})" for a in alternatives))


@dataclass(frozen=True)
class Rule:
    """Compiled lists of one workflow (or of ``*``)."""

    lists: dict[str, tuple[re.Pattern[str], ...]]

    @classmethod
    def of(cls, rule: _Rule) -> Rule:
        send = rule.operate if rule.send is None else rule.send
        return cls({action: tuple(_pattern(e) for e in entries)
                    for action, entries in (("start", rule.start), ("operate", rule.operate), ("send", send))})

    def allows(self, action: str, caller: str) -> bool:
        return any(p.fullmatch(caller) for p in self.lists[action])


@dataclass(frozen=True)
class AccessPolicy:
    """The allow-list the control plane enforces. ``AccessPolicy()`` is open: every caller may do everything."""

    rules: dict[str, Rule] = field(default_factory=dict)
    problem: str | None = None
    """Why the configured value could not be read; every guarded request is refused while it is set."""

    @classmethod
    def parse(cls, raw: str | None) -> AccessPolicy:
        """The policy ``raw`` (the JSON of :data:`ENV`) describes; empty or unset is the open policy."""
        if raw is None or not raw.strip():
            return cls()
        try:
            document = json.loads(raw)
        except ValueError as exc:
            return cls(problem=f"it is not JSON ({exc})")
        if not isinstance(document, dict):
            return cls(problem=f"it is a JSON {type(document).__name__}, not an object of workflow names")
        rules: dict[str, Rule] = {}
        for workflow, value in document.items():
            try:
                rules[workflow] = Rule.of(_Rule.model_validate(value))
            except ValidationError as exc:
                first = exc.errors()[0]
                where = ".".join(str(p) for p in first["loc"]) or "its value"
                return cls(problem=f"workflow {workflow!r}: {where}: {first['msg']}")
        return cls(rules)

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> AccessPolicy:
        return cls.parse(environ.get(ENV))

    @property
    def restricts(self) -> bool:
        """Whether anything is checked (an open policy costs no extra read)."""
        return bool(self.rules) or self.problem is not None

    def _rule(self, workflow: str) -> tuple[str, Rule] | None:
        for key in (workflow, ANY_WORKFLOW):
            if key in self.rules:
                return key, self.rules[key]
        return None

    def check(self, action: str, workflow: str, caller: str) -> None:
        """Refuse (:class:`ApiError` 403) unless ``caller`` may ``action`` (start, operate, send) ``workflow``."""
        if self.problem is not None:
            raise ApiError(500, "access_policy_invalid", (
                f"the control plane's allow-list ({ENV}, the Terraform input {TERRAFORM_INPUT}) is invalid: "
                f"{self.problem}. Nothing it guards runs until it is fixed; correct {TERRAFORM_INPUT} and apply"))
        found = self._rule(workflow)
        if found is None:
            return
        key, rule = found
        if not rule.allows(action, caller):
            listed = f"workflow {workflow!r}" if key == workflow else f"every workflow not listed by name ({key!r})"
            raise ApiError(403, "access_denied", (
                f"{caller} may not {_VERBS[action]} workflow {workflow!r}: it is not on the {action!r} allow-list "
                f"for {listed} in {TERRAFORM_INPUT} ({ENV}). Call as a principal on that list, or ask the "
                "stack's owners to add this one"))

    def check_execution(self, action: str, engine: Any, execution_id: str, caller: str) -> None:
        """:meth:`check` for the workflow of ``execution_id`` (read only when something is restricted; an
        unknown id is the engine's 404)."""
        if self.restricts:
            self.check(action, engine.get(execution_id).workflow, caller)

    def check_callback(self, engine: Any, token: str, caller: str) -> None:
        """:meth:`check` ``send`` for the workflow a callback token belongs to. A token that names no
        execution is the route's own 404 (``callback_not_found``), told apart from nothing here."""
        if not self.restricts:
            return
        try:
            execution_id, _ = parse(token)
            workflow = engine.get(execution_id).workflow
        except (InvalidCallbackTokenError, ExecutionNotFoundError):
            raise CallbackNotFoundError() from None
        self.check("send", workflow, caller)
