"""Real API documents for the CLI's tests: executions of a map, a parallel, a compensated saga, a wait,
a sleep and a failed compensation, run in-process (engine-core's LocalRunner on the memory store, a
manual clock) and answered by the control plane's own route functions, as the deployed API answers.

``python packages/cli/tests/capture_documents.py`` rewrites ``documents/*.json`` (the fake control plane
serves them); ``test_sdk_models.py`` runs ``capture()`` to check that every document the API writes
today parses with the SDK's models, nothing unknown. Needs the dev environment (engine-core, the
control plane and the example workflows installed); the CLI itself never imports any of them.

Each file: ``{"workflow": GET /workflows' entry, "sequence": [{"execution", "history"}, ...]}``, one
entry per change of the execution document, as ``loom watch`` or the console would see them.
"""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
DOCUMENTS = HERE / "documents"
REPO = HERE.parents[2]


def _relative(doc: Any) -> Any:
    """The documents without this checkout's location (a step error names the file that raised it)."""
    if isinstance(doc, dict):
        return {k: _relative(v) for k, v in doc.items()}
    if isinstance(doc, list):
        return [_relative(v) for v in doc]
    return doc.replace(f"{REPO}/", "") if isinstance(doc, str) else doc


def _parallel_registry():
    from engine_core import PermanentStepError, Registry, RetryPolicy, parallel, step, workflow

    registry = Registry()

    def quote(ctx):
        return {"quote_cents": ctx["amount_cents"]}

    def fraud_check(ctx):
        if ctx.attempt == 1:
            raise RuntimeError("fraud service timed out")
        return "clean"

    def stock_check(ctx):
        return "in stock"

    def confirm(ctx):
        return {"confirmed": True}

    @workflow("order_checks", registry=registry)
    class OrderChecks:
        steps = [quote, parallel(fraud_check, stock_check, name="checks"), confirm]
        retry = RetryPolicy(max_attempts=3, base=1.0, max_delay=5.0)
        step_timeout_s = 10

    def charge(ctx):
        return {"charge_id": "ch-1"}

    def refund(ctx):
        raise PermanentStepError("the refund API refused: charge ch-1 is disputed")

    def ship(ctx):
        raise PermanentStepError("the carrier refuses this address")

    @workflow("doomed_saga", registry=registry)
    class DoomedSaga:
        steps = [step(charge, compensate=refund), ship]
        retry = RetryPolicy(max_attempts=2, base=1.0, max_delay=5.0)
        step_timeout_s = 10

    return registry


def _follow(runner, rt, eid: str, until) -> list[dict[str, Any]]:
    from loom_control_plane import routes
    from loom_control_plane.routes import Request

    sequence: list[dict[str, Any]] = []
    for _ in range(10_000):
        doc = routes.get_execution(rt, Request(params={"execution_id": eid}))[1]
        if not sequence or sequence[-1]["execution"] != doc:
            history = routes.get_history(rt, Request(params={"execution_id": eid}, query={"limit": "100"}))[1]
            sequence.append({"execution": doc, "history": history})
        if until(doc):
            return sequence
        runner.step_once()
    raise RuntimeError(f"{eid} never got there")


def capture() -> dict[str, dict[str, Any]]:
    """Run each scenario; returns ``{name: {"workflow", "sequence"}}``."""
    import logging

    # The example steps fail on purpose; their tracebacks are noise here. Logging is the process's: what
    # runs after this (another test in the same worker) gets it back as it was.
    was = logging.root.manager.disable
    logging.disable(logging.CRITICAL)
    try:
        return _capture()
    finally:
        logging.disable(was)


def _capture() -> dict[str, dict[str, Any]]:
    from engine_core.registry import REGISTRY
    from engine_core.testing import LocalRunner
    from loom_control_plane import responses

    examples = LocalRunner()
    custom_registry = _parallel_registry()
    custom = LocalRunner(custom_registry)
    rt_examples = types.SimpleNamespace(engine=examples.engine, registry=REGISTRY)
    rt_custom = types.SimpleNamespace(engine=custom.engine, registry=custom_registry)
    ended = lambda doc: doc["status"] in ("COMPLETED", "FAILED", "CANCELLED", "COMPENSATION_FAILED")  # noqa: E731
    out: dict[str, dict[str, Any]] = {}

    def scenario(name, runner, rt, registry, workflow, data, until=ended, then=None):
        eid = runner.start(workflow, data, token=f"capture-{name}")
        sequence = _follow(runner, rt, eid, until)
        if then is not None:
            then(runner, eid)
            sequence += _follow(runner, rt, eid, ended)[1:]
        out[name] = _relative({"workflow": responses.workflow_view(registry.get(workflow)), "sequence": sequence})

    scenario("map", examples, rt_examples, REGISTRY, "batch_resize", {"count": 4, "flaky_every": 2})
    scenario("parallel", custom, rt_custom, custom_registry, "order_checks", {"amount_cents": 900})
    saga = {"order_id": "o-saga", "amount_cents": 1200, "items": [{"sku": "undeliverable", "qty": 1}]}
    scenario("compensated", examples, rt_examples, REGISTRY, "order_saga", saga)
    scenario("waiting", examples, rt_examples, REGISTRY, "expense_approval", {"expense_id": "x-1", "amount_cents": 2500},
             until=lambda doc: doc["status"] == "WAITING",
             then=lambda runner, eid: runner.send_event(eid, "approved", {"approved": True, "approver": "ana"},
                                                        event_id="mail-7"))
    order = {"order_id": "o-1", "amount_cents": 1200, "items": [{"sku": "mug", "qty": 1}]}
    scenario("sleeping", examples, rt_examples, REGISTRY, "order_fulfillment", order)
    scenario("compensation_failed", custom, rt_custom, custom_registry, "doomed_saga", {})
    return out


def main() -> int:
    DOCUMENTS.mkdir(exist_ok=True)
    for name, doc in capture().items():
        (DOCUMENTS / f"{name}.json").write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
        print(f"wrote {DOCUMENTS / name}.json: {len(doc['sequence'])} documents")
    return 0


if __name__ == "__main__":
    sys.exit(main())
