"""Crash points: armed from outside, fired inside the function process, with real signals."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import pytest

from loom_local.faults import FaultControl, FaultError


def _record(body: dict, message_id: str = "m-1") -> dict:
    import json

    return {"Records": [{"messageId": message_id, "receiptHandle": "rh", "body": json.dumps(body),
                         "attributes": {"ApproximateReceiveCount": "1"}, "messageAttributes": {},
                         "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:q"}]}


@pytest.fixture
def faults(tmp_path: Path) -> FaultControl:
    return FaultControl(tmp_path / "faults")


def test_an_armed_point_sigkills_the_process_that_reaches_it(make_function, faults, read_out):
    fn = make_function(handler="tiny_handlers.worker", fault_dir=faults.dir)
    arm = faults.arm("worker.after_checkpoint", match={"execution_id": "e-1"})
    other = fn.invoke(_record({"id": "e-2"}))
    assert other.ok  # a point that does not match does nothing
    killed = fn.invoke(_record({"id": "e-1"}))
    assert killed.status == "crashed"
    assert "signal: SIGKILL" in killed.error["errorMessage"]
    (fired,) = faults.wait_fired(arm, timeout_s=1)
    assert fired.pid == killed.pid and fired.point == "worker.after_checkpoint"
    assert fired.info == {"execution_id": "e-1", "step": 0}
    # Fired once: the same point passes on the next process.
    assert fn.invoke(_record({"id": "e-1"})).ok
    assert faults.pending() == []


def test_a_count_fires_exactly_that_many_times(make_function, faults):
    fn = make_function(handler="tiny_handlers.worker", fault_dir=faults.dir)
    faults.arm("worker.after_claim", count=2)
    statuses = [fn.invoke(_record({"id": "e"})).status for _ in range(4)]
    assert statuses == ["crashed", "crashed", "ok", "ok"]
    assert len(faults.fired()) == 2


def test_stop_pauses_the_process_until_sigcont(make_function, faults):
    fn = make_function(handler="tiny_handlers.worker", fault_dir=faults.dir, timeout_s=20)
    arm = faults.arm("worker.after_checkpoint", action="stop")
    results = []
    t = threading.Thread(target=lambda: results.append(fn.invoke(_record({"id": "e"}))))
    t.start()
    (fired,) = faults.wait_fired(arm, timeout_s=10)
    deadline = time.monotonic() + 5
    while _state(fired.pid) != "T" and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _state(fired.pid) == "T"  # stopped
    time.sleep(0.5)
    assert t.is_alive()
    os.kill(fired.pid, signal.SIGCONT)
    t.join(10)
    assert results[0].ok


def test_raise_turns_into_an_invocation_error(make_function, faults):
    fn = make_function(handler="tiny_handlers.worker", fault_dir=faults.dir)
    faults.arm("worker.after_claim", action="raise", message="simulated outage")
    result = fn.invoke(_record({"id": "e"}))
    assert result.status == "function_error"
    assert result.error["errorType"] == "InjectedFault" and result.error["errorMessage"] == "simulated outage"


def test_step_return_kills_after_the_body_ran(make_function, faults, read_out):
    fn = make_function(handler="tiny_handlers.worker", fault_dir=faults.dir)
    arm = faults.arm("step.return", match={"workflow": "tiny", "step_name": "charge"})
    assert fn.invoke(_record({"action": "step", "name": "reserve", "id": "e"})).ok  # other step: untouched
    killed = fn.invoke(_record({"action": "step", "name": "charge", "id": "e", "step": 1}))
    assert killed.status == "crashed"
    bodies = [r for r in read_out() if r["kind"] == "body"]
    assert [b["step_name"] for b in bodies] == ["reserve", "charge"]  # the body ran before the kill
    outcomes = [r for r in read_out() if r["kind"] == "outcome"]
    assert len(outcomes) == 1  # the engine never saw the charge's result
    (fired,) = faults.fired(arm)
    assert fired.info == {"execution_id": "e", "workflow": "tiny", "step": 1, "step_name": "charge", "attempt": 1,
                          "branch": None, "compensation": False}


def test_step_enter_raise_fails_the_body_before_its_first_line(make_function, faults, read_out):
    fn = make_function(handler="tiny_handlers.worker", fault_dir=faults.dir)
    faults.arm("step.enter", action="raise", match={"step_name": "ship"}, message="carrier API returned 503")
    assert fn.invoke(_record({"action": "step", "name": "ship", "id": "e"})).ok
    (outcome,) = [r for r in read_out() if r["kind"] == "outcome"]
    assert outcome["ok"] is False and "carrier API returned 503" in outcome["error"]
    assert not [r for r in read_out() if r["kind"] == "body"]
    # The profiler is gone afterwards: the next body runs normally.
    assert fn.invoke(_record({"action": "step", "name": "ship", "id": "e"})).ok
    assert [r["step_name"] for r in read_out() if r["kind"] == "body"] == ["ship"]


def test_no_control_directory_means_no_hook(make_function, tmp_path):
    # The same zip, run without a fault directory, as a deployed function would be: nothing can fire.
    faults = FaultControl(tmp_path / "elsewhere")
    faults.arm("worker.after_claim")
    fn = make_function(handler="tiny_handlers.worker", fault_dir=None)
    assert fn.invoke(_record({"id": "e"})).ok
    assert faults.pending() and not faults.fired()


def test_arming_mistakes_are_refused_with_the_reason(faults):
    with pytest.raises(FaultError, match="unknown crash point 'worker.after_lunch'"):
        faults.arm("worker.after_lunch")
    with pytest.raises(FaultError, match="unknown action"):
        faults.arm("worker.after_claim", action="explode")
    with pytest.raises(FaultError, match="step.return cannot raise"):
        faults.arm("step.return", action="raise")
    with pytest.raises(FaultError, match="did not fire within"):
        faults.wait_fired(faults.arm("worker.after_claim"), timeout_s=0.1)
    assert faults.disarm_all() == 1


def test_the_engine_and_the_runtime_agree_on_the_point_names():
    from engine_core import faults as engine_faults

    from loom_local import faults as local_faults

    assert local_faults.POINTS is engine_faults.POINTS
    assert set(engine_faults.BODY_POINTS) == {"step.enter", "step.return"} <= set(engine_faults.POINTS)


def _state(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0]


def test_disarm_when_some_arms_fired_removes_only_the_others_and_names_them(make_function, faults):
    # given: two arms, one of which fires
    fn = make_function(handler="tiny_handlers.worker", fault_dir=faults.dir)
    (fires,) = faults.arm("worker.after_claim", match={"execution_id": "e-1"})
    (waits,) = faults.arm("worker.after_claim", match={"execution_id": "e-2"})
    other = faults.arm("worker.after_claim", match={"execution_id": "e-3"})
    assert fn.invoke(_record({"id": "e-1"})).status == "crashed"

    # when
    removed = faults.disarm([fires, waits])

    # then: the fired one was claimed, so only the waiting one is removed; another caller's arm stays
    assert removed == [waits]
    assert faults.pending() == other
