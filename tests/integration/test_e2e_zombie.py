"""A worker paused past the visibility timeout wakes up after the execution finished: its write loses."""

from __future__ import annotations

import os
import signal
import time

from e2e_support import GREETING_STEPS, assert_each_step_once, assert_versions, process_state, records_for, resume, wait_for


def test_a_paused_worker_resumed_after_another_finished_changes_nothing(loom):
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

        # Past the visibility timeout the message comes back; another worker finds attempt 1 still
        # RUNNING (busy) and leaves it. The lease runs out, the sweeper re-drives, attempt 2 finishes.
        wait_for(lambda: [r for r in records_for(loom.events, eid, since) if r["receive_count"] >= 2],
                 "the message to come back after the visibility timeout", 15)
        done = loom.wait(eid, timeout_s=40)
        assert done["status"] == "COMPLETED", done
        assert_versions(done, 4, busy_redrives_allowed=1)  # start, sweeper claim, step 0 (attempt 2), step 1
        history = loom.history(eid)
        assert process_state(paused) == "T", "the paused worker must still be paused (not killed) here"
        assert time.monotonic() - stopped_at < worker_timeout - 2, "too slow: the function timeout would kill it"

        os.kill(paused, signal.SIGCONT)
        finished = wait_for(lambda: [b for b in loom.events.of("batch_done", since) if b.get("pid") == paused],
                            "the resumed worker to finish its invocation", 20)
        assert finished[0]["status"] == "ok"
        # Its checkpoint was a conditional write on (step 0, version 1): rejected, nothing changed.
        log = (loom.stack.log_dir / f"{loom.deployment.worker.name}.log").read_text()
        mine = [line for line in log.splitlines() if f" {paused} " in line and eid in line]
        assert any('"message":"transition lost the race; nothing changed"' in line for line in mine), mine
        assert any('"outcome":"duplicate"' in line for line in mine), mine
        assert loom.execution(eid) == done
        assert loom.history(eid) == history
        assert_each_step_once(history, GREETING_STEPS)
        assert history[0]["attempts"] == 2  # the paused attempt and the one that finished
    finally:
        if paused is not None:
            resume(paused)
        loom.set_visibility_timeout(original)
