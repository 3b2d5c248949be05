"""Parallel and map steps (issue 12): fan-out to branch items, branch deliveries, reconcile, fan-in.

The real Engine and Sweeper on the memory store (and, once, DynamoDB on moto) with a manual clock and
the fake queue. Every check counts what really happened, from inside the bodies and at the store
(body runs, recorded completions, fan-ins = the step's SUCCEEDED record written), never from the
engine's return values alone. A "crash" is a BaseException raised at a named point: nothing after it
runs and the message is not acknowledged.
"""

from __future__ import annotations

import datetime as dt
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import pytest

from engine_core import codec
from engine_core import (
    Engine,
    EngineSettings,
    ManualClock,
    PermanentStepError,
    Registry,
    RetryPolicy,
    Status,
    StepMessage,
    StepStatus,
    Sweeper,
    faults,
    map_,
    parallel,
)
from engine_core.model import Branch, BranchStatus
from engine_core.registry import build_workflow
from engine_core.adapters.memory import MemoryStore
from engine_core.testing import FakeQueue

UTC = dt.timezone.utc
T0 = dt.datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
QUICK = RetryPolicy(max_attempts=3, base=1, max_delay=1, jitter=False)


class Crash(BaseException):
    """The process died here."""


@pytest.fixture(autouse=True)
def _no_fault_hook():
    yield
    faults.install(None)


class CountingStore:
    """The store, counting what was really recorded: branch completions accepted, fan-in records written.
    Every call holds one lock, as each DynamoDB request is atomic, so threads can share it."""

    def __init__(self, inner):
        self.inner, self.lock = inner, threading.RLock()
        self.completions: Counter = Counter()
        self.fan_ins = 0

    def __getattr__(self, name):
        attr = getattr(self.inner, name)
        if not callable(attr):
            return attr

        def call(*args, **kwargs):
            with self.lock:
                result = attr(*args, **kwargs)
                if name == "complete_branch":
                    self.completions[(args[1].step_index, args[1].branch)] += 1
                if name == "put_step" and args[1].kind == "fanout" and args[1].status is StepStatus.SUCCEEDED:
                    self.fan_ins += 1
                return result

        return call


class LockedQueue:
    def __init__(self, inner: FakeQueue, lock, drop=None):
        self.inner, self.lock, self.drop = inner, lock, drop
        self.dropped: list[StepMessage] = []

    def send(self, message, delay_s=0):
        with self.lock:
            if self.drop is not None and self.drop(message):
                self.dropped.append(message)
                return
            self.inner.send(message, delay_s)

    def send_dead_letter(self, body):
        with self.lock:
            self.inner.send_dead_letter(body)


class Bodies:
    """Step bodies that count their runs (per branch) and how many run at the same moment."""

    def __init__(self):
        self.runs: Counter = Counter()
        self.lock = threading.Lock()
        self.in_flight = self.peak = 0

    def make(self, name: str, fail: dict[int, int] | None = None, permanent=lambda ctx: False, hold_s: float = 0.0,
             value=lambda ctx: ctx.item if ctx.item is not None else ctx.branch):
        def body(ctx):
            with self.lock:
                self.runs[(name, ctx.branch)] += 1
                runs = self.runs[(name, ctx.branch)]
                self.in_flight += 1
                self.peak = max(self.peak, self.in_flight)
            try:
                if hold_s:
                    time.sleep(hold_s)
                if permanent(ctx):
                    raise PermanentStepError(f"{name} branch {ctx.branch} refused")
                if runs <= (fail or {}).get(ctx.branch, 0):
                    raise RuntimeError(f"{name} branch {ctx.branch} failed on purpose")
                return value(ctx)
            finally:
                with self.lock:
                    self.in_flight -= 1

        body.__name__ = name
        return body

    def total(self, name: str) -> int:
        return sum(n for (k, _), n in self.runs.items() if k == name)


