"""The SDK's models cannot drift from the control plane's reply models: the same fields, and every document
the API writes today (examples run through its own routes, capture_documents.py) parses with nothing
unknown. The control plane is importable in the dev environment only; the SDK never imports it."""

from __future__ import annotations

import subprocess
import sys

import pytest
from pydantic import BaseModel

from loom_cli.sdk import models

PAIRS = [("ErrorInfo", "engine_core.model", "ErrorInfo"), ("ErrorDocument", "loom_control_plane.responses", "ErrorBody"),
         ("Links", "loom_control_plane.responses", "Links"),
         ("Started", "loom_control_plane.responses", "ExecutionStarted"),
         ("WaitingFor", "loom_control_plane.responses", "WaitingFor"),
         ("FanOutProgress", "loom_control_plane.responses", "FanOutProgress"),
         ("Execution", "loom_control_plane.responses", "ExecutionView"),
         ("Cost", "loom_control_plane.responses", "CostView"),
         ("CorruptRecord", "loom_control_plane.responses", "CorruptView"),
         ("StepRecord", "loom_control_plane.responses", "StepRecordView"),
         ("BranchRecord", "loom_control_plane.responses", "BranchView"),
         ("Operation", "loom_control_plane.responses", "OperationView"),
         ("Event", "loom_control_plane.responses", "EventView"),
         ("ListEntry", "loom_control_plane.responses", "ListEntryView"),
         ("ListPage", "loom_control_plane.responses", "ListReply"),
         ("EventSent", "loom_control_plane.responses", "EventSentView"),
         ("RetryPolicy", "engine_core.model", "RetryPolicy")]


def _fields(model: type[BaseModel]) -> set[str]:
    return {f.alias or name for name, f in model.model_fields.items()}


@pytest.mark.parametrize("ours, module, theirs", PAIRS, ids=[p[0] for p in PAIRS])
def test_each_sdk_model_has_the_fields_of_the_control_planes_model(ours, module, theirs):
    import importlib

    mine, upstream = getattr(models, ours), getattr(importlib.import_module(module), theirs)
    assert _fields(mine) == _fields(upstream), (
        f"{ours} drifted from {module}.{theirs}: only the SDK has {sorted(_fields(mine) - _fields(upstream))}, "
        f"only the API has {sorted(_fields(upstream) - _fields(mine))}")


def _unknown(model: BaseModel, where: str = "") -> list[str]:
    """Every field the API sent that the SDK's models do not declare (model_extra), anywhere inside."""
    found = [f"{where}.{k}" for k in (model.model_extra or {})]
    for name in type(model).model_fields:
        value = getattr(model, name)
        for i, item in enumerate(value if isinstance(value, list) else [value]):
            if isinstance(item, BaseModel):
                found += _unknown(item, f"{where}.{name}[{i}]")
    return found


def test_every_document_the_api_writes_parses_with_nothing_unknown():
    from capture_documents import capture

    for name, captured in capture().items():
        wf = models.Workflow.model_validate(captured["workflow"])
        assert _unknown(wf) == [], (name, "workflow")
        for n, moment in enumerate(captured["sequence"]):
            e = models.Execution.model_validate(moment["execution"])
            h = models.History.model_validate(moment["history"])
            assert _unknown(e) == [] and _unknown(h) == [], (name, n, _unknown(e), _unknown(h))
            assert e.document() == moment["execution"] and h.document() == moment["history"]


def test_the_captured_documents_are_what_the_api_writes_today():
    """documents/*.json are re-captured when the API's shapes change (python capture_documents.py)."""
    import json

    from capture_documents import DOCUMENTS, capture

    def shape(doc):  # the keys at every level, not the values (ids, times, tokens differ run to run)
        if isinstance(doc, dict):
            return {k: shape(v) for k, v in doc.items()}
        if isinstance(doc, list):
            return [shape(v) for v in doc]
        return type(doc).__name__

    for name, captured in capture().items():
        stored = json.loads((DOCUMENTS / f"{name}.json").read_text())
        assert shape(stored) == shape(captured), f"documents/{name}.json is stale: run capture_documents.py"


def test_the_sdk_imports_no_engine_and_no_control_plane():
    code = ("import sys, loom_cli.sdk, loom_cli.main, loom_cli.console.server, loom_cli.mcp_tools; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('engine_core', 'loom_control_plane', "
            "'boto3', 'loom_examples')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
