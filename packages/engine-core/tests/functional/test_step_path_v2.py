"""Issue 10 ("step path v2"): one test per numbered defect, each of which failed on the old protocol
(intent record + two-item transaction, one step per delivery), plus chaining and context rebuilding.

Engine tests run the real Engine and Sweeper with a manual clock, on the memory store and, where the
defect is about DynamoDB, on the DynamoDB store on moto. A "crash" is a BaseException raised at a
named point: nothing after it runs and the message is not acknowledged.
"""

from __future__ import annotations

import datetime as dt
import decimal
import threading
import time
from collections import Counter

import pytest

from engine_core import (
    ConfigurationError,
    Engine,
    EngineSettings,
    IdempotencyConflictError,
    InsufficientTimeError,
    ManualClock,
    NonSerializableResultError,
    PermanentStepError,
    Registry,
    RetryPolicy,
    Status,
    StepMessage,
    StepRecord,
    StepStatus,
    StorageError,
    Sweeper,
    check_fits,
    faults,
    sleep,
    step,
)
from engine_core.engine import rebuild_context
from engine_core.registry import build_workflow
from engine_core.adapters.memory import MemoryStore
from engine_core.testing import FakeQueue, LocalRunner

import sqlite_probes

UTC = dt.timezone.utc
T0 = dt.datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


class Crash(BaseException):
    """The process died here."""


@pytest.fixture(autouse=True)
def _no_fault_hook():
    yield
    faults.install(None)


def crash_at(point: str, when=lambda info: True, times: int = 1) -> None:
    remaining = {"n": times}

    def hook(name, info):
        if name == point and remaining["n"] > 0 and when(info):
            remaining["n"] -= 1
            raise Crash(point)

    faults.install(hook)


def make_runner(registry: Registry, **settings) -> LocalRunner:
    clock = ManualClock(T0)
    return LocalRunner(registry, clock=clock, settings=EngineSettings(**{"lease_s": 120, **settings}))


def run(runner: LocalRunner, execution_id: str):
    for _ in range(10_000):
        e = runner.engine.get(execution_id)
        if e.status.is_terminal:
            return e
        try:
            runner.step_once()
        except Crash:
            pass
    raise AssertionError("execution did not finish")


class Ledger:
    def __init__(self):
        self.runs: Counter = Counter()

    def step(self, name: str, fail_times: int = 0, crash_times: int = 0, permanent_if=None):
        def body(ctx):
            self.runs[name] += 1
            if permanent_if is not None and permanent_if(ctx):
                raise PermanentStepError(f"{name} refused")
            if self.runs[name] <= crash_times:
                raise Crash(f"inside {name}")
            if self.runs[name] <= crash_times + fail_times:
                raise RuntimeError(f"{name} failed on purpose")
            return {name: self.runs[name]}

        body.__name__ = name
        return body


@pytest.fixture
def ledger():
    return Ledger()


class Harness:
    """Engine + sweeper on any store (memory or DynamoDB on moto), a fake queue and a manual clock."""

    def __init__(self, store, registry: Registry, **settings):
        self.clock = ManualClock(T0)
        self.settings = EngineSettings(**{"shards": getattr(store, "shards", 1), "lease_s": 120, **settings})
        self.store, self.queue = store, FakeQueue(self.clock)
        self.engine = Engine(store, self.queue, registry, self.clock, self.settings)
        self.sweeper = Sweeper(store, self.queue, self.clock, self.settings, registry)
        self.outcomes: list = []

    def drive(self, execution_id: str, max_rounds: int = 1000, **process_kw):
        """Deliver messages (and sweep every minute when idle) until the execution ends."""
        for _ in range(max_rounds):
            e = self.store.load(execution_id)
            if e.status.is_terminal:
                return e
            batch = self.queue.receive()
            if not batch:
                nxt = self.queue.next_visible_at()
                self.clock.set(max(self.clock.now(), min(nxt, self.clock.now() + dt.timedelta(seconds=60))
                                   if nxt else self.clock.now() + dt.timedelta(seconds=60)))
                self.sweeper.sweep()
                continue
            for m in batch:
                try:
                    self.outcomes.append(self.engine.process(m.body, **process_kw))
                except Crash:
                    continue
                self.queue.ack(m)
        raise AssertionError("execution did not finish")


def corrupt_meta(store, execution_id: str, attr: str, value) -> None:
    if isinstance(store, MemoryStore):
        store.metas[execution_id][attr] = value
        return
    if sqlite_probes.is_sqlite(store):
        return sqlite_probes.set_attr(store, f"EXEC#{execution_id}", "#META", attr, value)
    from boto3.dynamodb.types import TypeSerializer

    store.client.update_item(
        TableName=store.table, Key={"PK": {"S": f"EXEC#{execution_id}"}, "SK": {"S": "#META"}},
        UpdateExpression="SET #a = :v", ExpressionAttributeNames={"#a": attr},
        ExpressionAttributeValues={":v": TypeSerializer().serialize(value)},
    )