class Harness:
    def __init__(self, registry: Registry, store=None, drop=None, **settings):
        self.clock = ManualClock(T0)
        self.settings = EngineSettings(**{"lease_s": 120, **settings})
        self.store = CountingStore(store or MemoryStore())
        self.fake = FakeQueue(self.clock)
        self.queue = LockedQueue(self.fake, self.store.lock, drop)
        self.engine = Engine(self.store, self.queue, registry, self.clock, self.settings)
        self.sweeper = Sweeper(self.store, self.queue, self.clock, self.settings, registry)
        self.outcomes: Counter = Counter()

    def start(self, workflow: str, data: dict | None = None) -> str:
        return self.engine.start(workflow, data or {}).execution.execution_id

    def idle(self) -> None:
        """Nothing ready: move time to the next message or the next sweep, and sweep."""
        nxt = self.fake.next_visible_at()
        step = self.clock.now() + dt.timedelta(seconds=60)
        self.clock.set(max(self.clock.now(), min(nxt, step) if nxt else step))
        self.sweeper.sweep()

    def drive(self, eid: str, threads: int = 0, lose_on_crash: bool = False, deliver=lambda m: True,
              max_rounds: int = 5000):
        """Deliver batches (concurrently with ``threads``) until the execution ends."""
        pool = ThreadPoolExecutor(threads) if threads else None
        try:
            for _ in range(max_rounds):
                e = self.store.load(eid)
                if e.status.is_terminal:
                    return e
                batch = [m for m in self.fake.receive(max_messages=50 if threads else 10) if deliver(m.body)]
                if not batch:
                    self.idle()
                    continue
                results = list(pool.map(self._one, batch)) if pool else [self._one(m) for m in batch]
                for m, crashed in zip(batch, results):
                    if not crashed or lose_on_crash:
                        self.fake.ack(m)
        finally:
            if pool:
                pool.shutdown()
        raise AssertionError("execution did not finish")

    def _one(self, m) -> bool:
        try:
            self.outcomes[self.engine.process(m.body).kind] += 1
        except Crash:
            return True
        return False

    def branches(self, eid: str, index: int = 0) -> list[Branch]:
        return self.store.inner.branches(eid, index)


def results_of(h: Harness, eid: str, name: str):
    return h.engine.context(eid)[name]


# -- the happy paths -----------------------------------------------------------------------------------------

def test_parallel_of_three_completes_once_with_results_in_order(registry):
    # given: three branches returning different kinds of values, then a step reading their results
    bodies = Bodies()
    seen = []
    registry.register(build_workflow("par", [
        parallel(bodies.make("a", value=lambda c: {"a": 1}), bodies.make("b", value=lambda c: 2),
                 bodies.make("c", value=lambda c: [3, "x"]), name="fan"),
        lambda_step("after", lambda ctx: seen.append(ctx["fan"]) or {"n": len(ctx["fan"])}),
    ]))
    h = Harness(registry)
    # when
    eid = h.start("par")
    e = h.drive(eid)
    # then: each body ran once, each completion was recorded once, one fan-in, the next step once
    assert e.status is Status.COMPLETED
    assert bodies.runs == Counter({("a", 0): 1, ("b", 1): 1, ("c", 2): 1})
    assert h.store.completions == Counter({(0, 0): 1, (0, 1): 1, (0, 2): 1})
    assert h.store.fan_ins == 1
    assert seen == [[{"a": 1}, 2, [3, "x"]]]
    fan = next(r for r in h.engine.history(eid) if r.name == "fan")
    assert fan.kind == "fanout" and fan.attempts == 3


def lambda_step(name, fn):
    fn.__name__ = name
    return fn


def test_branch_ctx_carries_its_own_idempotency_key_and_item(registry):
    keys = []
    registry.register(build_workflow("keys", [map_(lambda_step("k", lambda ctx: keys.append(
        (ctx.idempotency_key, ctx.item, ctx.branch)) or ctx.item), over="xs")]))
    h = Harness(registry)
    eid = h.start("keys", {"xs": ["p", "q"]})
    assert h.drive(eid).status is Status.COMPLETED
    assert sorted(keys) == [(f"{eid}:0:0", "p", 0), (f"{eid}:0:1", "q", 1)]


def test_map_over_100_items_at_concurrency_10_never_runs_more_than_10_bodies_at_once_and_completes_once(registry):
    # given: 100 items, at most 10 at a time; bodies hold for a moment so concurrent deliveries overlap
    bodies = Bodies()
    registry.register(build_workflow("many", [
        map_(bodies.make("square", hold_s=0.003, value=lambda c: c.item * c.item), over="xs", max_concurrency=10)]))
    h = Harness(registry)
    # when: every ready message is delivered at once on its own thread (up to 32)
    eid = h.start("many", {"xs": list(range(100))})
    e = h.drive(eid, threads=32)
    # then: bodies really overlapped, never more than 10; each ran once, counted once, one fan-in
    assert e.status is Status.COMPLETED
    assert 1 < bodies.peak <= 10
    assert bodies.total("square") == 100 and set(bodies.runs.values()) == {1}
    assert sum(h.store.completions.values()) == 100 and set(h.store.completions.values()) == {1}
    assert h.store.fan_ins == 1
    assert results_of(h, eid, "map_square") == [i * i for i in range(100)]


