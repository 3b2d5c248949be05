"""Interleavings the random search found, replayed as scripts on the same scheduler and checker.

Seeds are fragile witnesses (any change to the simulation's choices changes what a seed does), so
each bug the soak found is also pinned here as an explicit schedule: which operation pauses where,
what runs meanwhile, where the process dies. Each test then runs the quiet phase and the full checker.
"""

from __future__ import annotations

import datetime as dt

import pytest

from engine_core import EngineSettings, RetryPolicy
from engine_core.clock import parse_ts
from engine_core.adapters.memory import MemoryStore
from loomsim.runner import finish_script as finish
from loomsim.runner import script_report as report
from loomsim.sim import FaultMix, Simulation, make_config
from loomsim.world import OpPlan
from loomsim.workflows import StepSpec, WorkflowSpec


def scripted(steps: list[StepSpec], *, visibility_s: float = 30.0, max_attempts: int = 3, **settings) -> Simulation:
    wf = WorkflowSpec("wf0", steps, RetryPolicy(max_attempts=max_attempts, base=1.0, jitter=False),
                      step_timeout_s=300.0)
    config = make_config(0, workflows=[wf], n_execs=1, fault_ops=0, fx=FaultMix(), visibility_s=visibility_s,
                         max_receives=10, caps=bool({"max_steps", "max_total_attempts"} & set(settings)),
                         deadline_rate=0.0, body_time=0.0, settings=EngineSettings(lease_s=900.0, **settings))
    sim = Simulation(config, MemoryStore, tracing=True)
    sim.faults_on = True  # the plans below are the only faults: every random rate is zero
    sim.start(sim.planned[0])
    return sim


def deliver(sim: Simulation, plan: OpPlan | None = None, during_pause=None, m=None) -> None:
    """Deliver ``m`` (default: the oldest visible message) under ``plan``; a pause in it runs
    ``during_pause(m)``."""
    m = m or min(sim.queue.visible(), key=lambda m: (m.visible_at, m.mid))
    sim.plan = lambda kind, plan=plan: plan or OpPlan()
    if during_pause is not None:
        sim.pause = lambda op, where: during_pause(m)
    try:
        sim.deliver(m)
    finally:
        sim.plan = lambda kind: OpPlan()
        sim.__dict__.pop("pause", None)


def only_message(sim: Simulation):
    (m,) = sim.queue.messages.values()
    return m


def meta(sim: Simulation) -> dict:
    return sim.inner.metas[sim.planned[0].eid]


def body_runs(sim: Simulation, step: int) -> list:
    return sim.bodies.get((sim.planned[0].eid, step), [])


def test_redelivered_copy_is_stale_while_the_running_attempt_fails_the_execution():
    """Worker A stops inside the last step's body past the visibility timeout; its message goes to B,
    which finds the step claimed (the message's version is no longer current: stale) and acknowledges
    it. A resumes, the step fails for good, A commits FAILED and dies before finalizing: no message
    will ever come back, so the sweeper must finish the housekeeping (finalize_by) and the notice."""
    sim = scripted([StepSpec(0, "s0", "permanent")], max_queue_delay_s=60)

    def meanwhile(m):
        sim.clock.advance(31)  # past the 30 s visibility timeout: SQS hands the message to B
        sim.deliver(m)

    deliver(sim, OpPlan(body_pause=True, crash_on="finalize", crash_after=False), during_pause=meanwhile)
    assert sim.stats["outcome.stale"] == 1 and sim.stats["crash.before.finalize"] == 1, report(sim, [])
    assert meta(sim)["status"] == "FAILED" and not meta(sim)["finalized"], report(sim, [])
    violations = finish(sim)
    assert not violations, report(sim, violations)
    assert meta(sim)["finalized"] and sim.stats["sweep.finalized"] == 1, report(sim, [])


def test_redelivered_timer_message_acknowledged_as_stale_while_its_claimer_runs():
    """Worker A takes a due sleep timer from message M (claim: v2 -> v3) and stops inside the next
    step's body; M comes back to B after the visibility timeout, is stale against v3 and is
    acknowledged. A resumes, the step fails for good, A commits FAILED and dies before finalizing:
    nothing redelivers M, the sweeper finalizes."""
    sim = scripted([StepSpec(0, "z0", "sleep", sleep_s=10.0), StepSpec(1, "s1", "permanent")])
    deliver(sim)  # the sleep: M (s1 v2) is sent with a 10 s delay
    sim.clock.advance(10)

    def meanwhile(m):
        sim.clock.advance(31)
        sim.deliver(m)

    deliver(sim, OpPlan(body_pause=True, crash_on="finalize", crash_after=False), during_pause=meanwhile)
    assert sim.stats["outcome.stale"] == 1 and sim.stats["crash.before.finalize"] == 1, report(sim, [])
    violations = finish(sim)
    assert not violations, report(sim, violations)


