"""``loom versions check``: before a deploy, refuse a build that drops a workflow version (or a whole
workflow) that executions live on the stack still run on, naming each with its count.

The build's side is a manifest of what its worker zip registers (``python -m engine_core.manifest --zip
dist/lambda/worker.zip``, or ``make versions-check``); the stack's side is ``GET /workflows``, which counts
the live executions on each version, deployed or not (``undeployed``).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .sdk import LoomClient, LoomError
from .sdk.errors import CONFIGURATION

REFUSED = 1


@dataclass(frozen=True)
class Finding:
    workflow: str
    version: int
    live: int
    problem: str
    """``dropped`` (refused) or ``changed`` (the same version with another step list: a warning)."""
    next_version: int = 0
    """The version a change should ship as: one past the newest in the build or on the stack."""

    def line(self) -> str:
        if self.problem == "dropped":
            return (f"version {self.version} of workflow {self.workflow!r}: {self.live} live execution(s) run on it, and "
                    "this build does not register it; they would fail at their next delivery "
                    "(workflow_version_missing)")
        return (f"version {self.version} of workflow {self.workflow!r} changes its step list in this build, with "
                f"{self.live} live execution(s) on it: each goes on only if the steps it still has to run are "
                f"unchanged, else it fails workflow_definition_mismatch; ship the change as version {max(self.next_version, self.version + 1)}")


def read_manifest(path: Path) -> dict[str, dict[int, str | None]]:
    """The build's workflows: ``{name: {version: fingerprint}}``."""
    try:
        doc = json.loads(path.read_text())
    except OSError as exc:
        raise LoomError(CONFIGURATION, f"cannot read the manifest {path}: {exc.strerror}; write it with "
                                       "`python -m engine_core.manifest --zip dist/lambda/worker.zip --out FILE`") from None
    except ValueError:
        raise LoomError(CONFIGURATION, f"the manifest {path} is not JSON; write it again with "
                                       "`python -m engine_core.manifest`") from None
    workflows = doc.get("workflows") if isinstance(doc, dict) else None
    if not isinstance(workflows, dict) or not all(isinstance(v, dict) for v in workflows.values()):
        raise LoomError(CONFIGURATION, f'the manifest {path} does not hold {{"workflows": {{name: {{version: '
                                       'fingerprint}}}; write it again with `python -m engine_core.manifest`')
    try:
        return {name: {int(v): fp for v, fp in versions.items()} for name, versions in workflows.items()}
    except ValueError:
        raise LoomError(CONFIGURATION, f"the manifest {path} has a version that is not a number") from None


def live_on_stack(doc: dict[str, Any]) -> tuple[dict[tuple[str, int], tuple[int, str | None]], dict[str, Any]]:
    """(workflow, version) -> (live executions, deployed fingerprint), and the count's ``live`` summary."""
    if "live" not in doc:
        raise LoomError(CONFIGURATION, "the control plane does not count live executions per version (it predates "
                                       "workflow versions); deploy a release with versions once (its control plane counts them), then check")
    out: dict[tuple[str, int], tuple[int, str | None]] = {}
    for wf in doc.get("workflows", []):
        for v in wf.get("versions", []):
            out[(wf["name"], int(v["version"]))] = (int(v.get("live") or 0), v.get("fingerprint"))
    for u in doc.get("undeployed", []):
        out[(u["workflow"], int(u["version"]))] = (int(u["live"]), None)
    return out, doc["live"]


def findings(live: dict[tuple[str, int], tuple[int, str | None]],
             build: dict[str, dict[int, str | None]]) -> list[Finding]:
    out = []
    for (workflow, version), (n, deployed_fp) in sorted(live.items()):
        if not n:
            continue
        kept = build.get(workflow, {})
        if version not in kept:
            out.append(Finding(workflow, version, n, "dropped"))
        elif deployed_fp and kept[version] and kept[version] != deployed_fp:
            newest = max([v for (w, v) in live if w == workflow] + list(kept))
            out.append(Finding(workflow, version, n, "changed", newest + 1))
    return out


def check(client: LoomClient, args) -> int:
    build = read_manifest(Path(args.manifest))
    live, summary = live_on_stack(client.live_versions())
    found = findings(live, build)
    bound = "" if summary.get("complete", True) else (
        f" (at least: the count stopped at {summary.get('read')} live executions)")
    dropped = [f for f in found if f.problem == "dropped"]
    if getattr(args, "json", False):
        print(json.dumps({"ok": not dropped or args.warn_only, "complete": summary.get("complete", True),
                          "findings": [f.__dict__ for f in found]}, indent=2, sort_keys=True))
    else:
        for f in found:
            label = "refused" if f.problem == "dropped" and not args.warn_only else "WARNING"
            print(f"loom versions check: {label}: {f.line()}{bound}", file=sys.stderr)
        if dropped and not args.warn_only:
            total = sum(f.live for f in dropped)
            print(f"loom versions check: refused: this build would strand {total} live execution(s){bound}. Keep "
                  "each version registered (@workflow(name, version=N) beside the newer one) until `loom workflows` "
                  "shows none live on it, or let them finish first", file=sys.stderr)
        elif not found:
            total = sum(n for n, _ in live.values())
            print(f"loom versions check: ok: every version the {total} live execution(s) run on is in this build{bound}")
    return REFUSED if dropped and not args.warn_only else 0


def add_parser(sub: Any) -> None:
    text = "workflow versions before a deploy: `loom versions check --manifest FILE`"
    v = sub.add_parser("versions", help=text, description=text)
    vsub = v.add_subparsers(dest="versions_command", required=True, metavar="ACTION")
    c = vsub.add_parser("check", help="refuse (exit 1) a build that drops a version live executions run on, naming "
                                      "each with its count; warn when a version's step list changes under them")
    c.add_argument("--manifest", required=True, help="the build's workflows (python -m engine_core.manifest --zip "
                                                     "dist/lambda/worker.zip --out FILE; make versions-check does both)")
    c.add_argument("--warn-only", action="store_true", help="print what would be stranded, but exit 0")
    c.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="print the findings as JSON")
    c.set_defaults(func=check)