def test_max_concurrency_when_the_sweeper_redrives_the_step_again_and_again_still_holds(registry):
    # given: 6 items at most 2 at a time; branch messages are held back while the step's lease runs out 5 times
    bodies = Bodies()
    registry.register(build_workflow("held", [map_(bodies.make("m"), over="xs", max_concurrency=2)]))
    h = Harness(registry)
    eid = h.start("held", {"xs": list(range(6))})
    for _ in range(5):
        for m in h.fake.receive(50):
            if m.body.branch is None:
                h.engine.process(m.body)
                h.fake.ack(m)
        h.clock.advance(200)
        h.sweeper.sweep()
        # then: never more than 2 branches open (launched and not finished)
        open_ = [b for b in h.branches(eid) if b.status.is_open]
        assert len(open_) <= 2
    # and once messages flow, it completes with each body run once
    assert h.drive(eid).status is Status.COMPLETED
    assert set(bodies.runs.values()) == {1} and bodies.total("m") == 6
    assert h.store.fan_ins == 1


def test_map_over_an_empty_list_completes_at_once_with_an_empty_result(registry):
    bodies = Bodies()
    registry.register(build_workflow("empty", [map_(bodies.make("m"), over="xs")]))
    h = Harness(registry)
    eid = h.start("empty", {"xs": []})
    assert h.drive(eid).status is Status.COMPLETED
    assert bodies.total("m") == 0 and results_of(h, eid, "map_m") == []


# -- retries and failures ------------------------------------------------------------------------------------

def test_branch_failing_with_retries_then_succeeding_completes_the_step_once(registry):
    # given: branch 1 fails twice, then succeeds (3 attempts allowed)
    bodies = Bodies()
    registry.register(build_workflow("flaky", [map_(bodies.make("m", fail={1: 2}), over="xs")], retry=QUICK))
    h = Harness(registry)
    eid = h.start("flaky", {"xs": [10, 11, 12]})
    # when
    e = h.drive(eid)
    # then
    assert e.status is Status.COMPLETED
    assert bodies.runs[("m", 1)] == 3 and bodies.runs[("m", 0)] == 1 and bodies.runs[("m", 2)] == 1
    assert h.store.completions[(0, 1)] == 1 and h.store.fan_ins == 1
    assert results_of(h, eid, "map_m") == [10, 11, 12]
    b1 = h.branches(eid)[1]
    assert b1.status is BranchStatus.SUCCEEDED and b1.attempt == 3


def test_branch_exhausting_its_retries_fails_the_step_and_the_next_step_never_runs(registry):
    # given: branch 2 always fails
    bodies = Bodies()
    registry.register(build_workflow("doomed", [
        map_(bodies.make("m", fail={2: 99}), over="xs", max_concurrency=2, name="fan"), bodies.make("after")],
        retry=QUICK))
    h = Harness(registry)
    eid = h.start("doomed", {"xs": list(range(5))})
    # when
    e = h.drive(eid)
    # then: FAILED at the fan-out step, naming the branch; the step after it never ran
    assert e.status is Status.FAILED and e.current_step == 0
    assert e.error.code == "step_error" and "branch 2" in e.error.message and "attempt 3 of 3" in e.error.message
    assert bodies.runs[("m", 2)] == 3 and bodies.total("after") == 0
    assert h.store.fan_ins == 0
    assert h.branches(eid)[2].status is BranchStatus.FAILED
    # and nothing runs later, whatever the sweeper does
    for _ in range(5):
        h.idle()
    assert bodies.total("after") == 0 and h.store.load(eid).status is Status.FAILED


def test_map_over_more_than_1000_items_fails_the_step_with_too_many_items(registry):
    bodies = Bodies()
    registry.register(build_workflow("huge", [map_(bodies.make("m"), over="xs"), bodies.make("after")]))
    h = Harness(registry)
    eid = h.start("huge", {"xs": list(range(1001))})
    e = h.drive(eid)
    assert e.status is Status.FAILED and e.error.code == "too_many_items" and not e.error.retryable
    assert "1001" in e.error.message and "split the items" in e.error.message and bodies.runs == Counter()


def test_map_over_a_value_that_is_not_a_list_fails_the_step_with_invalid_map_input(registry):
    bodies = Bodies()
    registry.register(build_workflow("notalist", [map_(bodies.make("m"), over="xs")]))
    h = Harness(registry)
    for data in ({"xs": {"a": 1}}, {}):
        eid = h.start("notalist", data)
        e = h.drive(eid)
        assert e.status is Status.FAILED and e.error.code == "invalid_map_input" and not e.error.retryable
        assert "'xs'" in e.error.message
    assert bodies.runs == Counter()


def test_fan_in_results_over_the_item_budget_fail_the_step_with_result_too_large(registry):
    # given: each branch result fits, their list does not (budget 2 KB, 5 x 600 B)
    bodies = Bodies()
    registry.register(build_workflow("big", [map_(bodies.make("m", value=lambda c: "x" * 600), over="xs"),
                                             bodies.make("after")]))
    h = Harness(registry, item_budget_bytes=2048)
    eid = h.start("big", {"xs": list(range(5))})
    e = h.drive(eid)
    assert e.status is Status.FAILED and e.error.code == "result_too_large" and not e.error.retryable
    assert bodies.total("m") == 5 and bodies.total("after") == 0 and h.store.fan_ins == 0