@pytest.mark.parametrize("cap", [{"max_total_attempts": 1}, {"max_steps": 1}])
def test_failing_at_a_cap_counts_no_attempt(cap):
    """Step 0 runs and succeeds (1 attempt); the next delivery hits the cap and ends FAILED. Nothing
    ran, so total_attempts must stay 1 (and within max_total_attempts)."""
    sim = scripted([StepSpec(0, "s0", "plain"), StepSpec(1, "s1", "plain")], **cap)
    deliver(sim)
    deliver(sim)
    assert sim.stats["outcome.advanced"] == 1 and sim.stats["outcome.failed"] == 1, report(sim, [])
    violations = finish(sim)
    assert not violations, report(sim, violations)


# -- the interleavings of issue 10 ------------------------------------------------------------------
@pytest.mark.parametrize("when", ["after the retry commit", "while A runs"])
def test_a_duplicate_copy_never_spends_a_retry(when):
    """(a) Copies A and B of one message. A's body fails (retryable) and A commits the retry; B arrives
    afterwards (or while A's body runs). B must be stale: no claim, no body, the retry not spent. The
    step fails once and succeeds on its second and last attempt: with a retry spent by B it would end
    FAILED attempts_exhausted (the defect the old intent record had)."""
    sim = scripted([StepSpec(0, "s0", "flaky", fail_first=1), StepSpec(1, "s1", "plain")], max_attempts=2)
    m = only_message(sim)
    sim.queue.duplicate(m)
    a, b = sorted(sim.queue.messages.values(), key=lambda x: x.mid)
    if when == "while A runs":
        deliver(sim, OpPlan(body_pause=True), during_pause=lambda _: sim.deliver(b), m=a)
    else:
        deliver(sim, m=a)
        assert meta(sim)["timer"] == "retry" and meta(sim)["attempt"] == 1, report(sim, [])
        deliver(sim, m=b)
    assert sim.stats["outcome.retry_scheduled"] == 1 and sim.stats["outcome.stale"] == 1, report(sim, [])
    assert [r.attempt for r in body_runs(sim, 0)] == [1] and meta(sim)["attempt"] == 1, report(sim, [])
    violations = finish(sim)
    assert not violations, report(sim, violations)
    assert meta(sim)["status"] == "COMPLETED" and meta(sim)["total_attempts"] == 3, report(sim, [])
    assert [r.attempt for r in body_runs(sim, 0)] == [1, 2], report(sim, [])


def test_a_message_late_past_its_lease_is_stale_after_the_sweeper_redrove():
    """(b) The first message waits in the queue (a backlog) past its lease; the sweeper re-drives the
    execution with a new message meanwhile. The late copy is stale; the step runs once, under the new
    message's claim."""
    sim = scripted([StepSpec(0, "s0", "plain"), StepSpec(1, "s1", "plain")], max_chain_steps=1)
    late = only_message(sim)
    late.visible_at = sim.clock.now() + dt.timedelta(hours=2)  # stuck behind a backlog
    sim.clock.advance(seconds=903 + 1)  # the message's lease (900 s + margin) ran out
    sim.sweep("(scheduled)")
    assert sim.stats["sweep.redriven.stalled_lease"] == 1, report(sim, [])
    fresh = next(x for x in sim.queue.messages.values() if x.mid != late.mid)
    deliver(sim, m=fresh)
    sim.clock.set(late.visible_at)
    deliver(sim, m=late)
    assert sim.stats["outcome.stale"] == 1 and [r.attempt for r in body_runs(sim, 0)] == [1], report(sim, [])
    violations = finish(sim)
    assert not violations, report(sim, violations)
    assert meta(sim)["status"] == "COMPLETED" and meta(sim)["total_attempts"] == 2, report(sim, [])


