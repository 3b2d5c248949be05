"""Helpers shared by the end-to-end tests (conftest.py puts this directory on sys.path)."""

from __future__ import annotations

import datetime as dt
import json
import os
import signal
import time
from typing import Any

ORDER_STEPS = ["reserve_inventory", "charge_payment", "wait_for_carrier_pickup", "ship_order", "notify_customer"]
GREETING_STEPS = ["compose_greeting", "deliver_greeting"]


def ts(text: str) -> dt.datetime:
    return dt.datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=dt.timezone.utc)


def assert_each_step_once(history: list[dict[str, Any]], names: list[str]) -> None:
    """One record per step, in order, each SUCCEEDED (a STEP# item is keyed by its index)."""
    assert [(h["step_index"], h["name"]) for h in history] == list(enumerate(names)), history
    assert [h["status"] for h in history] == ["SUCCEEDED"] * len(names), history


def step_message(execution_id: str, step: int, version: int) -> str:
    from engine_core import StepMessage

    return StepMessage(execution_id=execution_id, step=step, version=version).model_dump_json()


def records_for(events, eid: str, since: float = 0.0) -> list[dict[str, Any]]:
    """Every record of ``eid`` handed to the worker, with its receive count and parsed body."""
    out = []
    for batch in events.of("batch", since):
        for r in batch.get("records", []):
            try:
                body = json.loads(r["body"])
            except ValueError:
                continue
            if isinstance(body, dict) and body.get("execution_id") == eid:
                out.append({**r, "body": body})
    return out


def process_state(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return None


def wait_for(check, what: str, timeout_s: float = 30.0, every_s: float = 0.1):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(every_s)
    raise AssertionError(f"timed out after {timeout_s:g} s waiting for {what}")


def resume(pid: int) -> None:
    if process_state(pid) not in (None, "Z"):
        os.kill(pid, signal.SIGCONT)


def assert_versions(e: dict[str, Any], transitions: int, timer_redrives_allowed: int = 0) -> None:
    """The version counts transitions: exactly one per start, claim of an attempt, step commit (which
    also claims the next step when the chain goes on), sleep, and sweeper re-drive.

    A retry or a sleep is woken by its delayed message or, when a 1 s sweep happens to come first, by
    the sweeper: one more transition for each timer the sweeper got to first.
    """
    assert transitions <= e["version"] <= transitions + timer_redrives_allowed, (
        f"version {e['version']}, expected {transitions}"
        + (f" (+ up to {timer_redrives_allowed} sweeper wake-ups)" if timer_redrives_allowed else ""))
