"""IAM's decision for one request under a principal's identity policies, by a real policy evaluator.

The evaluator is Principal Mapper's local policy simulation (``principalmapper``, on PyPI; a dev
dependency, in no Lambda zip): Allow and Deny, ``Action``/``NotAction``, ``Resource``/``NotResource``
with ``*`` and ``?`` wildcards and policy variables, and the condition operators. moto's own IAM
enforcement was not usable for this: it authorizes DynamoDB calls against the resource ``*``, so it
cannot tell the table from ``table/<name>/index/GSI2``.

The decision follows IAM's evaluation logic for identity policies: an explicit Deny in any statement
wins; otherwise an Allow in any statement allows; otherwise the request is implicitly denied.
"""

from __future__ import annotations

import collections
import collections.abc
from dataclasses import dataclass
from typing import Any

from .iam_requests import Request

# principalmapper 1.1.5 (the latest release) imports Mapping from collections, which Python 3.10
# removed; the aliases are the very classes it means.
for _name in ("Mapping", "MutableMapping"):
    if not hasattr(collections, _name):
        setattr(collections, _name, getattr(collections.abc, _name))

from principalmapper.querying.local_policy_simulation import policy_has_matching_statement  # noqa: E402
from principalmapper.util.case_insensitive_dict import CaseInsensitiveDict  # noqa: E402


@dataclass(frozen=True)
class Statement:
    """One statement of one of a principal's policies (a policy document holds several)."""

    policy: str
    sid: str
    document: dict[str, Any]

    def as_policy(self) -> dict[str, Any]:
        return {"Version": "2012-10-17", "Statement": [self.document]}


def statements_of(policies: dict[str, dict[str, Any]]) -> list[Statement]:
    """``{policy name: policy document}`` as its statements, each named ``policy/sid`` (or its index)."""
    out = []
    for name, doc in sorted(policies.items()):
        raw = doc.get("Statement") or []
        for i, s in enumerate(raw if isinstance(raw, list) else [raw]):
            out.append(Statement(name, str(s.get("Sid") or f"#{i}"), s))
    return out


@dataclass(frozen=True)
class Decision:
    allowed: bool
    explicit_deny: bool
    allowed_by: tuple[str, ...]
    """The statements that allow it (``policy/sid``), empty when denied."""


def _matches(statement: Statement, effect: str, request: Request) -> bool:
    context = CaseInsensitiveDict(dict(request.context))
    return policy_has_matching_statement(statement.as_policy(), effect, request.action, request.resource, context)


def decide(statements: list[Statement], request: Request) -> Decision:
    """IAM's decision on ``request`` under these identity-policy statements."""
    if any(_matches(s, "Deny", request) for s in statements):
        return Decision(False, True, ())
    allowing = tuple(f"{s.policy}/{s.sid}" for s in statements if _matches(s, "Allow", request))
    return Decision(bool(allowing), False, allowing)
