"""Check every AWS call Loom's principals made against the policies Terraform rendered for them.

    result = check(calls, {"worker": {...policy name: document...}, "operator": {...}}, region, account)
    assert result.ok, result.report()

- every distinct request (action, resource, context) of a principal must be allowed by that
  principal's policies (:mod:`loom_test_support.iam_policy`); each denied one is reported with the
  principal, action, resource, the API operation, and the statement that is missing;
- :meth:`CheckResult.unneeded_statements` removes each statement in turn and names those whose
  removal denies none of the calls: with calls that exercise every path, a statement nobody needs.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

from .iam_policy import Statement, decide, statements_of
from .iam_requests import Request, requests_of

WHERE = {
    "worker": "worker_statements", "sweeper": "sweeper_statements", "control-plane": "control_plane_statements",
    "operator": "operator_statements",
}
"""Where each principal's statements live in terraform/modules/loom/iam.tf."""


@dataclass(frozen=True)
class Denied:
    request: Request
    explicit: bool

    def describe(self) -> str:
        r = self.request
        where = WHERE.get(r.principal, "its policy")
        why = ("an explicit Deny refuses it" if self.explicit else
               f"no statement allows it: add {r.action} on {r.resource} to {where} in terraform/modules/loom/iam.tf")
        ctx = f" with {dict(r.context)}" if r.context else ""
        return f"{r.principal}: {r.action} on {r.resource}{ctx} (API {r.operation}) is denied: {why}"


@dataclass
class CheckResult:
    requests: dict[str, set[Request]]
    statements: dict[str, list[Statement]]
    denied: list[Denied] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.denied

    def report(self) -> str:
        n = sum(len(v) for v in self.requests.values())
        if self.ok:
            return f"IAM: all {n} distinct requests of {', '.join(sorted(self.requests))} are allowed"
        lines = [f"IAM: {len(self.denied)} of {n} distinct requests would be denied on AWS:"]
        lines += [f"  - {d.describe()}" for d in sorted(self.denied, key=lambda d: (d.request.principal,
                                                                                   d.request.action, d.request.resource))]
        return "\n".join(lines)

    def unneeded_statements(self) -> list[str]:
        """``principal: policy/sid`` for each statement whose removal denies none of the requests."""
        out = []
        for principal, statements in sorted(self.statements.items()):
            requests = self.requests.get(principal, set())
            for s in statements:
                rest = [t for t in statements if t is not s]
                if not any(decide(statements, r).allowed and not decide(rest, r).allowed for r in requests):
                    out.append(f"{principal}: {s.policy}/{s.sid}")
        return out


def check(calls: Iterable[dict[str, Any]], policies: dict[str, dict[str, dict[str, Any]]], region: str,
          account: str) -> CheckResult:
    """Every call's requests against its principal's policies (``{principal: {policy name: document}}``)."""
    requests: dict[str, set[Request]] = {}
    for call in calls:
        for r in requests_of(call, region, account):
            requests.setdefault(r.principal, set()).add(r)
    statements = {p: statements_of(docs) for p, docs in policies.items()}
    result = CheckResult(requests, statements)
    for principal, reqs in sorted(requests.items()):
        if principal not in statements:
            raise KeyError(f"calls of {principal!r} were recorded but no policy of it was given "
                           f"(known: {', '.join(sorted(statements))})")
        for r in sorted(reqs, key=lambda r: (r.action, r.resource)):
            decision = decide(statements[principal], r)
            if not decision.allowed:
                result.denied.append(Denied(r, decision.explicit_deny))
    return result


def role_policies(iam: Any, role_name: str) -> dict[str, dict[str, Any]]:
    """A role's inline and attached managed policies, ``{name: document}``, read through the IAM API."""
    def doc(raw: Any) -> dict[str, Any]:
        return json.loads(unquote(raw)) if isinstance(raw, str) else raw

    out = {}
    for name in iam.list_role_policies(RoleName=role_name)["PolicyNames"]:
        out[name] = doc(iam.get_role_policy(RoleName=role_name, PolicyName=name)["PolicyDocument"])
    for attached in iam.list_attached_role_policies(RoleName=role_name)["AttachedPolicies"]:
        policy = iam.get_policy(PolicyArn=attached["PolicyArn"])["Policy"]
        version = iam.get_policy_version(PolicyArn=attached["PolicyArn"], VersionId=policy["DefaultVersionId"])
        out[attached["PolicyName"]] = doc(version["PolicyVersion"]["Document"])
    return out