# -- duplicates, crashes and lost messages ---------------------------------------------------------------------

def test_duplicate_branch_messages_run_each_body_at_most_once_per_claim_and_count_once(registry):
    # given: every message is sent twice
    bodies = Bodies()
    registry.register(build_workflow("dups", [map_(bodies.make("m"), over="xs", max_concurrency=3)]))
    h = Harness(registry)
    h.fake.duplicate_rate = 1.0
    eid = h.start("dups", {"xs": list(range(7))})
    # when
    e = h.drive(eid)
    # then
    assert e.status is Status.COMPLETED
    assert set(bodies.runs.values()) == {1} and bodies.total("m") == 7
    assert set(h.store.completions.values()) == {1} and len(h.store.completions) == 7
    assert h.store.fan_ins == 1
    assert h.store.inner.get_join(eid, 0).done == 7


def test_a_branch_message_delivered_again_after_its_branch_finished_changes_nothing(registry):
    bodies = Bodies()
    registry.register(build_workflow("again", [parallel(bodies.make("a"), bodies.make("b"), name="fan")]))
    h = Harness(registry)
    eid = h.start("again")
    sent = []
    original = h.queue.send
    h.queue.send = lambda m, delay_s=0: (sent.append(m), original(m, delay_s))
    h.drive(eid)
    # when: every branch message is delivered again, twice
    for m in [m for m in sent if m.branch is not None] * 2:
        h.engine.process(m)
    # then
    assert set(bodies.runs.values()) == {1} and set(h.store.completions.values()) == {1} and h.store.fan_ins == 1


def test_a_crash_between_a_branch_completion_and_its_follow_up_with_the_message_lost_is_healed_by_the_reconcile(registry):
    # given: one lane (max_concurrency 1): only branch 0's follow-up launches branch 1
    bodies = Bodies()
    registry.register(build_workflow("crashy", [map_(bodies.make("m"), over="xs", max_concurrency=1)]))
    h = Harness(registry)

    def hook(name, info):
        if name == "worker.after_record" and info.get("branch") == 0:
            raise Crash(name)

    faults.install(hook)
    eid = h.start("crashy", {"xs": [1, 2, 3]})
    # when: the worker dies right after branch 0's completion, and its message is lost with it
    e = h.drive(eid, lose_on_crash=True)
    # then: the sweeper re-drove the step, whose reconcile launched branch 1; nothing ran or counted twice
    assert e.status is Status.COMPLETED
    assert set(bodies.runs.values()) == {1} and bodies.total("m") == 3
    assert set(h.store.completions.values()) == {1} and len(h.store.completions) == 3
    assert h.store.fan_ins == 1
    assert h.outcomes["reconciled"] >= 1
    assert results_of(h, eid, "map_m") == [1, 2, 3]


def test_a_crash_after_the_last_branch_completion_before_the_fan_in_is_healed_by_redelivery(registry):
    bodies = Bodies()
    registry.register(build_workflow("lastcrash", [parallel(bodies.make("a"), bodies.make("b"), name="fan"),
                                                   bodies.make("after")]))
    h = Harness(registry)
    crashed = []

    def hook(name, info):
        if name == "worker.after_record" and not crashed:
            crashed.append(info)
        elif name == "worker.after_record" and len(crashed) == 1:
            crashed.append(info)
            raise Crash(name)  # the second completion: its delivery never fans in

    faults.install(hook)
    eid = h.start("lastcrash")
    e = h.drive(eid)  # the message comes back after its visibility timeout
    assert e.status is Status.COMPLETED
    assert set(bodies.runs.values()) == {1} and h.store.fan_ins == 1 and bodies.total("after") == 1


def test_a_lost_branch_message_is_redriven_by_the_reconcile(registry):
    # given: the first message for branch 1 is lost in transit
    bodies = Bodies()
    registry.register(build_workflow("lossy", [map_(bodies.make("m"), over="xs")]))
    lost = []
    h = Harness(registry, drop=lambda m: m.branch == 1 and not lost and not lost.append(m))
    eid = h.start("lossy", {"xs": [5, 6, 7]})
    # when
    e = h.drive(eid)
    # then: the reconcile found branch 1's lease passed and sent it again; it ran once
    assert len(h.queue.dropped) == 1
    assert e.status is Status.COMPLETED
    assert set(bodies.runs.values()) == {1} and bodies.total("m") == 3
    assert set(h.store.completions.values()) == {1} and h.store.fan_ins == 1
    assert h.outcomes["reconciled"] >= 1