# -- defect 1: the defaults never ran a step ---------------------------------------------------------------

def test_defect1_check_fits_refuses_a_budget_that_cannot_fit_naming_both_numbers(registry):
    registry.register(build_workflow("tight", [step(lambda c: {}, name="a")], step_timeout_s=60))
    with pytest.raises(ConfigurationError) as info:
        check_fits(registry, EngineSettings(function_timeout_s=60))
    text = str(info.value)
    assert "60 s" in text and "63.25 s" in text and "'tight'" in text and "'a'" in text
    # and what a step without a budget gets, as the engine computes it (the margin and the start-up reserve)
    assert "steps without one get the worker timeout minus the margin and a 2 s start-up reserve" in text
    assert EngineSettings(function_timeout_s=60).default_step_timeout_s == 60 - 3 - 2
    # it fits a longer worker timeout, and an unknown one is not checked
    check_fits(registry, EngineSettings(function_timeout_s=63.25))
    check_fits(registry, EngineSettings())


def test_defect1_check_fits_refuses_a_per_step_budget_that_cannot_fit(registry):
    registry.register(build_workflow("perstep", [step(lambda c: {}, name="a"),
                                                 sleep(hours=1), step(lambda c: {}, name="slow", timeout_s=58)]))
    with pytest.raises(ConfigurationError, match=r"'slow' has a 58 s budget.*needs 61.25 s"):
        check_fits(registry, EngineSettings(function_timeout_s=60))


@pytest.mark.parametrize("timeout_s", [57, 56.75])
def test_a_budget_that_needs_the_whole_timeout_is_refused_at_start_where_every_delivery_put_it_back(timeout_s):
    # given: a step whose budget plus the 3 s margin is all of a 60 s worker's timeout (57 s), or leaves 0.25 s
    registry, runs = Registry(), Counter()
    registry.register(build_workflow("whole", [step(lambda c: runs.update(["a"]) or {}, name="a", timeout_s=timeout_s)]))
    settings = EngineSettings(function_timeout_s=60)
    clock = ManualClock()
    queue = FakeQueue(clock)
    engine = Engine(MemoryStore(), queue, registry, clock, settings)
    eid = engine.start("whole", {}).execution.execution_id

    # when: three deliveries, each reaching the step with 59.99 s left (a delivery never has the whole 60 s)
    released = 0
    for _ in range(3):
        for m in queue.receive():
            try:
                engine.process(m.body, remaining_ms=lambda: 59_990)
            except InsufficientTimeError:
                released += 1
                queue.release(m)
            else:
                queue.ack(m)

    # then: the 57 s budget never ran, put back at every delivery: the worker refuses to start with it now, naming
    # what it needs (before: allowed); the budget that leaves 0.25 s starts and runs at the first delivery
    if timeout_s == 57:
        assert (released, runs["a"], engine.get(eid).status) == (3, 0, Status.RUNNING)
        with pytest.raises(ConfigurationError, match=r"'a' has a 57 s budget; with the 3 s margin and 0.25 s for the "
                                                     r"read before it, it needs 60.25 s"):
            check_fits(registry, settings)
    else:
        assert (released, runs["a"], engine.get(eid).status) == (0, 1, Status.COMPLETED)
        check_fits(registry, settings)


def test_defect1_check_fits_refuses_a_worker_timeout_too_short_even_for_the_default_budget(registry):
    # Lambda's own default timeout is 3 s: the derived budget (at least 1 s) + the 3 s margin cannot fit
    registry.register(build_workflow("defaults", [step(lambda c: {}, name="a")]))
    with pytest.raises(ConfigurationError, match="3 s"):
        check_fits(registry, EngineSettings(function_timeout_s=3))


