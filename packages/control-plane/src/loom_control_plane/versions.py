"""Workflow versions in the API: ``GET /workflows`` with each version and its live executions, and the
redrive body that moves a failed execution onto another version (DESIGN.md "Versions")."""

from __future__ import annotations

import json
from typing import Any

from engine_core.adapters.bootstrap import Runtime
from engine_core.live import dropped, live_counts
from engine_core.registry import MAX_VERSION, WorkflowDef

from .errors import ApiError
from .responses import workflow_view

_OFF = ("0", "false", "no")
_ON = ("1", "true", "yes")


def version_view(wf: WorkflowDef, live: int | None) -> dict[str, Any]:
    """One version of a workflow: its fingerprint, its steps by name (a code-first version: its function) and
    how many executions are live on it."""
    out: dict[str, Any] = {"version": wf.version, "fingerprint": wf.fingerprint,
                           "style": "steps" if wf.code is None else "code", "steps": [s.name for s in wf.steps]}
    if wf.code is not None:
        out["function"] = wf.source
    if live is not None:
        out["live"] = live
    return out


def workflows_reply(rt: Runtime, query: dict[str, str]) -> dict[str, Any]:
    """``GET /workflows``: each workflow as its newest version describes it, with ``versions`` (every deployed
    version and the executions live on it) and, for live executions on versions this deployment does not have,
    ``undeployed``. ``?live=0`` leaves the live counts out, and with them ``live`` and ``undeployed`` (they read
    the due index: see ``engine_core.live``); any other parameter, or another value, is refused."""
    unknown = sorted(set(query) - {"live"})
    if unknown:
        raise ApiError(400, "invalid_request", f"unknown query parameter {', '.join(repr(u) for u in unknown)}; "
                                               "allowed: live")
    live = query.get("live", "1").lower()
    if live not in _OFF + _ON:
        raise ApiError(400, "invalid_request", f"query parameter 'live' must be 1 or 0 (true or false, yes or no), got "
                                               f"{live[:40]!r}; fix it and send the request again")
    if live in _OFF:
        counts = None
    else:
        counts = live_counts(rt.engine.life.store, rt.settings.shards, rt.engine.clock.now())
    workflows = []
    for name in rt.registry.names():
        newest = rt.registry.get(name)
        view = {**workflow_view(newest), "version": newest.version}
        view["versions"] = [version_view(rt.registry.get(name, v), None if counts is None else counts.of(name, v))
                            for v in rt.registry.versions(name)]
        workflows.append(view)
    out: dict[str, Any] = {"workflows": workflows}
    if counts is not None:
        deployed = {n: rt.registry.versions(n) for n in rt.registry.names()}
        out["live"] = {"complete": counts.complete, "read": counts.read}
        out["undeployed"] = [{"workflow": d.workflow, "version": d.version, "live": d.live}
                             for d in dropped(counts, deployed)]
    return out


def parse_redrive_request(body: str | None, is_base64_encoded: bool) -> int | None:
    """A redrive takes no body, or ``{"to_version": N}``: the version to resume on (None: its own)."""
    if body in (None, "", "{}"):
        return None
    text = body
    if is_base64_encoded:
        import base64
        import binascii

        try:
            text = base64.b64decode(body, validate=True).decode("utf-8")
        except (binascii.Error, ValueError):
            raise ApiError(400, "invalid_json", "request body is marked base64-encoded but is not valid base64") from None
    try:
        data = json.loads(text)
    except ValueError:
        raise ApiError(400, "invalid_json", 'request body is not valid JSON; send {"to_version": 2} or nothing') from None
    if not isinstance(data, dict) or set(data) - {"to_version"}:
        raise ApiError(400, "invalid_request", (
            'POST /executions/{id}/redrive takes no body, or {"to_version": N} to resume on version N of its '
            "workflow; fix the request body and send it again"))
    version = data.get("to_version")
    if version is None:
        return None
    if isinstance(version, bool) or not isinstance(version, int) or not 1 <= version <= MAX_VERSION:
        raise ApiError(400, "invalid_request", (
            f"'to_version' must be an integer from 1 to {MAX_VERSION} (GET /workflows lists the versions), got "
            f"{version!r}; fix the request body and send it again"))
    return version