def test_a_late_message_claims_a_fresh_lease_so_the_sweeper_leaves_its_body_alone():
    """(b) The message waited past its lease and no sweep ran meanwhile (ticks skipped). Its delivery
    claims the step with a lease covering the body, so a sweep during the body re-drives nothing and
    the step runs once (the old protocol started the body under the expired lease)."""
    sim = scripted([StepSpec(0, "s0", "plain")])
    sim.clock.advance(seconds=2000)  # past the 903 s lease, nobody swept

    def meanwhile(m):
        sim.clock.advance(250)  # inside the 300 s budget
        sim.sweep("(scheduled, during the body)")

    deliver(sim, OpPlan(body_pause=True), during_pause=meanwhile)
    assert sim.stats["sweep.redriven.stalled_lease"] == 0 and sim.stats["outcome.completed"] == 1, report(sim, [])
    violations = finish(sim)
    assert not violations, report(sim, violations)
    assert len(body_runs(sim, 0)) == 1, report(sim, [])


@pytest.mark.parametrize("where", [("put_step", 2, False), ("worker.after_record", 1, True),
                                   ("commit", 2, True), ("worker.after_checkpoint", 1, True)])
def test_a_duplicate_inside_a_chain_runs_nothing(where):
    """(c) A chain runs step 0 then step 1 in one delivery; a duplicate copy of the first message is
    delivered in the middle: before step 1's history write, between step 0's record and its commit,
    right after the commit of step 0 that also claimed step 1 (there is no moment between that commit
    and the claim: they are one write). The copy is stale every time: each body runs once."""
    name, nth, after = where
    sim = scripted([StepSpec(0, "s0", "plain"), StepSpec(1, "s1", "plain"), StepSpec(2, "s2", "plain")])
    m = only_message(sim)
    sim.queue.duplicate(m)
    a, b = sorted(sim.queue.messages.values(), key=lambda x: x.mid)
    deliver(sim, OpPlan(pause_on=name, pause_nth=nth, pause_after=after), during_pause=lambda _: sim.deliver(b), m=a)
    assert sim.stats["outcome.stale"] == 1 and sim.stats["outcome.completed"] == 1, report(sim, [])
    assert sim.stats["steps_run.3"] == 1, report(sim, [])  # the chain ran all three steps
    violations = finish(sim)
    assert not violations, report(sim, violations)
    assert [len(body_runs(sim, i)) for i in range(3)] == [1, 1, 1], report(sim, [])


@pytest.mark.parametrize("meanwhile_b", ["commits", "dies after its claim"])
def test_a_worker_stopped_past_its_lease_cannot_record_over_the_takeover(meanwhile_b):
    """(d) Worker A stops inside step 0's body past its lease; the sweeper re-drives and worker B claims
    attempt 2. If B commits, A's history write is refused (superseded); if B died after its claim, A's
    record lands but its commit conflicts with B's claim, and attempt 3 settles the step. Either way
    nothing is recorded twice and the step is passed once, by the attempt whose record the history keeps."""
    sim = scripted([StepSpec(0, "s0", "plain"), StepSpec(1, "s1", "plain")], max_chain_steps=1)

    def meanwhile(m):
        key = meta(sim)["index_at"]  # the lease's due-index key (up to index_slack_s past the lease)
        sim.clock.set(max(sim.clock.now(), parse_ts(key) + dt.timedelta(seconds=1)))
        sim.sweep("(scheduled)")
        fresh = next(x for x in sim.queue.visible() if x.body.version == meta(sim)["version"])
        plan = OpPlan() if meanwhile_b == "commits" else OpPlan(body_crash=True)
        deliver(sim, plan, m=fresh)

    deliver(sim, OpPlan(body_pause=True), during_pause=meanwhile)
    if meanwhile_b == "commits":
        assert sim.stats["outcome.superseded"] == 1 and sim.stats["outcome.advanced"] == 1, report(sim, [])
    else:
        assert sim.stats["outcome.conflict"] == 1 and sim.stats["crash.body"] == 1, report(sim, [])
    violations = finish(sim)
    assert not violations, report(sim, violations)
    record = sim.inner.steps[sim.planned[0].eid]["STEP#000#s0"]
    assert record["status"] == "SUCCEEDED" and record["attempts"] == (2 if meanwhile_b == "commits" else 3)
    assert sum(1 for c in sim.commits[sim.planned[0].eid] if c.advanced and c.before["current_step"] == 0) == 1
