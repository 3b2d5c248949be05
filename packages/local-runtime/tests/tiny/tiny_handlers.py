"""Tiny stand-in handlers for the local runtime's own tests (packed into zips by conftest.py).

They record what they saw in $TINY_OUT (one JSON line per record or call) and do what a message asks:
fail, sleep, raise, crash, answer badly, or run a step body through engine-core's real runner.
"""

import json
import os
import sys
import time

from engine_core import faults
from engine_core._runner import run_body
from engine_core.context import StepContext

LOADED_AT = time.time()


def _record(kind, **fields):
    with open(os.environ["TINY_OUT"], "a", encoding="utf-8") as f:
        f.write(json.dumps({"kind": kind, "pid": os.getpid(), **fields}) + "\n")


def _step_body(ctx):
    _record("body", step_name=ctx.step_name, attempt=ctx.attempt)
    return {"done": ctx.step_name}


def worker(event, context):
    failures = []
    for r in event["Records"]:
        body = json.loads(r["body"])
        action = body.get("action", "ok")
        _record("record", message_id=r["messageId"], body=body, receive_count=r["attributes"]["ApproximateReceiveCount"],
                remaining_ms=context.get_remaining_time_in_millis(), keys=sorted(r), source=r["eventSourceARN"])
        faults.point("worker.after_claim", execution_id=body.get("id"), step=body.get("step", 0), attempt=1)
        if action == "step":
            ctx = StepContext(execution_id=body.get("id", "x"), workflow="tiny", step_index=body.get("step", 0),
                              step_name=body.get("name", "s"), attempt=1, data={})
            outcome = run_body(_step_body, ctx, 5.0, lambda: time.monotonic() * 1000)
            _record("outcome", ok=outcome.ok, error=outcome.error_message)
        elif action == "fail":
            failures.append({"itemIdentifier": r["messageId"]})
        elif action == "sleep":
            time.sleep(body["seconds"])
        elif action == "raise":
            raise RuntimeError("asked to raise")
        elif action == "crash":
            os._exit(3)
        elif action == "bad_response":
            return {"batchItemFailures": [{"itemIdentifier": "not-in-this-batch"}]}
        elif action == "big_response":
            return {"batchItemFailures": [], "padding": "x" * body["bytes"]}
        faults.point("worker.after_checkpoint", execution_id=body.get("id"), step=body.get("step", 0))
    return {"batchItemFailures": failures}


def sweeper(event, context):
    _record("tick", event=event)
    faults.point("sweeper.after_claim", execution_id="tick")
    return {"swept": True}


def control(event, context):
    path = event["rawPath"]
    _record("http", path=path, method=event["requestContext"]["http"]["method"])
    faults.point("control.after_create", execution_id=path)
    if path == "/plain":
        return {"hello": "world"}
    if path == "/boom":
        raise ValueError("boom")
    if path == "/env":
        return {"env": dict(os.environ), "sys_path": sys.path}
    if path.startswith("/bytes/"):
        return {"statusCode": 200, "body": "x" * int(path.rsplit("/", 1)[1])}
    return {"statusCode": 201, "headers": {"content-type": "application/json", "x-tiny": "yes"},
            "cookies": ["a=1"], "body": json.dumps(event)}


def probe(event, context):
    """For isolation tests: what can this process import, and what does it see?"""
    action = event.get("action")
    if action == "sleep":
        time.sleep(event["seconds"])
    if action == "raise":
        raise KeyError("nope")
    if action == "exit":
        os._exit(7)
    if action == "unserializable":
        return {"x": object()}
    importable = {}
    for name in ("boto3", "pytest", "moto", "loom_local", "engine_core"):
        try:
            __import__(name)
            importable[name] = True
        except ImportError:
            importable[name] = False
    import boto3
    return {"pid": os.getpid(), "importable": importable, "boto3_file": boto3.__file__, "sys_path": sys.path,
            "env": dict(os.environ), "remaining_ms": context.get_remaining_time_in_millis(),
            "request_id": context.aws_request_id, "arn": context.invoked_function_arn, "loaded_at": LOADED_AT,
            "cwd": os.getcwd()}