def test_defect1_a_workflow_on_every_default_runs_end_to_end_in_a_60_s_worker(registry, ledger):
    # given: no timeout, no retry policy anywhere, the worker's timeout is 60 s (Terraform's default)
    registry.register(build_workflow("defaults", [ledger.step("a"), ledger.step("b", fail_times=1), sleep(minutes=5),
                                                  ledger.step("c")]))
    settings = EngineSettings(function_timeout_s=60)
    check_fits(registry, settings)
    assert settings.default_step_timeout_s + settings.time_margin_ms / 1000 <= 60
    runner = LocalRunner(registry, clock=ManualClock(T0), settings=settings)
    eid = runner.start("defaults", {})
    # when: every delivery is a fresh 60 s invocation
    for _ in range(1000):
        if runner.engine.get(eid).status.is_terminal:
            break
        batch = runner.queue.receive()
        if not batch:
            runner.step_once()  # moves time / sweeps
            continue
        for m in batch:
            invoked = time.monotonic()
            runner.outcomes.append(runner.engine.process(
                m.body, remaining_ms=lambda: int(60_000 - (time.monotonic() - invoked) * 1000)))
            runner.queue.ack(m)
    # then: it completed; nothing was refused for lack of time
    e = runner.engine.get(eid)
    assert e.status is Status.COMPLETED and ledger.runs == Counter(a=1, b=2, c=1)
    assert [r.attempts for r in runner.history(eid)] == [1, 2, 1, 1]


def test_defect1_a_record_that_cannot_run_in_this_invocation_raises_before_any_write(registry, ledger):
    registry.register(build_workflow("fits", [ledger.step("a")]))
    runner = make_runner(registry, function_timeout_s=60)
    eid = runner.start("fits")
    before = Counter(runner.store.calls)
    with pytest.raises(InsufficientTimeError) as info:
        runner.engine.process(StepMessage(execution_id=eid, step=0, version=1), remaining_ms=lambda: 20_000)
    assert Counter(runner.store.calls) - before == Counter(load_state=1)
    assert info.value.needed_ms == (60 - 3 - 2) * 1000 + 3000 and ledger.runs == Counter()
    e = runner.engine.get(eid)
    assert (e.version, e.attempt, e.total_attempts, e.is_claimed) == (1, 0, 0, False)


# -- defect 2: a duplicate delivery spent a retry -------------------------------------------------------------

def test_defect2_a_copy_arriving_after_the_retry_was_committed_is_stale_and_spends_no_retry(registry, ledger):
    # given: step a fails once; two attempts are allowed
    registry.register(build_workflow("dup", [ledger.step("a", fail_times=1)],
                                     retry=RetryPolicy(max_attempts=2, base=1, max_delay=1, jitter=False)))
    runner = make_runner(registry)
    eid = runner.start("dup")
    message = StepMessage(execution_id=eid, step=0, version=1)
    # when: copy A fails retryably and commits the retry, then copy B arrives
    assert runner.engine.process(message).kind == "retry_scheduled"
    assert runner.engine.process(message).kind == "stale"
    # then: B ran no body and counted no attempt; the real retry succeeds
    assert ledger.runs == Counter(a=1) and runner.engine.get(eid).attempt == 1
    e = run(runner, eid)
    assert e.status is Status.COMPLETED and ledger.runs == Counter(a=2) and e.total_attempts == 2
    [record] = runner.history(eid)
    assert (record.status, record.attempts) == (StepStatus.SUCCEEDED, 2)


class ReadThenPause(MemoryStore):
    """A memory store that, on one chosen read, lets ``meanwhile`` run after the read and before the
    reader goes on: the reader acts on the state as it was (copy B read before copy A committed)."""

    meanwhile = None

    def load_state(self, execution_id, since=None):
        state = super().load_state(execution_id, since)
        action, self.meanwhile = self.meanwhile, None
        if action is not None:
            action()
        return state

    def load(self, execution_id):  # the old protocol's read
        e = super().load(execution_id)
        action, self.meanwhile = self.meanwhile, None
        if action is not None:
            action()
        return e


def test_defect2_a_copy_that_read_before_the_retry_was_committed_cannot_start_an_attempt(registry, ledger):
    # given: step a fails once; two attempts are allowed
    registry.register(build_workflow("race2", [ledger.step("a", fail_times=1)],
                                     retry=RetryPolicy(max_attempts=2, base=1, max_delay=1, jitter=False)))
    clock = ManualClock(T0)
    runner = LocalRunner(registry, clock=clock, store=ReadThenPause(), settings=EngineSettings(lease_s=120))
    eid = runner.start("race2")
    message = StepMessage(execution_id=eid, step=0, version=1)
    a_outcome = []
    # when: copy B reads (0, v1); then copy A runs, fails retryably and commits the retry; then B goes on
    runner.store.meanwhile = lambda: a_outcome.append(runner.engine.process(message))
    b_outcome = runner.engine.process(message)
    # then: B's claim lost the (step, version) condition: no body, no attempt counted, no record written
    assert [o.kind for o in a_outcome] == ["retry_scheduled"]
    assert b_outcome.kind in ("conflict", "stale") and ledger.runs == Counter(a=1)
    e = runner.engine.get(eid)
    assert (e.attempt, e.total_attempts, e.timer.value) == (1, 1, "retry")
    # and the real retry runs after its backoff, and succeeds
    e = run(runner, eid)
    assert e.status is Status.COMPLETED and ledger.runs == Counter(a=2) and e.total_attempts == 2
    [record] = runner.history(eid)
    assert (record.status, record.attempts) == (StepStatus.SUCCEEDED, 2)