def test_a_worker_killed_inside_a_branch_body_is_retried_after_its_claim_lease(registry):
    bodies = Bodies()
    registry.register(build_workflow("killed", [map_(bodies.make("m"), over="xs")], retry=QUICK))
    h = Harness(registry)
    kills = []

    def hook(name, info):
        if name == "worker.after_claim" and info.get("branch") == 0 and not kills:
            kills.append(info)
            raise Crash(name)

    faults.install(hook)
    eid = h.start("killed", {"xs": [1, 2]})
    e = h.drive(eid, lose_on_crash=True)
    assert e.status is Status.COMPLETED and kills[0]["attempt"] == 1
    assert h.branches(eid)[0].attempt == 2 and bodies.runs[("m", 0)] == 1  # attempt 1 died before its body
    assert h.store.fan_ins == 1


# -- redrive -------------------------------------------------------------------------------------------------

def test_redrive_after_a_branch_failure_reruns_only_the_failed_and_unfinished_branches(registry):
    # given: 6 items, 2 at a time; branch 3 refuses (permanently) until the operator fixes it
    bodies = Bodies()
    broken = {"on": True}
    registry.register(build_workflow("fixable", [
        map_(bodies.make("m", permanent=lambda c: c.branch == 3 and broken["on"]), over="xs", max_concurrency=2)]))
    h = Harness(registry)
    eid = h.start("fixable", {"xs": list(range(6))})
    assert h.drive(eid).status is Status.FAILED
    done_before = {b.branch for b in h.branches(eid) if b.status is BranchStatus.SUCCEEDED}
    runs_before = Counter(bodies.runs)
    assert 3 not in done_before and done_before
    # when
    broken["on"] = False
    h.engine.operator.redrive(eid, "oncall")
    e = h.drive(eid)
    # then: the branches that had succeeded did not run again; the rest ran once more; one fan-in
    assert e.status is Status.COMPLETED
    for b in range(6):
        again = bodies.runs[("m", b)] - runs_before[("m", b)]
        assert again == (0 if b in done_before else 1), (b, again)
    assert h.store.fan_ins == 1
    assert results_of(h, eid, "map_m") == list(range(6))


def test_a_fan_out_step_and_its_failed_branch_keep_when_they_began_through_a_failure_and_a_redrive(registry):
    # given: branch 3 fails for good at T0; the operator redrives an hour later
    bodies = Bodies()
    broken = {"on": True}
    registry.register(build_workflow("timed", [
        map_(bodies.make("m", permanent=lambda c: c.branch == 3 and broken["on"]), over="xs", max_concurrency=4,
             name="fan")]))
    h = Harness(registry)
    eid = h.start("timed", {"xs": list(range(4))})
    assert h.drive(eid).status is Status.FAILED
    failed_branch = h.branches(eid)[3]
    [failure] = [r for r in h.engine.history(eid) if r.step_index == 0]
    # when
    h.clock.advance(dt.timedelta(hours=1))
    broken["on"] = False
    h.engine.operator.redrive(eid, "oncall")
    assert h.drive(eid).status is Status.COMPLETED
    [success] = [r for r in h.engine.history(eid) if r.step_index == 0]

    # then: the failed branch keeps its attempt's start; the step's failure says when the step began; after
    # the redrive the step began with the first branch it kept, an hour before the redrive
    assert failed_branch.status is BranchStatus.FAILED and failed_branch.attempt_started_at is not None
    assert failure.status is StepStatus.FAILED and failure.started_at is not None
    assert failure.started_at <= failed_branch.attempt_started_at
    assert success.status is StepStatus.SUCCEEDED and success.started_at == failure.started_at
    assert success.finished_at - success.started_at >= dt.timedelta(hours=1)


# -- DynamoDB -------------------------------------------------------------------------------------------------

def test_parallel_on_the_dynamodb_store_completes_once_with_results_in_order(registry, dynamo_client_factory):
    bodies = Bodies()
    registry.register(build_workflow("dyn", [map_(bodies.make("m", fail={1: 1}), over="xs", max_concurrency=2)],
                                     retry=QUICK))
    h = Harness(registry, store=dynamo_client_factory())
    h.fake.duplicate_rate = 1.0
    eid = h.start("dyn", {"xs": ["a", "b", "c", "d"]})
    e = h.drive(eid)
    assert e.status is Status.COMPLETED
    assert bodies.runs[("m", 1)] == 2 and bodies.total("m") == 5
    assert set(h.store.completions.values()) == {1} and h.store.fan_ins == 1
    assert results_of(h, eid, "map_m") == ["a", "b", "c", "d"]
    assert h.store.inner.get_join(eid, 0).done == 4


# -- history -------------------------------------------------------------------------------------------------

