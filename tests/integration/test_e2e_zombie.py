"""A worker paused past the visibility timeout: its redelivered message is stale, and no second attempt
starts while its claim holds (a takeover waits for the invocation's deadline, after which Lambda has
killed it); resumed, it finishes the execution."""

from __future__ import annotations

import os
import signal
import time

from e2e_support import GREETING_STEPS, assert_each_step_once, assert_versions, process_state, records_for, resume, wait_for


def test_a_worker_paused_past_the_visibility_timeout_is_never_doubled_and_finishes_when_resumed(loom):
    original = loom.deployment.queue.visibility_timeout_s
    worker_timeout = loom.deployment.worker.timeout_s
    loom.set_visibility_timeout(3)  # "too short": SQS hands the message out again while the first runs
    paused = None
    try:
        token, eid = loom.new_token("zombie")
        arm = loom.faults.arm("step.return", action="stop", match={"execution_id": eid, "step": 0, "attempt": 1})
        since = time.time()
        loom.start("flaky_greeting", {"name": "zombie", "failures": 0}, token)
        (fired,) = loom.faults.wait_fired(arm, timeout_s=30)
        paused = fired.pid
        wait_for(lambda: process_state(paused) == "T", "the worker to stop (SIGSTOP)", 5)
        stopped_at = time.monotonic()

        # Past the visibility timeout the message comes back. Attempt 1's claim moved the version on,
        # so the copy is stale: acknowledged, nothing run, nothing written.
        again = wait_for(lambda: [r for r in records_for(loom.events, eid, since) if r["receive_count"] >= 2],
                         "the message to come back after the visibility timeout", 15)
        wait_for(lambda: [b for b in loom.events.of("batch_done", since)
                          if again[0]["message_id"] in b.get("message_ids", []) and b["status"] == "ok"],
                 "the redelivered copy to be handled", 15)
        held = loom.execution(eid)
        assert (held["status"], held["current_step"], held["attempt"]) == ("RUNNING", 0, 1), held
        assert time.monotonic() - stopped_at < worker_timeout - 2, "too slow: the function timeout would kill it"
        log = (loom.stack.log_dir / f"{loom.deployment.worker.name}.log").read_text()
        copies = [line for line in log.splitlines() if eid in line and '"outcome":"stale"' in line]
        assert copies, "the redelivered copy was not acknowledged as stale"

        # Resumed inside its deadline, the claimed attempt finishes the execution: each step once.
        os.kill(paused, signal.SIGCONT)
        paused = None
        done = loom.wait(eid, timeout_s=40)
        assert done["status"] == "COMPLETED", done
        assert_versions(done, 4)  # start, claim 0, step 0 (+ claim 1), step 1
        history = loom.history(eid)
        assert_each_step_once(history, GREETING_STEPS)
        assert [h["attempts"] for h in history] == [1, 1]  # never a second attempt while the claim held
    finally:
        if paused is not None:
            resume(paused)
        loom.set_visibility_timeout(original)