def test_defect2_a_copy_arriving_while_the_first_attempt_runs_is_stale(registry):
    runs, inner = Counter(), []

    def a(ctx):
        runs["a"] += 1
        if runs["a"] == 1:
            inner.append(runner.engine.process(StepMessage(execution_id=ctx.execution_id, step=0, version=1)))
            raise RuntimeError("transient")
        return {}

    registry.register(build_workflow("dup2", [a], retry=RetryPolicy(max_attempts=2, base=1, max_delay=1)))
    runner = make_runner(registry)
    eid = runner.start("dup2")
    e = run(runner, eid)
    assert [o.kind for o in inner] == ["stale"]
    assert e.status is Status.COMPLETED and runs["a"] == 2 and e.total_attempts == 2


# -- defect 3: the lease was not renewed when a body started -----------------------------------------------

def test_defect3_a_message_that_waited_past_its_lease_after_the_sweeper_redrove_is_stale(registry, ledger):
    registry.register(build_workflow("backlog", [ledger.step("a")], step_timeout_s=60))
    runner = make_runner(registry)
    eid = runner.start("backlog")
    [waiting] = runner.queue.receive()  # a slow poller holds it
    # when: the lease (and its index slack) runs out and the sweeper re-drives
    runner.clock.set(runner.engine.get(eid).index_at)
    assert runner.sweeper.sweep().total_redriven == 1
    # then: the old copy is stale, the re-driven message runs the body once
    assert runner.engine.process(waiting.body).kind == "stale"
    e = run(runner, eid)
    assert e.status is Status.COMPLETED and ledger.runs == Counter(a=1)


def test_defect3_the_claim_at_body_start_leases_the_whole_budget_and_the_sweeper_waits(registry):
    seen = {}

    def body(ctx):
        e = runner.store.load(ctx.execution_id)
        seen["claim"] = e
        # the sweeper ticks up to the end of the first invocation's deadline: nothing is re-driven
        for offset in (59, 62, 890):
            runner.clock.set(e.attempt_started_at + dt.timedelta(seconds=offset))
            seen.setdefault("redriven", []).append(runner.sweeper.sweep().total_redriven)
        return {"ok": True}

    registry.register(build_workflow("lease", [step(body, name="a")], step_timeout_s=60))
    runner = make_runner(registry)
    eid = runner.start("lease")
    [m] = runner.queue.receive()
    # given: the message waited in the queue past its 123 s lease, before any sweep
    runner.clock.advance(seconds=200)
    start = runner.clock.now()
    assert runner.engine.get(eid).next_wake_at < start
    # when: its body starts in a 15-minute invocation
    outcome = runner.engine.process(m.body, remaining_ms=lambda: 900_000)
    # then: the claim covered the body and the invocation; the sweeper left it alone; the commit won
    claim = seen["claim"]
    assert claim.is_claimed and claim.attempt == 1 and claim.attempt_started_at == start
    # the invocation's end at the latest: its remaining time is whole milliseconds, cut down
    assert claim.attempt_deadline == start + dt.timedelta(seconds=900, milliseconds=1)
    assert claim.next_wake_at >= start + dt.timedelta(seconds=60 + 3)
    assert claim.next_wake_at >= claim.attempt_deadline and claim.index_at >= claim.next_wake_at
    assert seen["redriven"] == [0, 0, 0]
    assert outcome.kind == "completed" and runner.engine.get(eid).total_attempts == 1


# -- defect 4: a step timeout could be swallowed ---------------------------------------------------------------

def test_defect4_a_body_that_swallows_exceptions_in_a_retry_loop_is_still_stopped_at_its_budget(registry):
    assert threading.current_thread() is threading.main_thread()
    escaped = []

    def stubborn(ctx):
        give_up = time.monotonic() + 5
        while time.monotonic() < give_up:
            try:
                time.sleep(0.01)
            except Exception:  # noqa: BLE001 - the point of the test
                continue
        escaped.append(True)
        return {}

    registry.register(build_workflow("stubborn", [step(stubborn, timeout_s=0.3)], retry=RetryPolicy(max_attempts=1)))
    runner = make_runner(registry)
    eid = runner.start("stubborn")
    started = time.monotonic()
    e = run(runner, eid)
    assert time.monotonic() - started < 2.5 and escaped == []
    assert e.status is Status.FAILED and e.error.code == "step_timeout" and e.error.type == "StepTimeoutError"