def test_history_lists_each_branch_after_its_step_while_it_fans_out_and_after_the_fan_in(registry):
    bodies = Bodies()
    registry.register(build_workflow("hist", [bodies.make("first", value=lambda c: {"xs": [1, 2, 3]}),
                                              map_(bodies.make("m", fail={1: 1}), over="xs", name="fan")],
                                     retry=QUICK))
    h = Harness(registry)
    eid = h.start("hist")

    def shown(records):
        return [(getattr(r, "name", None), getattr(r, "branch", None), getattr(r, "kind", "branch")) for r in records]

    # given: the fan-out began; branch 0 ran, nothing else yet
    for m in h.fake.receive(1):
        h.engine.process(m.body)
        h.fake.ack(m)
    steps = h.engine.operator.history_page(eid).records
    assert shown(steps) == [("first", None, "task"), (None, 0, "branch"), (None, 1, "branch"), (None, 2, "branch")]
    assert {r.status.value for r in steps[1:]} == {"PENDING"}
    # when: it completes
    h.drive(eid)
    steps = h.engine.operator.history_page(eid).records
    # then: the step's record, then its branches with their attempts and results
    assert shown(steps) == [("first", None, "task"), ("fan", None, "fanout"), (None, 0, "branch"), (None, 1, "branch"),
                            (None, 2, "branch")]
    assert codec.decode(steps[1].result_blob) == {"fan": [1, 2, 3]}
    assert [(r.status.value, r.attempt, codec.decode(r.result_blob)) for r in steps[2:]] == [
        ("SUCCEEDED", 1, 1), ("SUCCEEDED", 2, 2), ("SUCCEEDED", 1, 3)]


def test_check_fits_refuses_a_fan_out_whose_branch_budget_cannot_fit_the_worker_timeout(registry):
    from engine_core import ConfigurationError, check_fits

    registry.register(build_workflow("slowfan", [map_(lambda_step("m", lambda c: 1), over="xs", timeout_s=58)]))
    with pytest.raises(ConfigurationError, match="'map_m' has a 58 s budget"):
        check_fits(registry, EngineSettings(function_timeout_s=60))
    check_fits(registry, EngineSettings(function_timeout_s=61.25))  # the budget, the 3 s margin and 0.25 s for the read


def test_a_branch_delivery_with_too_little_invocation_time_raises_before_any_write(registry):
    from engine_core import InsufficientTimeError

    bodies = Bodies()
    registry.register(build_workflow("tight", [map_(bodies.make("m"), over="xs", timeout_s=30)]))
    h = Harness(registry)
    eid = h.start("tight", {"xs": [1]})
    for m in h.fake.receive(1):
        h.engine.process(m.body)
        h.fake.ack(m)
    (m,) = h.fake.receive(1)
    before = h.branches(eid)
    with pytest.raises(InsufficientTimeError):
        h.engine.process(m.body, remaining_ms=lambda: 20_000)
    assert h.branches(eid) == before and bodies.runs == Counter()
    assert h.engine.process(m.body, remaining_ms=lambda: 60_000).kind == "completed"


def test_cancel_while_a_fan_out_runs_lets_no_branch_body_start_after_it(registry):
    bodies = Bodies()
    registry.register(build_workflow("cancelled", [map_(bodies.make("m"), over="xs", max_concurrency=2),
                                                   bodies.make("after")]))
    h = Harness(registry)
    eid = h.start("cancelled", {"xs": list(range(6))})
    for m in h.fake.receive(1):
        h.engine.process(m.body)
        h.fake.ack(m)
    # when: the operator cancels, then every queued branch message and sweep comes through
    cancel_and_drain(h, eid)
    # then
    assert h.store.load(eid).status is Status.CANCELLED
    assert bodies.runs == Counter() and h.store.fan_ins == 0


def cancel_and_drain(h, eid: str) -> None:
    """The operator cancels ``eid``; then every queued message and sweep comes through."""
    h.engine.operator.cancel(eid, "ops")
    for _ in range(20):
        for m in h.fake.receive(50):
            h.engine.process(m.body)
            h.fake.ack(m)
        h.idle()


def test_history_of_an_execution_cancelled_while_it_fanned_out_still_lists_the_branches_that_ran(registry):
    # given: a map of three at most two at once; branch 0 ran, then the operator cancelled
    bodies = Bodies()
    registry.register(build_workflow("stopped", [map_(bodies.make("m"), over="xs", max_concurrency=2, name="fan"),
                                                 bodies.make("after")]))
    h = Harness(registry)
    eid = h.start("stopped", {"xs": [1, 2, 3]})
    while bodies.total("m") == 0:
        for m in h.fake.receive(1):
            h.engine.process(m.body)
            h.fake.ack(m)
    cancel_and_drain(h, eid)
    assert h.store.load(eid).status is Status.CANCELLED

    # when
    view = h.engine.operator.history_page(eid)
    records = view.records

    # then: the map step has no record, and every branch it began is listed as it ended, those that ran with
    # their results
    branches = [r for r in records if isinstance(r, Branch)]
    begun = [b.branch for b in h.store.branches_page(eid, 0, 100, None).records]
    assert not [r for r in records if getattr(r, "kind", None) == "fanout"]
    assert begun and [b.branch for b in branches] == sorted(begun)
    ran = [b for b in branches if b.status is BranchStatus.SUCCEEDED]
    assert ran and all(codec.decode(b.result_blob) == b.branch + 1 for b in ran)
    assert bodies.total("m") == len(ran)
    assert view.step_names == {0: "fan"}  # no record names the step: the definition does


