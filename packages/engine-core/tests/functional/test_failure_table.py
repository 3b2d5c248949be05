"""One test per row of DESIGN.md's failure table: inject the failure, check the invariants.

Every test runs the real Engine and Sweeper on the memory store with a manual clock. A "crash" is a
BaseException raised at a named point: nothing after it runs, the message is not acknowledged,
and SQS redelivers it after the visibility timeout, exactly as when a Lambda process dies.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections import Counter

import pytest

from engine_core import (
    Engine,
    EngineSettings,
    InsufficientTimeError,
    ManualClock,
    PermanentStepError,
    Registry,
    RetryPolicy,
    Status,
    StepMessage,
    StepRecord,
    StepStatus,
    faults,
    sleep,
    step,
    workflow,
)
from engine_core.errors import ExecutionStateConflictError, StepCapError
from engine_core.registry import build_workflow
from engine_core.testing import FakeQueue, LocalRunner

UTC = dt.timezone.utc


class Crash(BaseException):
    """The process died here."""


@pytest.fixture(autouse=True)
def _no_fault_hook():
    yield
    faults.install(None)


def crash_at(point: str, times: int = 1):
    remaining = {"n": times}

    def hook(name, info):
        if name == point and remaining["n"] > 0:
            remaining["n"] -= 1
            raise Crash(point)

    faults.install(hook)


class Ledger:
    """Counts step body executions and remembers the idempotency keys steps saw."""

    def __init__(self):
        self.runs: Counter = Counter()
        self.keys: dict[str, set] = {}

    def step(self, name: str, result=None, fail_times: int = 0, crash_times: int = 0):
        def body(ctx):
            self.runs[name] += 1
            self.keys.setdefault(name, set()).add(ctx.idempotency_key)
            if self.runs[name] <= crash_times:
                raise Crash(f"inside {name}")
            if self.runs[name] <= crash_times + fail_times:
                raise RuntimeError(f"{name} failed on purpose")
            return {name: result if result is not None else self.runs[name]}

        body.__name__ = name
        return body


def make_runner(registry: Registry, **settings) -> LocalRunner:
    clock = ManualClock(dt.datetime(2026, 3, 1, 12, 0, tzinfo=UTC))
    return LocalRunner(registry, clock=clock, settings=EngineSettings(**{"lease_s": 120, **settings}))


def deliver_all(runner: LocalRunner, max_rounds: int = 10_000) -> None:
    """Run to quiescence, treating a Crash like a dead process (the batch is simply not acked)."""
    for _ in range(max_rounds):
        try:
            if not runner.step_once():
                return
        except Crash:
            continue


def run(runner: LocalRunner, execution_id: str):
    for _ in range(10_000):
        if runner.engine.get(execution_id).status.is_terminal:
            return runner.engine.get(execution_id)
        try:
            runner.step_once()
        except Crash:
            pass
    raise AssertionError("execution did not finish")


def succeeded(runner: LocalRunner, execution_id: str) -> list[str]:
    return [r.name for r in runner.history(execution_id) if isinstance(r, StepRecord) and r.status is StepStatus.SUCCEEDED]


@pytest.fixture
def ledger():
    return Ledger()


@pytest.fixture
def three_steps(registry, ledger):
    registry.register(build_workflow("three", [ledger.step("a"), ledger.step("b"), ledger.step("c")],
                                     retry=RetryPolicy(max_attempts=3, base=1, max_delay=5)))
    return registry


# -- rows of the design's table -----------------------------------------------------------------

def test_duplicate_delivery_advances_once(three_steps, ledger):
    # given: every message is delivered twice, one step per delivery
    runner = make_runner(three_steps, max_chain_steps=1)
    runner.queue.duplicate_rate = 1.0
    eid = runner.start("three", {"n": 1})
    # when
    e = run(runner, eid)
    # then: each step recorded and run once, one claim + one commit per step, the copies were dropped as stale
    assert e.status is Status.COMPLETED and e.version == 1 + 3 * 2 and e.total_attempts == 3
    assert succeeded(runner, eid) == ["a", "b", "c"]
    assert ledger.runs == Counter(a=1, b=1, c=1)
    kinds = Counter(o.kind for o in runner.outcomes)
    assert kinds["stale"] + kinds["terminal"] == 3 and kinds["advanced"] + kinds["completed"] == 3


def test_duplicate_delivery_of_a_chained_execution_advances_once(three_steps, ledger):
    # given: the start message is delivered twice; the first copy runs the whole chain
    runner = make_runner(three_steps)
    runner.queue.duplicate_rate = 1.0
    eid = runner.start("three", {"n": 1})
    # when
    e = run(runner, eid)
    deliver_all(runner)
    # then: the copy found the execution ended (or claimed) and changed nothing
    assert e.status is Status.COMPLETED and e.version == 1 + 1 + 3
    assert ledger.runs == Counter(a=1, b=1, c=1)
    assert sorted(o.kind for o in runner.outcomes) == ["completed", "terminal"]


def test_crash_mid_step_reruns_on_redelivery_with_the_same_idempotency_key(three_steps, registry):
    # given: step b's process dies inside the body the first time
    ledger = Ledger()
    registry.register(build_workflow("crashy", [ledger.step("a"), ledger.step("b", crash_times=1), ledger.step("c")],
                                     step_timeout_s=30))
    runner = make_runner(registry)
    eid = runner.start("crashy")
    # when
    e = run(runner, eid)
    # then: the body ran twice (the documented boundary), was recorded once, with one key
    assert e.status is Status.COMPLETED
    assert ledger.runs["b"] == 2 and len(ledger.keys["b"]) == 1
    assert ledger.keys["b"] == {f"{eid}:1"}
    b = [r for r in runner.history(eid) if r.name == "b"][0]
    assert (b.status, b.attempts) == (StepStatus.SUCCEEDED, 2)


def test_crash_after_checkpoint_before_enqueue_is_redriven_by_the_sweeper(three_steps, ledger):
    # given: the worker dies right after committing step a, before sending step b's message
    runner = make_runner(three_steps)
    crash_at("worker.after_checkpoint")
    eid = runner.start("three")
    # when
    e = run(runner, eid)
    # then: the redelivered message for step a is stale; the sweeper found the expired lease
    assert e.status is Status.COMPLETED
    assert ledger.runs == Counter(a=1, b=1, c=1)
    assert succeeded(runner, eid) == ["a", "b", "c"]
    assert runner.clock.now() >= dt.datetime(2026, 3, 1, 12, 2, tzinfo=UTC)  # waited for the 120 s lease


def test_redelivered_copy_of_a_claimed_step_is_stale_and_never_runs_twice_at_once(registry):
    # given: while step a runs, its message is delivered again (visibility timeout expired early),
    # and the sweeper ticks near the end of a's budget
    inner, sweeps = [], []

    def a(ctx):
        inner.append(engine.process(StepMessage(execution_id=ctx.execution_id, step=0, version=1)))
        runner.clock.advance(seconds=59)  # still inside the 60 s budget
        sweeps.append(runner.sweeper.sweep().total_redriven)
        inner.append(engine.process(StepMessage(execution_id=ctx.execution_id, step=0, version=1)))
        return {"a": 1}

    registry.register(build_workflow("vt", [a, step(lambda ctx: {}, name="b")], step_timeout_s=60))
    runner = make_runner(registry)
    engine = runner.engine
    eid = runner.start("vt")
    # when
    e = run(runner, eid)
    # then: the copies found the step claimed (a newer version) and left it alone; nobody re-drove it
    assert [o.kind for o in inner] == ["stale", "stale"]
    assert sweeps == [0]
    assert e.status is Status.COMPLETED and e.total_attempts == 2
    assert [r.attempts for r in runner.history(eid)] == [1, 1]


def test_poison_step_fails_the_execution_with_one_dead_letter(registry):
    # given
    def poison(ctx):
        raise ValueError("bad SKU")

    registry.register(build_workflow("poison", [step(lambda ctx: {"ok": 1}, name="ok"), poison],
                                     retry=RetryPolicy(max_attempts=4, base=1, max_delay=2)))
    runner = make_runner(registry)
    runner.queue.duplicate_rate = 0.5
    eid = runner.start("poison")
    # when
    e = run(runner, eid)
    deliver_all(runner)
    # then
    assert e.status is Status.FAILED
    assert e.error.code == "step_error" and "bad SKU" in e.error.message and "attempt 4 of 4" in e.error.message
    record = runner.history(eid)[1]
    assert (record.status, record.attempts, record.is_final) == (StepStatus.FAILED, 4, True)
    notices = [d for d in runner.queue.dead_letters if d.get("execution_id") == eid]
    assert len(notices) == 1 and notices[0]["error"]["code"] == "step_error"
    assert eid not in runner.store.due_ids()


def test_concurrent_sweep_and_happy_path_one_wins(registry):
    # given: a step outlives the lease, so the sweeper re-drives the execution while it runs
    runs = Counter()

    def slow(ctx):
        runs["slow"] += 1
        if runs["slow"] == 1:
            runner.clock.advance(seconds=400)  # past the 120 s lease (+ the 60 s timeout margin)
            runner.sweeper.sweep()
        return {"slow": runs["slow"]}

    registry.register(build_workflow("race", [slow, step(lambda ctx: {}, name="after")], step_timeout_s=60))
    runner = make_runner(registry)
    eid = runner.start("race")
    # when
    e = run(runner, eid)
    # then: the first attempt's commit lost to the sweeper's claim and changed nothing
    assert e.status is Status.COMPLETED
    assert "conflict" in [o.kind for o in runner.outcomes]
    assert succeeded(runner, eid) == ["slow", "after"]
    assert runner.history(eid)[0].result_blob == '{"slow":2}'


def test_lost_timer_sleep_resumes_through_the_sweeper_one_lease_after_its_wake_time(registry, ledger):
    # given: a 10-minute sleep whose delayed message is lost (queue purged). While it may still be on its
    # way the sweeper leaves it alone (no second message for a timer whose message is queued).
    registry.register(build_workflow("nap", [ledger.step("a"), sleep(minutes=10), ledger.step("b")]))
    runner = make_runner(registry)
    eid = runner.start("nap")
    while runner.engine.get(eid).status is not Status.SLEEPING:
        runner.step_once()
    wake_at = runner.engine.get(eid).next_wake_at
    runner.queue.purge()
    # when
    e = run(runner, eid)
    # then: b ran after the wake time plus the message's lease (120 s), within one sweeper tick
    assert e.status is Status.COMPLETED and ledger.runs == Counter(a=1, b=1)
    b = runner.history(eid)[2]
    assert wake_at + dt.timedelta(seconds=120) <= b.started_at <= wake_at + dt.timedelta(seconds=120 + 60)


# -- rows Loom adds --------------------------------------------------------------------------------

def test_stale_message_from_an_older_version_changes_nothing(three_steps):
    runner = make_runner(three_steps)
    eid = runner.start("three")
    e = run(runner, eid)
    before = runner.store.metas[eid].copy()
    outcome = runner.engine.process(StepMessage(execution_id=eid, step=1, version=2))
    assert outcome.kind == "terminal" and runner.store.metas[eid] == before and e.version == 5


def test_stale_message_for_a_live_execution_changes_nothing(three_steps, ledger):
    runner = make_runner(three_steps, max_chain_steps=1)
    eid = runner.start("three")
    runner.step_once()  # step a ran; the execution waits at step 1
    e = runner.engine.get(eid)
    before = (runner.store.metas[eid].copy(), {k: dict(v) for k, v in runner.store.steps[eid].items()})
    for step_index, version in [(0, 1), (1, e.version - 1), (1, e.version + 1), (2, e.version)]:
        outcome = runner.engine.process(StepMessage(execution_id=eid, step=step_index, version=version))
        assert outcome.kind == "stale"
    assert (runner.store.metas[eid], runner.store.steps[eid]) == before and ledger.runs == Counter(a=1)


def test_message_for_a_missing_execution_is_acknowledged(three_steps):
    runner = make_runner(three_steps)
    outcome = runner.engine.process(StepMessage(execution_id="00000000-0000-4000-8000-000000000000", step=0, version=1))
    assert outcome.kind == "missing"


def test_crash_after_enqueue_before_ack_redelivers_a_harmless_duplicate(three_steps, ledger):
    runner = make_runner(three_steps)
    crash_at("worker.after_enqueue", times=2)
    eid = runner.start("three")
    e = run(runner, eid)
    assert e.status is Status.COMPLETED and ledger.runs == Counter(a=1, b=1, c=1)


def test_control_plane_crash_after_create_before_enqueue_still_runs(three_steps, ledger):
    runner = make_runner(three_steps)
    crash_at("control.after_create")
    with pytest.raises(Crash):
        runner.start("three", {"x": 1})
    [eid] = runner.store.metas
    assert runner.queue.messages == []
    e = run(runner, eid)
    assert e.status is Status.COMPLETED and ledger.runs == Counter(a=1, b=1, c=1)


def test_a_start_repeated_after_a_crash_before_its_enqueue_runs_now_not_after_the_lease(three_steps, ledger):
    # given: the control plane died after the start's write, before its first message
    runner = make_runner(three_steps)
    crash_at("control.after_create")
    with pytest.raises(Crash):
        runner.start("three", {"x": 1}, token="order-7")
    assert runner.queue.messages == []
    # and: a repeat racing the first start (within RESEND_FIRST_AFTER_S) sends nothing: the first may still send
    eid = runner.start("three", {"x": 1}, token="order-7")
    assert runner.queue.messages == []
    # when: the client, with no answer after its timeout, starts it again with the same token
    runner.clock.advance(seconds=30)
    started = runner.clock.now()
    assert runner.start("three", {"x": 1}, token="order-7") == eid
    # then: the first message is sent again, and the execution runs now, each step once
    assert [m.body.execution_id for m in runner.queue.messages] == [eid]
    e = run(runner, eid)
    assert e.status is Status.COMPLETED and ledger.runs == Counter(a=1, b=1, c=1)
    assert runner.clock.now() - started < dt.timedelta(minutes=1)
    # and: a start repeated once a delivery claimed the step sends nothing more
    sent = len(runner.queue.messages)
    assert runner.start("three", {"x": 1}, token="order-7") == eid and len(runner.queue.messages) == sent


def test_dead_lettered_step_message_is_redriven_by_the_sweeper(three_steps, ledger):
    # given: the message for step a is received 5 times without an ack, and SQS moves it to the DLQ
    runner = make_runner(three_steps, lease_s=3600)
    eid = runner.start("three")
    for _ in range(5):
        runner.queue.receive()
        runner.clock.advance(seconds=runner.queue.visibility_timeout_s)
    runner.queue.receive()
    assert runner.queue.messages == [] and runner.queue.dead_letters[0]["kind"] == "redrive"
    # when
    e = run(runner, eid)
    # then: the lease expired and the sweeper took over
    assert e.status is Status.COMPLETED and ledger.runs == Counter(a=1, b=1, c=1)


def test_backoff_longer_than_sqs_delay_goes_through_the_sweeper(registry, ledger):
    registry.register(build_workflow("slowretry", [ledger.step("a", fail_times=1)],
                                     retry=RetryPolicy(max_attempts=2, base=3600, max_delay=3600, jitter=False)))
    runner = make_runner(registry)
    sent = []
    original = runner.queue.send
    runner.queue.send = lambda m, delay_s=0: (sent.append(delay_s), original(m, delay_s))[1]
    eid = runner.start("slowretry")
    e = run(runner, eid)
    assert e.status is Status.COMPLETED and ledger.runs["a"] == 2
    assert max(sent) <= 900
    assert runner.history(eid)[0].started_at >= dt.datetime(2026, 3, 1, 13, 0, tzinfo=UTC)


def test_short_backoff_rides_sqs_delay(registry, ledger):
    registry.register(build_workflow("quickretry", [ledger.step("a", fail_times=2)],
                                     retry=RetryPolicy(max_attempts=3, base=4, max_delay=10, jitter=False)))
    runner = make_runner(registry)
    eid = runner.start("quickretry")
    e = run(runner, eid)
    assert e.status is Status.COMPLETED
    # 4 s then 8 s: no sweeper tick (60 s) was needed
    assert runner.clock.now() - dt.datetime(2026, 3, 1, 12, 0, tzinfo=UTC) < dt.timedelta(seconds=30)


def start_before_the_cap(runner: LocalRunner, workflow: str) -> str:
    """Started where the step cap was the default, run where it is ``runner``'s (a deploy lowered it: a start
    under the lower cap is refused for a step list longer than it)."""
    return LocalRunner(runner.engine.registry, clock=runner.clock, store=runner.store, queue=runner.queue,
                       settings=EngineSettings(lease_s=120)).start(workflow)


@pytest.mark.parametrize("settings, code", [({"max_steps": 2}, "step_cap_exceeded"),
                                            ({"max_total_attempts": 3}, "attempt_cap_exceeded")])
def test_safety_caps_end_the_execution_failed(registry, settings, code):
    registry.register(build_workflow("long", [step(lambda c: {}, name=f"s{i}") for i in range(5)]))
    runner = make_runner(registry, **settings)
    eid = start_before_the_cap(runner, "long")
    e = run(runner, eid)
    assert e.status is Status.FAILED and e.error.code == code
    assert "raise LOOM_MAX_" in e.error.message  # what to do, not only what
    assert len(runner.history(eid)) <= 3
    assert runner.queue.messages == [] and eid not in runner.store.due_ids()


@pytest.mark.parametrize("style", ["steps", "code"])
@pytest.mark.parametrize("settings, code", [({"max_steps": 3}, "step_cap_exceeded"),
                                            ({"max_total_attempts": 4}, "attempt_cap_exceeded")])
def test_a_safety_cap_undoes_nothing_and_the_redrive_its_message_advises_goes_on_once_it_is_raised(
        registry, settings, code, style):
    # given: five steps that each have an undo
    from engine_core.durable import durable
    from engine_core.durable import step as dstep

    undone: list = []
    ran: list = []
    if style == "steps":
        registry.register(build_workflow("long", [
            step(lambda c, i=i: ran.append(i) or {}, name=f"s{i}", compensate=lambda c, i=i: undone.append(i))
            for i in range(5)]))
    else:
        @durable("long", registry=registry)
        def flow(input):
            for i in range(5):
                dstep(f"s{i}", lambda i=i: ran.append(i), compensate=lambda _, i=i: undone.append(i))

    runner = make_runner(registry, **settings)
    eid = start_before_the_cap(runner, "long")
    # when: a cap ends it
    e = run(runner, eid)
    # then: FAILED with nothing undone (before: every completed step was undone, and the redrive the message
    # advised was refused as compensated)
    assert (e.status, e.error.code, e.compensated, undone) == (Status.FAILED, code, None, []), e.error
    assert "redrive it" in e.error.message and "nothing was undone" in e.error.message
    # and: a redrive before the cap is raised is refused, changing nothing (it would stop again at once)
    with pytest.raises(ExecutionStateConflictError) as refused:
        runner.engine.operator.redrive(eid, "ops")
    assert refused.value.code == {"step_cap_exceeded": "over_step_cap",
                                  "attempt_cap_exceeded": "over_attempt_cap"}[code], refused.value
    assert "then redrive it" in str(refused.value) and runner.engine.get(eid) == e
    # when: the cap is raised (a deploy of the functions' environment) and the operator redrives it
    raised = LocalRunner(registry, clock=runner.clock, store=runner.store, queue=runner.queue,
                         settings=EngineSettings(lease_s=120))
    raised.engine.operator.redrive(eid, "ops")
    done = run(raised, eid)
    # then: it goes on where it stopped, each step run once, nothing undone
    assert (done.status, undone, ran) == (Status.COMPLETED, [], [0, 1, 2, 3, 4]), done.error


def test_raising_the_step_cap_alone_lets_an_execution_run_past_the_default_attempt_cap(registry):
    # given: 5,010 steps, and only the steps cap raised (as its message advises), not the attempts cap
    registry.register(build_workflow("long", [step(lambda c: None, name=f"s{i}") for i in range(5010)]))
    runner = make_runner(registry, max_steps=6000)
    # when
    e = run(runner, runner.start("long"))
    # then: every step ran once (before: attempt_cap_exceeded at the 5,000th, a second cap to raise)
    assert (e.status, e.total_attempts, e.error) == (Status.COMPLETED, 5010, None)
    assert runner.engine.settings.max_total_attempts == 30_000  # five per step of the cap


def test_a_step_list_longer_than_the_step_cap_is_refused_at_start_and_runs_nothing(registry):
    # given: six steps, a cap of five; and a list of exactly five
    ran: list = []
    registry.register(build_workflow("six", [step(lambda c, i=i: ran.append(i), name=f"s{i}") for i in range(6)]))
    registry.register(build_workflow("five", [step(lambda c, i=i: ran.append(i), name=f"s{i}") for i in range(5)]))
    runner = make_runner(registry, max_steps=5)
    # when / then: refused, nothing written or sent (before: five steps ran, then FAILED step_cap_exceeded)
    with pytest.raises(StepCapError, match="workflow 'six' has 6 steps, more than the 5 an execution may run here"):
        runner.start("six")
    assert runner.engine.operator.list().executions == [] and runner.queue.messages == [] and ran == []
    # and: a list the cap holds runs to its end
    assert run(runner, runner.start("five")).status is Status.COMPLETED and ran == [0, 1, 2, 3, 4]


def test_non_serializable_result_fails_at_once_without_retries(registry):
    calls = Counter()

    def bad(ctx):
        calls["bad"] += 1
        return {"when": object()}

    registry.register(build_workflow("nonser", [bad], retry=RetryPolicy(max_attempts=5)))
    runner = make_runner(registry)
    eid = runner.start("nonser")
    e = run(runner, eid)
    assert e.status is Status.FAILED and e.error.code == "non_serializable_result"
    assert "result['when']" in e.error.message and calls["bad"] == 1 and not e.error.retryable


def test_a_permanent_error_too_long_to_record_whole_is_in_the_log_whole(registry, caplog):
    fix = "FIX: rotate the carrier API key"

    def refuse(ctx):
        raise PermanentStepError("carrier refused: " + "details " * 400 + fix)

    registry.register(build_workflow("refused", [refuse]))
    runner = make_runner(registry)
    eid = runner.start("refused")
    engine_log = logging.getLogger("engine_core")
    engine_log.addHandler(caplog.handler)  # read here whether or not a handler's setup stopped it propagating
    try:
        with caplog.at_level("WARNING", logger="engine_core"):
            e = run(runner, eid)
    finally:
        engine_log.removeHandler(caplog.handler)
    # then: the record is cut and says the rest is in the log, where the whole message is
    assert e.status is Status.FAILED and e.error.code == "permanent_error"
    assert "more characters in the log]" in e.error.message and fix not in e.error.message
    logged = [str(record.exc_info[1]) for record in caplog.records if record.exc_info]
    assert any(fix in text for text in logged), logged


def test_a_step_body_calling_sys_exit_fails_its_attempt_and_the_worker_goes_on(registry):
    # given: a step whose body calls sys.exit(3) on its first attempt (a library's or a CLI's exit), then succeeds
    import sys

    calls = Counter()

    def flaky_exit(ctx):
        calls["flaky_exit"] += 1
        if calls["flaky_exit"] == 1:
            sys.exit(3)
        return {"ok": True}

    def after(ctx):
        calls["after"] += 1
        return {}

    registry.register(build_workflow("exits", [flaky_exit, after], retry=RetryPolicy(max_attempts=2, base=1,
                                                                                      jitter=False)))
    runner = make_runner(registry)
    eid = runner.start("exits")
    # when: driven to the end (a SystemExit let through would end this test's process, as it ended loom dev)
    e = run(runner, eid)
    # then: the exit was attempt 1's failure, recorded as such and retried under the policy; nothing ran twice
    assert e.status is Status.COMPLETED and calls == {"flaky_exit": 2, "after": 1}, (e.status, calls)
    assert e.total_attempts == 3
    # and: a body that always exits fails the step after its attempts, saying what happened and what to do
    def always(ctx):
        sys.exit("bye")

    registry.register(build_workflow("always_exits", [always],
                                     retry=RetryPolicy(max_attempts=2, base=1, jitter=False)))
    failed = run(runner, runner.start("always_exits"))
    assert failed.status is Status.FAILED and failed.error.code == "step_error", failed.error
    assert failed.error.message.startswith("SystemExit: bye; the step body called sys.exit()"), failed.error.message
    assert "Raise an exception instead" in failed.error.message and failed.total_attempts == 2


def test_result_too_large_fails_without_a_retry_storm_and_stays_readable(registry):
    calls = Counter()

    def big(ctx):
        calls["big"] += 1
        return {"blob": "x" * 500_000}

    registry.register(build_workflow("big", [big], retry=RetryPolicy(max_attempts=5)))
    runner = make_runner(registry)
    eid = runner.start("big")
    e = run(runner, eid)
    assert e.status is Status.FAILED and e.error.code == "result_too_large" and calls["big"] == 1
    state = runner.engine.state(eid)
    assert state.input_blob == "{}"
    [record] = state.records
    assert (record.status, record.is_final, record.result_blob, record.error.code) == (
        StepStatus.FAILED, True, None, "result_too_large")


def test_context_growing_past_the_item_budget_fails_cleanly(registry):
    registry.register(build_workflow("grow", [step(lambda c, i=i: {f"k{i}": "y" * 150_000}, name=f"s{i}") for i in range(4)]))
    runner = make_runner(registry)
    eid = runner.start("grow")
    e = run(runner, eid)
    assert e.status is Status.FAILED and e.error.code == "result_too_large" and e.error.step_index == 2


def test_changed_workflow_definition_fails_instead_of_running_the_wrong_step(ledger):
    old = Registry()
    old.register(build_workflow("wf", [ledger.step("a"), ledger.step("b")]))
    runner = make_runner(old)
    eid = runner.start("wf")
    # a redeploy inserts a step before b
    new = Registry()
    new.register(build_workflow("wf", [ledger.step("a"), ledger.step("inserted"), ledger.step("b")]))
    runner.engine.registry = new
    e = run(runner, eid)
    assert e.status is Status.FAILED and e.error.code == "workflow_definition_mismatch"
    assert ledger.runs == Counter()


def test_unreadable_execution_fails_with_corrupt_state_and_no_crash_loop(three_steps, ledger):
    runner = make_runner(three_steps)
    eid = runner.start("three")
    runner.store.metas[eid]["current_step"] = "zero"
    deliver_all(runner)
    assert runner.store.metas[eid]["status"] == "FAILED"
    assert '"corrupt_state"' in runner.store.metas[eid]["error"]
    assert ledger.runs == Counter() and eid not in runner.store.due_ids()
    assert runner.queue.dead_letters[0]["execution_id"] == eid


def test_unreadable_context_fails_with_corrupt_state_never_restarting_from_step_zero(three_steps, ledger):
    # given: step a ran; its stored result (which the context is rebuilt from) is unreadable
    runner = make_runner(three_steps, max_chain_steps=1)
    eid = runner.start("three")
    runner.step_once()
    runner.store.steps[eid]["STEP#000#a"]["result"] = '{"$loom": "pickle", "v": 1}'
    e = run(runner, eid)
    assert e.status is Status.FAILED and e.error.code == "corrupt_state" and e.current_step == 1
    assert "stored context is unreadable" in e.error.message and "pickle" in e.error.message
    assert ledger.runs == Counter(a=1)
    assert runner.queue.dead_letters[-1]["execution_id"] == eid


@pytest.mark.parametrize("damage", ["missing", "corrupt_item", "bad_input"])
def test_missing_or_unreadable_history_fails_with_corrupt_state(three_steps, ledger, damage):
    runner = make_runner(three_steps, max_chain_steps=1)
    eid = runner.start("three", {"x": 1})
    runner.step_once()
    if damage == "missing":
        del runner.store.steps[eid]["STEP#000#a"]
    elif damage == "corrupt_item":
        runner.store.steps[eid]["STEP#000#a"]["attempts"] = "many"
    else:
        runner.store.inputs[eid] = "not json"
    e = run(runner, eid)
    assert e.status is Status.FAILED and e.error.code == "corrupt_state" and ledger.runs == Counter(a=1)
    assert e.current_step == 1 and eid not in runner.store.due_ids()
    assert {"missing": "missing from the history", "corrupt_item": "STEP#000#a is unreadable",
            "bad_input": "stored context is unreadable"}[damage] in e.error.message


def test_expired_executions_read_as_gone(three_steps):
    from engine_core import ExecutionNotFoundError

    runner = make_runner(three_steps, retention_days=1)
    eid = runner.start("three")
    run(runner, eid)
    runner.clock.advance(hours=25)
    with pytest.raises(ExecutionNotFoundError):
        runner.engine.get(eid)
    assert runner.engine.process(StepMessage(execution_id=eid, step=3, version=4)).kind == "missing"


def test_too_little_invocation_time_leaves_the_record_before_any_attempt(three_steps, ledger):
    runner = make_runner(three_steps)
    eid = runner.start("three")
    before = dict(runner.store.calls)
    with pytest.raises(InsufficientTimeError):
        runner.engine.process(StepMessage(execution_id=eid, step=0, version=1), remaining_ms=lambda: 10_000)
    # one read, no write: the attempt is not counted and the message stays current
    assert runner.store.calls == {**before, "load_state": before.get("load_state", 0) + 1}
    assert runner.history(eid) == [] and ledger.runs == Counter()
    assert runner.engine.get(eid).version == 1 and runner.engine.get(eid).attempt == 0


def test_a_step_that_kills_its_worker_every_time_ends_failed(registry):
    def killer(ctx):
        raise Crash("out of memory")

    registry.register(build_workflow("killer", [killer], retry=RetryPolicy(max_attempts=3), step_timeout_s=10))
    runner = make_runner(registry)
    eid = runner.start("killer")
    e = run(runner, eid)
    # then: attempts are counted by the claim before each body runs; no fourth is started
    assert e.status is Status.FAILED and e.error.code == "attempts_exhausted"
    assert runner.history(eid)[0].attempts == 3 and runner.history(eid)[0].is_final
    assert e.total_attempts == 3


def test_step_over_its_timeout_budget_is_retried(registry):
    import time

    calls = Counter()

    def slow(ctx):
        calls["slow"] += 1
        if calls["slow"] == 1:
            time.sleep(5)
        return {}

    registry.register(build_workflow("timeout", [step(slow, timeout_s=0.2)]))
    runner = make_runner(registry)
    eid = runner.start("timeout")
    runner.step_once()
    [first] = runner.history(eid)
    assert (first.status, first.attempts, first.error.code, first.error.retryable) == (
        StepStatus.FAILED, 1, "step_timeout", True)
    e = run(runner, eid)
    assert e.status is Status.COMPLETED and calls["slow"] == 2
    assert runner.history(eid)[0].attempts == 2


def test_permanent_step_error_skips_retries(registry):
    def refuse(ctx):
        raise PermanentStepError("card declined")

    registry.register(build_workflow("perm", [refuse], retry=RetryPolicy(max_attempts=5)))
    runner = make_runner(registry)
    e = run(runner, runner.start("perm"))
    assert e.status is Status.FAILED and e.error.code == "permanent_error" and e.total_attempts == 1
    # the message says what went wrong, then what to do
    assert e.error.message == (f"card declined. Fix the data or the call it names, then `loom redrive "
                               f"{e.execution_id}`: the step runs again"), e.error.message


def test_failure_notice_lost_in_a_crash_is_sent_on_redelivery(registry):
    def poison(ctx):
        raise PermanentStepError("no")

    registry.register(build_workflow("notice", [poison]))
    runner = make_runner(registry)
    original = runner.queue.send_dead_letter
    state = {"crashed": False}

    def flaky_dlq(body):
        if not state["crashed"]:
            state["crashed"] = True
            raise Crash("died before the DLQ send")
        original(body)

    runner.queue.send_dead_letter = flaky_dlq
    eid = runner.start("notice")
    run(runner, eid)
    deliver_all(runner)
    assert [d["execution_id"] for d in runner.queue.dead_letters] == [eid]
    assert runner.engine.get(eid).finalized


def test_terminal_executions_stamp_retention_on_their_whole_history(three_steps):
    runner = make_runner(three_steps)
    eid = runner.start("three")
    e = run(runner, eid)
    # then: history items were written with a TTL that outlives the execution's, so nothing was stamped
    assert e.finalized and e.expires_at == e.updated_at + dt.timedelta(days=30)
    assert all(r.expires_at >= e.expires_at.replace(microsecond=0) for r in runner.history(eid))
    assert "stamp_items" not in runner.store.calls and "finalize" not in runner.store.calls


def test_long_executions_restamp_history_that_would_expire_first(registry, ledger):
    # given: a sleep longer than the history's grace period
    registry.register(build_workflow("longnap", [ledger.step("a"), sleep(days=3), ledger.step("b")]))
    runner = make_runner(registry, history_grace_s=3600)
    eid = runner.start("longnap")
    e = run(runner, eid)
    assert e.status is Status.COMPLETED and e.finalized
    assert all(r.expires_at >= e.expires_at.replace(microsecond=0) for r in runner.history(eid))


def test_early_timer_message_is_delayed_again_not_run(registry, ledger):
    registry.register(build_workflow("early", [ledger.step("a"), sleep(seconds=300), ledger.step("b")]))
    runner = make_runner(registry)
    eid = runner.start("early")
    runner.step_once()
    runner.step_once()
    e = runner.engine.get(eid)
    assert e.status is Status.SLEEPING
    outcome = runner.engine.process(StepMessage(execution_id=eid, step=e.current_step, version=e.version))
    assert outcome.kind == "early" and ledger.runs["b"] == 0


# -- starts ------------------------------------------------------------------------------------------

def test_idempotent_start_returns_the_same_execution_even_after_completion(three_steps, ledger):
    from engine_core import IdempotencyConflictError

    runner = make_runner(three_steps)
    first = runner.engine.start("three", {"order": 7}, token="tok-1")
    run(runner, first.execution.execution_id)
    again = runner.engine.start("three", {"order": 7}, token="tok-1")
    assert not again.created and again.execution.execution_id == first.execution.execution_id
    assert again.execution.status is Status.COMPLETED and ledger.runs == Counter(a=1, b=1, c=1)
    with pytest.raises(IdempotencyConflictError, match="different workflow or input"):
        runner.engine.start("three", {"order": 8}, token="tok-1")


def test_start_rejects_what_cannot_be_stored(three_steps):
    from engine_core import InvalidInputError, ResultTooLargeError, UnknownWorkflowError

    runner = make_runner(three_steps)
    with pytest.raises(UnknownWorkflowError):
        runner.engine.start("nope", {})
    with pytest.raises(InvalidInputError):
        runner.engine.start("three", [1, 2])
    with pytest.raises(ResultTooLargeError):
        runner.engine.start("three", {"x": "y" * 500_000})
    assert runner.store.metas == {} and runner.queue.messages == []


def test_due_retry_with_too_little_time_is_not_claimed(registry, ledger):
    # given: a retry is due, but the invocation that receives it is nearly out of time
    registry.register(build_workflow("lowtime", [ledger.step("a", fail_times=1)],
                                     retry=RetryPolicy(max_attempts=2, base=1, max_delay=1, jitter=False)))
    runner = make_runner(registry)
    eid = runner.start("lowtime")
    runner.step_once()
    e = runner.engine.get(eid)
    runner.clock.advance(seconds=5)
    # when
    with pytest.raises(InsufficientTimeError):
        runner.engine.process(StepMessage(execution_id=eid, step=0, version=e.version), remaining_ms=lambda: 1000)
    # then: nothing was written, so the redelivered message is still current and runs at once
    assert runner.engine.get(eid).version == e.version
    outcome = runner.engine.process(StepMessage(execution_id=eid, step=0, version=e.version))
    assert outcome.kind == "completed" and ledger.runs["a"] == 2


def test_one_sweep_claims_at_most_the_configured_number_across_shards(registry):
    from engine_core import Sweeper

    registry.register(build_workflow("many", [step(lambda c: {}, name="s")]))
    runner = make_runner(registry, shards=16, sweep_max_items=5)
    for n in range(40):
        runner.engine.start("many", {"n": n})
    runner.queue.purge()
    runner.clock.advance(hours=1)
    report = Sweeper(runner.store, runner.queue, runner.clock, runner.settings, registry).sweep()
    assert report.total_redriven == 5 and report.truncated


def crashing_once():
    """A step body whose first attempt dies mid-step (its worker killed) and whose next succeeds; and its calls."""
    calls = Counter()

    def body(ctx):
        calls["a"] += 1
        if calls["a"] == 1:
            raise Crash("killed mid-step")
        return {}

    return calls, body


def test_crashed_attempt_is_redriven_when_its_claim_runs_out_not_before(registry):
    # given: an attempt is claimed 30 s after the start message's lease began, then its worker dies
    calls, body = crashing_once()
    registry.register(build_workflow("late", [step(body, name="a")], step_timeout_s=60))
    runner = make_runner(registry, lease_s=1)          # the claim holds for timeout + margin = 63 s
    t0 = runner.clock.now()
    eid = runner.start("late")
    runner.queue.purge()
    runner.clock.advance(seconds=30)
    with pytest.raises(Crash):
        runner.engine.process(StepMessage(execution_id=eid, step=0, version=1))
    claimed = runner.engine.get(eid)
    assert claimed.is_claimed and claimed.next_wake_at == t0 + dt.timedelta(seconds=30 + 63)
    # when: the sweeper ticks after the start message's lease but inside the claim: nothing to do
    runner.clock.advance(seconds=34)
    assert runner.sweeper.sweep().total_redriven == 0 and runner.queue.messages == []
    # then: once the claim (plus the index slack, capped at lease_s) has run out, it is re-driven
    runner.clock.set(claimed.index_at)
    assert runner.sweeper.sweep().total_redriven == 1
    e = run(runner, eid)
    assert e.status is Status.COMPLETED and calls["a"] == 2
    record = runner.history(eid)[0]
    assert record.attempts == 2 and record.started_at <= t0 + dt.timedelta(seconds=30 + 63 + 2)


def test_crashed_attempt_is_redriven_at_its_claim_expiry_though_its_index_key_lies_slack_later(registry):
    # given: a 30 s index slack; an attempt claimed 10 s into its message's lease, whose worker then dies
    calls, body = crashing_once()
    registry.register(build_workflow("slack", [step(body, name="a")], step_timeout_s=60))
    runner = make_runner(registry, lease_s=120, index_slack_s=30)
    eid = runner.start("slack")
    runner.queue.purge()
    runner.clock.advance(seconds=10)
    with pytest.raises(Crash):
        runner.engine.process(StepMessage(execution_id=eid, step=0, version=1))
    claimed = runner.engine.get(eid)
    assert claimed.index_at == claimed.next_wake_at + dt.timedelta(seconds=30)
    # when: the sweeper ticks one second before the claim runs out, then one second after it
    runner.clock.set(claimed.next_wake_at - dt.timedelta(seconds=1))
    before = runner.sweeper.sweep()
    runner.clock.set(claimed.next_wake_at + dt.timedelta(seconds=1))
    after = runner.sweeper.sweep()
    # then: left alone while the claim holds, re-driven once it ran out, 29 s before its index key
    assert before.total_redriven == 0
    assert after.redriven == {"stalled_lease": 1}
    assert run(runner, eid).status is Status.COMPLETED and calls["a"] == 2


def test_a_delayed_timer_message_is_not_redriven_before_its_lease_though_the_sweeper_reads_slack_ahead(registry):
    # given: a 5-minute sleep whose message rides DelaySeconds: its index key is the wake plus a lease
    registry.register(build_workflow("nap", [step(lambda ctx: {}, name="a"), sleep(minutes=5),
                                             step(lambda ctx: {}, name="b")]))
    runner = make_runner(registry, lease_s=120, index_slack_s=30)
    eid = runner.start("nap")
    while runner.engine.get(eid).status is not Status.SLEEPING:
        runner.step_once()
    e = runner.engine.get(eid)
    assert e.index_at == e.next_wake_at + dt.timedelta(seconds=120)
    # when: the sweeper ticks inside the slack before the index key
    runner.clock.set(e.index_at - dt.timedelta(seconds=10))
    report = runner.sweeper.sweep()
    # then: nothing sent (the sleep's own message is still within its lease)
    assert report.total_redriven == 0 and report.skipped["not_due"] == 1
    assert sum(1 for m in runner.queue.messages if m.body.execution_id == eid) == 1


def test_worker_dying_after_the_terminal_commit_with_no_message_left_is_finalized_by_the_sweeper(registry):
    # given: the last step's worker dies after the checkpoint, and its message is gone
    def poison(ctx):
        raise PermanentStepError("no")

    registry.register(build_workflow("orphan", [poison]))
    runner = make_runner(registry)
    original = runner.queue.send_dead_letter
    runner.queue.send_dead_letter = lambda body: (_ for _ in ()).throw(Crash("died before the DLQ send"))
    eid = runner.start("orphan")
    [m] = runner.queue.receive()
    with pytest.raises(Crash):
        runner.engine.process(m.body)
    runner.queue.purge()  # acknowledged by a concurrent copy, or dead-lettered: nothing comes back
    runner.queue.send_dead_letter = original
    assert runner.engine.get(eid).status is Status.FAILED and not runner.engine.get(eid).finalized
    # when: a sweep after the grace period
    runner.clock.advance(seconds=runner.settings.lease_s + 1)
    report = runner.sweeper.sweep()
    # then: the notice was sent once, history carries its TTL, and the job is marked done
    assert report.finalized == 1
    assert [d["execution_id"] for d in runner.queue.dead_letters] == [eid]
    assert runner.engine.get(eid).finalized and all(r.expires_at for r in runner.history(eid))
    assert runner.sweeper.sweep().finalized == 0


def test_engine_log_lines_name_the_workflow_version_and_the_record_revision_apart(registry, caplog):
    # given: a step that fails for good (logged at WARNING with the execution's keys)
    def refuse(ctx):
        raise PermanentStepError("no")

    registry.register(build_workflow("refused", [refuse]))
    runner = make_runner(registry)
    eid = runner.start("refused")
    engine_log = logging.getLogger("engine_core")
    engine_log.addHandler(caplog.handler)
    try:
        with caplog.at_level("WARNING", logger="engine_core"):
            e = run(runner, eid)
    finally:
        engine_log.removeHandler(caplog.handler)
    # then: each line says which workflow version it runs on and the record's revision, under keys that say so
    lines = [r for r in caplog.records if getattr(r, "execution_id", None) == eid and hasattr(r, "workflow")]
    assert {r.getMessage() for r in lines} == {"execution failed"}, caplog.records  # (twice when it propagates too)
    for r in lines:
        assert (r.workflow_version, r.workflow) == (e.workflow_version, "refused"), vars(r)
        assert isinstance(r.revision, int) and 0 < r.revision <= e.version and not hasattr(r, "version"), vars(r)


def test_a_cancel_requested_mid_step_whose_definition_changed_is_not_ended_cancelled_past_a_compensable_step_before_its_checkpoint():
    # given: charge (with an undo), then note, then ship; every step writes a checkpoint, so a delivery at ship
    # reads the history from note's record on; ship's worker dies after an operator asked to cancel meanwhile
    refunds, calls = [], Counter()

    def charge(ctx):
        return {"charge": "ch-1"}

    def refund(ctx):
        refunds.append(ctx.result)

    def note(ctx):
        return {"noted": True}

    def ship(ctx):
        calls["ship"] += 1
        if calls["ship"] == 1:
            runner.engine.operator.cancel(ctx.execution_id, "ops", "customer asked")  # requested: an attempt runs
            raise Crash("killed mid-step")
        return {}

    registry = Registry()
    registry.register(build_workflow("saga", [step(charge, compensate=refund), note, step(ship, name="ship")]))
    runner = make_runner(registry, checkpoint_records=1)
    eid = runner.start("saga")
    while not calls["ship"]:
        try:
            runner.step_once()
        except Crash:
            pass
    asked = runner.engine.get(eid)
    assert asked.cancel_requested and asked.is_claimed and asked.checkpoint == 1, asked
    # and the step list changes under it (same version): nothing deployed can say what charge's undo is
    changed = Registry()
    changed.register(build_workflow("saga", [step(charge), note, step(ship, name="ship_v2")]))
    runner.deploy(changed)

    # when: its claim runs out and the sweeper re-drives it
    runner.clock.set(asked.index_at)
    runner.sweeper.sweep()
    deliver_all(runner)
    e = runner.engine.get(eid)

    # then: not CANCELLED with the charge left done for good: FAILED, the cancel still requested, for a redrive
    # once the definition is deployed again; and that redrive refunds the charge, once
    assert (e.status, e.error and e.error.code, e.cancel_requested) == (Status.FAILED, "workflow_definition_mismatch",
                                                                    True), (e.status, e.compensated, refunds)
    assert "a redrive finishes that cancel" in e.error.message
    runner.deploy(registry)
    runner.engine.operator.redrive(eid, "ops")
    deliver_all(runner)
    done = runner.engine.get(eid)
    assert (done.status, done.compensated, refunds) == (Status.CANCELLED, True, [{"charge": "ch-1"}]), (done, refunds)


@pytest.mark.parametrize("style", ["steps", "code"])
@pytest.mark.parametrize("attempts", [3, 1])
def test_a_cancel_that_waited_for_an_attempt_that_ran_past_its_budget_undoes_that_step_too(style, attempts):
    # given: the charge's attempt is cut off past its 0.2 s budget after charging, and an operator asked to
    # cancel while it ran (a retry would follow, or it was the last attempt)
    import time

    from engine_core.durable import durable, step as code_step

    log: list = []
    box: dict = {}

    def charge_body(eid):
        box["asked"] = runner.engine.operator.cancel(eid, "ops", "duplicate order")
        log.append("charged")
        time.sleep(2)  # cut off at 0.2 s (StepTimeoutError): the charge may stand
        return {"charge_id": "ch-1"}

    def refund(result):
        log.append(("refund", result))

    registry = Registry()
    policy = RetryPolicy(max_attempts=attempts)
    if style == "steps":
        registry.register(build_workflow("charge", [
            step(lambda ctx: charge_body(ctx.execution_id), name="charge", compensate=lambda ctx: refund(ctx.result),
                 timeout_s=0.2, retry=policy), step(lambda ctx: log.append("ship") or {}, name="ship")]))
    else:
        @durable("charge", registry=registry)
        def flow(input):
            code_step("charge", lambda: charge_body(box["eid"]), compensate=lambda result: refund(result),
                      timeout_s=0.2, retry=policy)
            return code_step("ship", lambda: log.append("ship"))
    runner = make_runner(registry)
    box["eid"] = eid = runner.start("charge")

    # when
    e = run(runner, eid)

    # then: the cancel waited for the attempt, then undid the charge (its result unknown: None); nothing shipped
    assert box["asked"].cancel_requested and box["asked"].status is Status.RUNNING
    assert (e.status, e.compensated, log) == (Status.CANCELLED, True, ["charged", ("refund", None)]), (e.status, log)