# -- defect 5: bad values escaped as retries --------------------------------------------------------------------

def _nested(depth: int):
    value: list = []
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize("value, path", [
    ("bad \ud800 text", "result['v']"),
    (10 ** 5000, "result['v']"),
    (_nested(5000), "result['v'][0][0]"),
], ids=["lone_surrogate", "int_past_str_limit", "deep_nesting"])
def test_defect5_an_unstorable_result_fails_at_once_without_a_retry(registry, value, path):
    calls = Counter()

    def bad(ctx):
        calls["bad"] += 1
        return {"v": value}

    registry.register(build_workflow("badvalue", [bad], retry=RetryPolicy(max_attempts=5)))
    runner = make_runner(registry)
    eid = runner.start("badvalue")
    e = run(runner, eid)
    assert e.status is Status.FAILED and e.error.code == "non_serializable_result" and not e.error.retryable
    assert calls["bad"] == 1 and e.total_attempts == 1 and path in e.error.message
    [record] = runner.history(eid)
    assert record.is_final and record.error.code == "non_serializable_result"


@pytest.mark.parametrize("value", ["bad \ud800 text", 10 ** 5000, _nested(5000)],
                         ids=["lone_surrogate", "int_past_str_limit", "deep_nesting"])
def test_defect5_an_unstorable_start_input_is_refused_before_any_write(registry, value):
    registry.register(build_workflow("in", [step(lambda c: {}, name="a")]))
    runner = make_runner(registry)
    with pytest.raises(NonSerializableResultError):
        runner.engine.start("in", {"v": value})
    assert runner.store.metas == {} and runner.queue.messages == []


# -- defect 6: unbounded error text ------------------------------------------------------------------------------

def test_defect6_a_huge_exception_message_is_stored_truncated_with_its_type(store, registry):
    def loud(ctx):
        raise ValueError("x" * 1_000_000)

    registry.register(build_workflow("loud", [loud], retry=RetryPolicy(max_attempts=2, base=1, max_delay=1)))
    h = Harness(store, registry)
    eid = h.engine.start("loud", {}).execution.execution_id
    e = h.drive(eid)
    assert e.status is Status.FAILED and e.error.code == "step_error" and e.error.type == "ValueError"
    assert len(e.error.message) <= 2200 and e.error.message.startswith("ValueError: xxx")
    # what to do survives the cut: the advice ends the message
    assert e.error.message.endswith(f"then `loom redrive {eid}`: the step runs again with fresh attempts, under "
                                    "the same idempotency key"), e.error.message[-300:]
    # the execution and its history stay readable, each error bounded
    state = h.engine.state(eid)
    [record] = state.records
    assert record.error.type == "ValueError" and len(record.error.message) <= 2200 and record.attempts == 2
    assert len(h.queue.dead_letters) == 1 and len(str(h.queue.dead_letters[0])) < 4000


def test_defect6_an_exception_whose_str_fails_or_holds_a_lone_surrogate_is_stored(registry):
    class Weird(Exception):
        def __str__(self):
            raise RuntimeError("no")

    def a(ctx):
        raise Weird()

    def b(ctx):
        raise RuntimeError("bad \ud800 text")

    registry.register(build_workflow("weird", [a], retry=RetryPolicy(max_attempts=1)))
    registry.register(build_workflow("surrogate", [b], retry=RetryPolicy(max_attempts=1)))
    runner = make_runner(registry)
    e1 = run(runner, runner.start("weird"))
    e2 = run(runner, runner.start("surrogate"))
    assert e1.error.code == "step_error" and "unprintable" in e1.error.message
    assert e2.error.code == "step_error" and e2.error.message.encode("utf-8")


# -- defect 7: a lost commit response looked like someone else's commit ------------------------------------------

class RetriedWrites:
    """A client whose chosen put_item calls apply and are then sent again, as botocore does when the
    response to a write that applied is lost: the repeat fails its condition."""

    def __init__(self, client, when):
        self._client, self.when, self.replayed = client, when, 0

    def __getattr__(self, name):
        return getattr(self._client, name)

    def put_item(self, **kwargs):
        response = self._client.put_item(**kwargs)
        if self.when(kwargs):
            self.replayed += 1
            return self._client.put_item(**kwargs)
        return response