def test_a_token_reused_after_its_execution_expired_runs_every_branch_again(registry):
    # given: a finished map whose execution (not yet its branch items) expired
    bodies = Bodies()
    registry.register(build_workflow("again", [map_(bodies.make("m"), over="xs")]))
    h = Harness(registry, retention_days=1, history_grace_s=0)
    eid = h.engine.start("again", {"xs": [1, 2]}, token="t-1").execution.execution_id
    assert h.drive(eid).status is Status.COMPLETED
    h.clock.advance(3 * 86400)
    # when: the same token starts again: the same id, a new run
    again = h.engine.start("again", {"xs": [1, 2]}, token="t-1")
    assert again.created and again.execution.execution_id == eid
    assert h.drive(eid).status is Status.COMPLETED
    # then: the earlier run's succeeded branches counted for nothing
    assert bodies.runs == Counter({("m", 0): 2, ("m", 1): 2}) and h.store.fan_ins == 2


def test_state_while_fanning_out_holds_how_many_branches_succeeded(registry):
    bodies = Bodies()
    registry.register(build_workflow("progress", [map_(bodies.make("m"), over="xs", max_concurrency=2)]))
    h = Harness(registry)
    eid = h.start("progress", {"xs": [1, 2, 3]})
    for _ in range(2):  # the fan-out, then the first two branches
        for m in h.fake.receive(10):
            h.engine.process(m.body)
            h.fake.ack(m)
    join = h.engine.state(eid).joins[0]
    assert (join.total, join.done, join.max_concurrency) == (3, 2, 2)
    h.drive(eid)
    assert h.engine.state(eid).execution.status is Status.COMPLETED


def test_a_crash_after_the_fan_out_commit_before_any_branch_message_is_healed_by_the_reconcile(registry):
    bodies = Bodies()
    registry.register(build_workflow("nosend", [map_(bodies.make("m"), over="xs", max_concurrency=2)]))
    h = Harness(registry)
    crashed = []

    def hook(name, info):
        if name == "worker.after_checkpoint" and info.get("fanout") and not crashed:
            crashed.append(info)
            raise Crash(name)

    faults.install(hook)
    eid = h.start("nosend", {"xs": [1, 2, 3]})
    e = h.drive(eid, lose_on_crash=True)
    assert crashed and e.status is Status.COMPLETED
    assert set(bodies.runs.values()) == {1} and bodies.total("m") == 3 and h.store.fan_ins == 1
    assert h.outcomes["reconciled"] == 1


# -- a seeded storm: crashes around every store write, lost, duplicated and reordered messages -----------------

class Storm:
    """The store, with a crash (a BaseException) before or after some of its writes, chosen by a seeded
    random; counting recorded completions and the step's advances (fan-ins that moved on)."""

    WRITES = ("create_branch", "update_branch", "complete_branch", "put_join", "commit", "put_step")

    def __init__(self, inner, rng, rate: float, fan_step: int):
        self.inner, self.rng, self.rate, self.fan_step = inner, rng, rate, fan_step
        self.completions: Counter = Counter()
        self.advances = 0
        self.armed = False

    def __getattr__(self, name):
        attr = getattr(self.inner, name)
        if name not in self.WRITES:
            return attr

        def call(*args, **kwargs):
            if self.armed and self.rng.random() < self.rate:
                raise Crash(f"before {name}")
            result = attr(*args, **kwargs)
            if name == "complete_branch":
                self.completions[args[1].branch] += 1
            if name == "commit" and args[0].expected_step == self.fan_step and args[0].new.current_step > self.fan_step:
                self.advances += 1
            if self.armed and self.rng.random() < self.rate:
                raise Crash(f"after {name}")  # it applied; the worker died before it heard back
            return result

        return call


