"""Interleavings the random search found, replayed as scripts on the same scheduler and checker.

Seeds are fragile witnesses (any change to the simulation's choices changes what a seed does), so
each bug the soak found is also pinned here as an explicit schedule: which operation pauses where,
what runs meanwhile, where the process dies. Each test then runs the quiet phase and the full checker.
"""

from __future__ import annotations

import pytest

from engine_core import EngineSettings, RetryPolicy
from engine_core.storage.memory import MemoryStore
from loomsim.checks import check_run
from loomsim.runner import focused_trace
from loomsim.sim import FaultMix, Simulation, make_config
from loomsim.world import OpPlan
from loomsim.workflows import StepSpec, WorkflowSpec


def scripted(steps: list[StepSpec], *, visibility_s: float = 30.0, **settings) -> Simulation:
    wf = WorkflowSpec("wf0", steps, RetryPolicy(max_attempts=3, base=1.0), step_timeout_s=300.0)
    config = make_config(0, workflows=[wf], n_execs=1, fault_ops=0, fx=FaultMix(), visibility_s=visibility_s,
                         max_receives=10, caps=bool({"max_steps", "max_total_attempts"} & set(settings)),
                         settings=EngineSettings(lease_s=900.0, **settings))
    sim = Simulation(config, MemoryStore, tracing=True)
    sim.faults_on = True  # the plans below are the only faults: every random rate is zero
    sim.start(sim.planned[0])
    return sim


def deliver(sim: Simulation, plan: OpPlan | None = None, during_pause=None) -> None:
    """Deliver the oldest visible message under ``plan``; a pause in it runs ``during_pause``."""
    m = min(sim.queue.visible(), key=lambda m: (m.visible_at, m.mid))
    sim.plan = lambda kind, plan=plan: plan or OpPlan()
    if during_pause is not None:
        sim.pause = lambda op, where: during_pause(m)
    try:
        sim.deliver(m)
    finally:
        sim.plan = lambda kind: OpPlan()
        sim.__dict__.pop("pause", None)


def finish(sim: Simulation) -> list[str]:
    sim.__dict__.pop("plan", None)
    sim.quiet_phase()
    check_run(sim)
    return [v for v in sim.violations if "the run says nothing" not in v]  # scripts are short on purpose


def report(sim: Simulation, violations: list[str]) -> str:
    eid = sim.planned[0].eid or ""
    return "\n".join(violations + [f"operations on {eid[:8]}:"] + focused_trace(sim.trace, eid[:8])[:40])


def test_busy_copy_acknowledged_while_the_running_attempt_ends_the_execution():
    """Worker A stops inside the last step's body past the visibility timeout; its message goes to B,
    whose intent is refused (busy) and which acknowledges the message. The attempt's remaining budget
    (about 270 s) is over max_queue_delay_s (60 s), so no copy is re-sent. A resumes, commits COMPLETED
    and dies before finalizing: no message will ever come back for this execution."""
    sim = scripted([StepSpec(0, "s0", "plain")], max_queue_delay_s=60)

    def meanwhile(m):
        sim.clock.advance(31)  # past the 30 s visibility timeout: SQS hands the message to B
        sim.deliver(m)

    deliver(sim, OpPlan(body_pause=True, crash_on="finalize", crash_after=False), during_pause=meanwhile)
    assert sim.stats["outcome.busy"] == 1 and sim.stats["crash.before.finalize"] == 1, report(sim, [])
    violations = finish(sim)
    assert not violations, report(sim, violations)


def test_redelivered_timer_message_acknowledged_as_stale_while_its_claimer_runs():
    """Worker A takes a due sleep timer from message M (claim: v2 -> v3) and stops inside the next
    step's body; M comes back to B after the visibility timeout, is stale against v3 and is
    acknowledged. A resumes, commits COMPLETED and dies before finalizing: nothing redelivers M."""
    sim = scripted([StepSpec(0, "z0", "sleep", sleep_s=10.0), StepSpec(1, "s1", "plain")])
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