def test_defect7_a_commit_retried_after_it_applied_is_recognised_and_the_next_message_sent(dynamo_client_factory, registry,
                                                                                          ledger):
    store = dynamo_client_factory()
    registry.register(build_workflow("lost", [ledger.step("a"), ledger.step("b")]))
    h = Harness(store, registry, max_chain_steps=1)
    eid = h.engine.start("lost", {}).execution.execution_id
    store.client = RetriedWrites(store.client, lambda kw: kw["Item"]["SK"]["S"] == "#META"
                                 and kw["Item"].get("current_step") == {"N": "1"} and "ConditionExpression" in kw)
    [m] = h.queue.receive()
    # when: the advance past step a applies, its response is lost, and the retry fails its condition
    outcome = h.engine.process(m.body)
    h.queue.ack(m)
    # then: the worker knows it was its own write and hands on at once, no stall for a lease
    assert store.client.replayed == 1
    assert outcome.kind == "advanced"
    [nxt] = h.queue.messages
    assert (nxt.body.step, nxt.body.version) == (1, store.load(eid).version)
    e = h.drive(eid)
    assert e.status is Status.COMPLETED and ledger.runs == Counter(a=1, b=1)
    assert h.clock.now() == T0  # no sweeper tick was needed


# -- defect 8: one storage error aborted the sweep; the sweeper's corrupt path differed -----------------------

class CountingClient:
    """Wraps a boto3 client and counts the API calls made through it."""

    def __init__(self, client):
        self._client, self.calls = client, Counter()

    def __getattr__(self, name):
        attr = getattr(self._client, name)
        if not callable(attr) or name.startswith("_"):
            return attr

        def call(*args, **kwargs):
            self.calls[name] += 1
            return attr(*args, **kwargs)

        return call


class FlakyLoads:
    """A store whose load of one execution fails with a storage error (throttling, a network error)."""

    def __init__(self, store, bad_id):
        self._store, self.bad_id = store, bad_id

    def __getattr__(self, name):
        return getattr(self._store, name)

    def load(self, execution_id):
        if execution_id == self.bad_id:
            raise StorageError("DynamoDB GetItem failed: ProvisionedThroughputExceededException")
        return self._store.load(execution_id)


def test_defect8_a_storage_error_on_one_execution_does_not_stop_the_sweep(registry):
    registry.register(build_workflow("many", [step(lambda c: {}, name="s")]))
    runner = make_runner(registry)
    ids = [runner.start("many", {"n": n}) for n in range(3)]
    runner.queue.purge()
    runner.clock.advance(hours=1)
    flaky = FlakyLoads(runner.store, ids[1])
    sweeper = Sweeper(flaky, runner.queue, runner.clock, runner.settings, registry)
    # when
    report = sweeper.sweep()
    # then: the others were re-driven, the failure counted; the next tick gets the last one
    assert report.errors == 1 and report.total_redriven == 2
    assert {m.body.execution_id for m in runner.queue.messages} == {ids[0], ids[2]}
    flaky.bad_id = None
    assert sweeper.sweep().total_redriven == 1


def test_defect8_a_corrupt_item_found_by_the_sweeper_fails_like_on_the_worker_path(store, registry):
    registry.register(build_workflow("c", [step(lambda c: {}, name="s")]))
    h = Harness(store, registry)
    eid = h.engine.start("c", {}).execution.execution_id
    ok = h.engine.start("c", {"n": 2}).execution.execution_id
    h.queue.purge()
    corrupt_meta(store, eid, "current_step", "zero")
    h.clock.advance(hours=1)
    # when
    report = h.sweeper.sweep()
    # then: FAILED corrupt_state, a notice on the DLQ, a TTL, out of both index partitions
    assert report.skipped["corrupt"] == 1 and report.total_redriven == 1
    assert [d["execution_id"] for d in h.queue.dead_letters] == [eid]
    assert h.queue.dead_letters[0]["error"]["code"] == "corrupt_state"
    if isinstance(store, MemoryStore):
        attrs = store.metas[eid]
        assert attrs["status"] == "FAILED" and attrs["finalized"] is True
        assert attrs["expires_at"] == int((h.clock.now() + dt.timedelta(days=30)).timestamp())
    elif sqlite_probes.is_sqlite(store):
        attrs = sqlite_probes.meta(store, eid)
        assert attrs["status"] == "FAILED" and attrs["finalized"] is True and "gsi1pk" not in attrs
        assert attrs["expires_at"] == attrs["_ttl_column"] == int((h.clock.now() + dt.timedelta(days=30)).timestamp())
    else:
        item = store.client.get_item(TableName=store.table, Key={"PK": {"S": f"EXEC#{eid}"}, "SK": {"S": "#META"}})["Item"]
        assert item["status"]["S"] == "FAILED" and "GSI1PK" not in item
        assert int(item["expires_at"]["N"]) == int((h.clock.now() + dt.timedelta(days=30)).timestamp())
    later = h.clock.now() + dt.timedelta(days=1)
    assert all(eid not in {r.execution_id for r in store.query_due(s, later, 100).items} for s in range(store.shards))
    assert h.sweeper.sweep().skipped["corrupt"] == 0 and len(h.queue.dead_letters) == 1
    assert h.drive(ok).status is Status.COMPLETED