@pytest.mark.parametrize("seed", range(40))
def test_fan_out_under_a_seeded_storm_records_each_completion_once_fans_in_once_and_keeps_the_window(seed):
    import random

    rng = random.Random(seed)
    n, window = rng.randint(0, 16), rng.randint(1, 5)
    registry = Registry()
    runs: Counter = Counter()

    def work(ctx):
        runs[ctx.branch] += 1
        if rng.random() < 0.15:
            raise RuntimeError("transient")
        return {"i": ctx.item}

    registry.register(build_workflow("storm", [lambda_step("first", lambda ctx: {"xs": list(range(n))}),
                                               map_(work, over="xs", max_concurrency=window, name="fan"),
                                               lambda_step("last", lambda ctx: {"count": len(ctx["fan"])})],
                                     retry=RetryPolicy(max_attempts=10, base=1, max_delay=30)))
    clock = ManualClock(T0)
    settings = EngineSettings(lease_s=120)
    store = Storm(MemoryStore(), rng, rate=0.06, fan_step=1)
    queue = FakeQueue(clock, seed=seed, duplicate_rate=0.2, drop_rate=0.1, reorder=True)
    engine = Engine(store, queue, registry, clock, settings)
    sweeper = Sweeper(store, queue, clock, settings, registry)
    eid = engine.start("storm", {}).execution.execution_id
    store.armed = True
    peak = 0
    for _ in range(20_000):
        e = store.inner.load(eid)
        if e.status.is_terminal:
            break
        batch = queue.receive()
        if not batch:
            nxt = queue.next_visible_at()
            clock.set(max(clock.now(), min(nxt, clock.now() + dt.timedelta(seconds=60)) if nxt
                          else clock.now() + dt.timedelta(seconds=60)))
            try:
                sweeper.sweep()
            except Crash:
                pass
            continue
        for m in batch:
            try:
                engine.process(m.body)
            except Crash:
                if rng.random() < 0.3:
                    queue.ack(m)  # and its message is lost with it (moved to the DLQ, say)
                continue
            queue.ack(m)
            peak = max(peak, sum(1 for b in store.inner.branches(eid, 1) if b.status.is_open))
    e = store.inner.load(eid)
    # then: it ended; at most `window` branches were ever open; each completion recorded at most once
    assert e.status.is_terminal, f"seed {seed}: still {e.status.value} at step {e.current_step}"
    assert peak <= window
    assert all(c == 1 for c in store.completions.values())
    if e.status is Status.COMPLETED:
        assert store.advances == 1 and len(store.completions) == n
        assert engine.context(eid)["fan"] == [{"i": i} for i in range(n)]
        assert all(runs[b] >= 1 for b in range(n))
    else:  # every allowed attempt of a step used up (crashes count too): nothing after it ran
        assert store.advances == (1 if e.current_step > 1 else 0), e.error
        assert e.error.code in ("step_error", "attempts_exhausted")


def test_a_branch_message_of_the_generation_before_a_redrive_is_stale_and_spends_nothing(registry):
    # given: branch 0 fails the step for good while branch 1's message is still in flight
    bodies = Bodies()
    broken = {"on": True}
    registry.register(build_workflow("gen", [
        map_(bodies.make("m", permanent=lambda c: c.branch == 0 and broken["on"]), over="xs")]))
    h = Harness(registry)
    eid = h.start("gen", {"xs": ["a", "b"]})
    (parent,) = h.fake.receive(10)
    h.engine.process(parent.body)
    h.fake.ack(parent)
    in_flight = {m.body.branch: m for m in h.fake.receive(10)}
    assert h.engine.process(in_flight[0].body).kind == "failed"
    # when: the operator redrives, and the old message for branch 1 arrives before the step begins again
    broken["on"] = False
    h.engine.operator.redrive(eid, "oncall")
    outcome = h.engine.process(in_flight[1].body)
    # then: stale; no body ran, the redriven execution is untouched
    assert outcome.kind == "stale" and bodies.runs[("m", 1)] == 0
    assert h.store.load(eid).status is Status.RUNNING and h.store.load(eid).attempt == 0
    for m in in_flight.values():
        h.fake.ack(m)
    assert h.drive(eid).status is Status.COMPLETED
    assert bodies.runs == Counter({("m", 0): 2, ("m", 1): 1}) and results_of(h, eid, "map_m") == ["a", "b"]


def test_a_cancel_between_a_branch_deliverys_read_and_its_claim_starts_no_body(registry):
    # given: a parallel step fanned out; branch 0's delivery has read the execution (RUNNING)
    bodies = Bodies()
    registry.register(build_workflow("cancelled_fan", [parallel(bodies.make("a"), bodies.make("b"), name="both")],
                                     retry=QUICK))
    h = Harness(registry)
    eid = h.start("cancelled_fan")
    for m in h.fake.receive(1):  # the fan-out
        h.engine.process(m.body)
        h.fake.ack(m)
    inner_get = h.store.inner.get_branch

    def cancel_first(execution_id, step_index, branch):
        h.engine.operator.cancel(execution_id, "ops", "changed our mind")  # lands after the delivery's read
        h.store.inner.get_branch = inner_get
        return inner_get(execution_id, step_index, branch)

    h.store.inner.get_branch = cancel_first
    # when
    outcomes = []
    for m in h.fake.receive(10):
        outcomes.append(h.engine.process(m.body).kind)
        h.fake.ack(m)
    # then: the claim went through, but no body started after the cancel
    assert h.store.load(eid).status is Status.CANCELLED
    assert bodies.total("a") + bodies.total("b") == 0 and "stale" in outcomes