# -- defect 10: key order made an idempotency conflict ----------------------------------------------------------

def test_defect10_the_same_input_with_keys_in_another_order_is_the_same_start(registry):
    registry.register(build_workflow("idem", [step(lambda c: {}, name="a")]))
    runner = make_runner(registry)
    first = runner.engine.start("idem", {"a": 1, "b": {"x": 1, "y": [1, 2]}, "c": None}, token="tok")
    again = runner.engine.start("idem", {"c": None, "b": {"y": [1, 2], "x": 1}, "a": 1}, token="tok")
    assert first.created and not again.created
    assert again.execution.execution_id == first.execution.execution_id
    # a different value (or type) is still a conflict
    for other in ({"a": 1, "b": {"x": 1, "y": [2, 1]}, "c": None}, {"a": 1.0, "b": {"x": 1, "y": [1, 2]}, "c": None},
                  {"a": 1, "b": {"x": 1, "y": (1, 2)}, "c": None}):
        with pytest.raises(IdempotencyConflictError):
            runner.engine.start("idem", other, token="tok")


# -- defect 11: a token reused after expiry mixed histories --------------------------------------------------------

def test_defect11_a_token_reused_after_its_execution_expired_starts_a_clean_execution(store, registry, ledger):
    # given: a three-step run under a token, ended and expired (TTL has not deleted its items yet)
    registry.register(build_workflow("reuse", [ledger.step("a"), ledger.step("b", permanent_if=lambda c: c.get("stop")),
                                               ledger.step("c")]))
    h = Harness(store, registry, retention_days=1)
    first = h.engine.start("reuse", {"stop": False}, token="tok-11").execution
    assert h.drive(first.execution_id).status is Status.COMPLETED
    assert len(store.history(first.execution_id)) == 3
    h.clock.advance(hours=25)
    restart = h.clock.now()
    # when: the token is used again (with another input)
    again = h.engine.start("reuse", {"stop": True}, token="tok-11")
    # then: a new run under the same id, holding only its own history
    assert again.created and again.execution.execution_id == first.execution_id
    assert h.engine.history(first.execution_id) == []  # the old run's items wait for their TTL, unread
    e = h.drive(first.execution_id)
    assert e.status is Status.FAILED and e.error.code == "permanent_error"
    records = h.engine.history(first.execution_id)
    assert [(r.name, r.status) for r in records] == [("a", StepStatus.SUCCEEDED), ("b", StepStatus.FAILED)]
    assert {r.name: r.version > 4 for r in store.history(first.execution_id)} == {"a": True, "b": True, "c": False}
    assert all(r.started_at >= restart for r in records)
    assert h.engine.state(first.execution_id).input_blob == '{"stop":true}'


# -- chaining -----------------------------------------------------------------------------------------------------

def _five(registry, ledger, **kw):
    registry.register(build_workflow("five", [ledger.step(n) for n in "abcde"], **kw))


def test_chain_five_steps_run_in_one_delivery_with_one_record_and_one_commit_per_step(store, registry, ledger):
    _five(registry, ledger)
    h = Harness(store, registry)
    eid = h.engine.start("five", {}).execution.execution_id
    [m] = h.queue.receive()
    sent = h.queue.sent
    # when
    if isinstance(store, MemoryStore):
        before = Counter(store.calls)
        outcome = h.engine.process(m.body)
        calls = Counter(store.calls) - before
        # then: one read, the first step's claim, then per step one history write and one commit
        assert calls == Counter(load_state=1, put_step=5, commit=1 + 5)
    elif sqlite_probes.is_sqlite(store):
        holder = {}
        calls = sqlite_probes.calls_during(store, lambda: holder.update(outcome=h.engine.process(m.body)))
        outcome = holder["outcome"]
        assert calls == Counter(query=1, write=5 + 1 + 5)  # one SELECT; a transaction per record and per commit
    else:
        counting = CountingClient(store.client)
        store.client = counting
        outcome = h.engine.process(m.body)
        store.client = counting._client
        assert counting.calls == Counter(query=1, put_item=5 + 1 + 5)
    assert outcome.kind == "completed" and outcome.steps_run == 5
    assert h.queue.sent == sent and h.queue.dead_letters == []
    e = store.load(eid)
    assert e.status is Status.COMPLETED and e.finalized and e.version == 1 + 1 + 5 and e.total_attempts == 5
    assert ledger.runs == Counter(a=1, b=1, c=1, d=1, e=1)


def test_chain_limit_of_one_runs_one_step_per_delivery(registry, ledger):
    _five(registry, ledger)
    runner = make_runner(registry, max_chain_steps=1)
    eid = runner.start("five")
    e = run(runner, eid)
    assert e.status is Status.COMPLETED
    assert [(o.kind, o.steps_run) for o in runner.outcomes] == [("advanced", 1)] * 4 + [("completed", 1)]
    assert runner.queue.sent == 5 and e.version == 1 + 5 * 2


def test_chain_stops_when_the_invocation_cannot_fit_the_next_step_and_hands_on_through_the_queue(registry, ledger):
    _five(registry, ledger, step_timeout_s=10)
    runner = make_runner(registry)
    eid = runner.start("five")
    [m] = runner.queue.receive()
    left = iter([60_000, 60_000, 24_000, 12_000] + [12_000] * 10)  # each step leaves less time
    outcome = runner.engine.process(m.body, remaining_ms=lambda: next(left))
    runner.queue.ack(m)
    assert outcome.kind == "advanced" and 1 <= outcome.steps_run < 5
    e = runner.engine.get(eid)
    assert not e.is_claimed and e.current_step == outcome.steps_run
    [nxt] = runner.queue.messages
    assert (nxt.body.step, nxt.body.version) == (e.current_step, e.version)
    assert run(runner, eid).status is Status.COMPLETED and ledger.runs == Counter(a=1, b=1, c=1, d=1, e=1)


def test_chain_yields_after_its_fair_share_of_the_batch(registry, ledger):
    _five(registry, ledger)
    runner = make_runner(registry)
    eid = runner.start("five")
    [m] = runner.queue.receive()
    outcome = runner.engine.process(m.body, yield_after_ms=0)
    runner.queue.ack(m)
    assert (outcome.kind, outcome.steps_run) == ("advanced", 1)
    assert [q.body.step for q in runner.queue.messages] == [1]
    assert run(runner, eid).status is Status.COMPLETED


def test_chain_crash_between_a_chained_steps_record_and_its_commit_reruns_only_that_step(registry, ledger):
    # given: the worker dies after step c's record is written, before the commit that moves past it
    _five(registry, ledger, step_timeout_s=30)
    runner = make_runner(registry)
    crash_at("worker.after_record", when=lambda info: info["step"] == 2)
    eid = runner.start("five")
    # when
    e = run(runner, eid)
    # then: a, b, d, e ran once; c twice, recorded once as attempt 2 (its claim was in b's commit)
    assert e.status is Status.COMPLETED
    assert ledger.runs == Counter(a=1, b=1, c=2, d=1, e=1)
    records = runner.history(eid)
    assert [(r.name, r.attempts, r.status) for r in records] == [
        ("a", 1, StepStatus.SUCCEEDED), ("b", 1, StepStatus.SUCCEEDED), ("c", 2, StepStatus.SUCCEEDED),
        ("d", 1, StepStatus.SUCCEEDED), ("e", 1, StepStatus.SUCCEEDED)]
    assert records[2].result_blob == '{"c":2}'


# -- the context, rebuilt from the history ---------------------------------------------------------------------------

def test_context_a_crash_inside_step_n_reruns_only_step_n_and_the_context_is_exact(registry):
    runs = Counter()
    values = {"t": (1, "x"), "when": dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC), "money": decimal.Decimal("1.10"),
              "tags": {"a", "b"}, "raw": b"\x00\xff", "keys": {1: "one"}, "neg0": -0.0}
    seen = []

    def produce(ctx):
        runs["produce"] += 1
        return dict(values)

    def middle(ctx):
        runs["middle"] += 1
        if runs["middle"] == 1:
            raise Crash("killed inside step 1")
        return {"m": [ctx["t"], ctx["money"]]}

    def check(ctx):
        runs["check"] += 1
        seen.append({k: ctx[k] for k in [*values, "m", "start"]})
        return {}

    registry.register(build_workflow("ctx", [produce, middle, check], step_timeout_s=30))
    runner = make_runner(registry)
    eid = runner.start("ctx", {"start": (2, 3)})
    e = run(runner, eid)
    assert e.status is Status.COMPLETED and runs == Counter(produce=1, middle=2, check=1)
    [got] = seen
    expected = {**values, "m": [(1, "x"), decimal.Decimal("1.10")], "start": (2, 3)}
    assert got == expected
    assert {k: type(v) for k, v in got.items()} == {k: type(v) for k, v in expected.items()}
    assert str(got["neg0"]) == "-0.0" and str(got["money"]) == "1.10"
    # and the context rebuilt from the stored state is the same
    state = runner.engine.state(eid)
    rebuilt = rebuild_context(state.input_blob, state.records, registry.get("ctx"), 3)
    assert {k: rebuilt[k] for k in expected} == expected
