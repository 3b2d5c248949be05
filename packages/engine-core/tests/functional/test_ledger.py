"""The cost ledger on the memory store: what each delivery counts, that it rides on the commits the
engine already makes, and what a crash or a duplicate delivery does to it (DESIGN.md "Cost ledger")."""

from __future__ import annotations

import datetime as dt

import pytest

from engine_core import EngineSettings, ManualClock, Registry, Status, StepMessage, faults, step, workflow
from engine_core.testing import LocalRunner

UTC = dt.timezone.utc


class Crash(BaseException):
    """The process died here."""


@pytest.fixture(autouse=True)
def _no_fault_hook():
    yield
    faults.install(None)


def _registry(n_steps: int = 3) -> Registry:
    registry = Registry()

    def make(i: int):
        def body(ctx):
            return {f"s{i}": i}
        body.__name__ = f"s{i}"
        return body

    from engine_core.registry import build_workflow
    registry.register(build_workflow("chain", [make(i) for i in range(n_steps)]))
    return registry


def _runner(ledger: bool = True, **settings) -> LocalRunner:
    clock = ManualClock(dt.datetime(2026, 3, 1, 12, 0, tzinfo=UTC))
    return LocalRunner(_registry(), clock=clock,
                       settings=EngineSettings(**{"lease_s": 120, "ledger": ledger, **settings}))


def _run(runner: LocalRunner, eid: str):
    for _ in range(10_000):
        e = runner.engine.get(eid)
        if e.status.is_terminal and e.finalized:
            return e
        try:
            runner.step_once()
        except Crash:
            pass
    raise AssertionError("execution did not finish")


NOT_COMMITTING = ("stale", "terminal", "missing", "early")


def _worker_calls(runner: LocalRunner, run, committing_only: bool = False) -> int:
    """Store calls made inside the worker's deliveries while ``run`` runs (not the test's own reads);
    ``committing_only``: of the deliveries that committed something."""
    counted = {"n": 0}
    process = runner.engine.process

    def measured(message, *args, **kwargs):
        before = sum(runner.store.calls.values())
        outcome = process(message, *args, **kwargs)
        if not (committing_only and outcome.kind in NOT_COMMITTING):
            counted["n"] += sum(runner.store.calls.values()) - before
        return outcome

    runner.engine.process = measured
    try:
        run()
    finally:
        del runner.engine.process
    return counted["n"]


def test_ledger_chained_execution_counts_every_worker_store_call_and_its_message():
    # given: three steps chained in one delivery
    runner = _runner()
    eid = runner.start("chain")
    # when
    calls = _worker_calls(runner, lambda: _run(runner, eid))
    e = runner.engine.get(eid)
    # then: every store call the delivery made is in the ledger (the finalize counted with the ending),
    # one message delivered it, and the memory store reports no units
    assert e.status is Status.COMPLETED and e.ledger is not None
    assert e.ledger.requests == calls
    assert e.ledger.messages == 1
    assert (e.ledger.read_units, e.ledger.write_units) == (0.0, 0.0)


def test_ledger_one_step_per_delivery_counts_each_delivering_message():
    # given: one step per delivery, so each step is its own message
    runner = _runner(max_chain_steps=1)
    eid = runner.start("chain")
    # when
    calls = _worker_calls(runner, lambda: _run(runner, eid))
    e = runner.engine.get(eid)
    # then: three deliveries, three messages; every store call the worker made is counted
    assert e.ledger is not None and e.ledger.messages == 3
    assert e.ledger.requests == calls


@pytest.mark.parametrize("chain", [1, 100])
def test_ledger_on_or_off_makes_the_same_store_writes(chain):
    # given: the same execution with and without the ledger
    counts = []
    for on in (True, False):
        runner = _runner(ledger=on, max_chain_steps=chain)
        eid = runner.start("chain")
        _run(runner, eid)
        counts.append(dict(runner.store.calls))
        # then (part): the ledger is on the item only when it is on
        assert (runner.engine.get(eid).ledger is not None) is on
    # then: no extra write (nor read) of any kind
    assert counts[0] == counts[1]


def test_ledger_delivery_that_crashes_before_its_commit_loses_what_it_did_after_its_last_commit():
    # given: the first delivery dies right after writing step s1's record, before s1's commit
    runner = _runner()
    eid = runner.start("chain")
    died = {"n": 0}

    def hook(name, info):
        if name == "worker.after_record" and info.get("step") == 1 and died["n"] == 0:
            died["n"] += 1
            raise Crash("after s1's record")

    faults.install(hook)
    before = sum(runner.store.calls.values())
    with pytest.raises(Crash):
        runner.step_once()
    crashed_calls = sum(runner.store.calls.values()) - before
    after_crash = runner.engine.get(eid).ledger
    # when: the sweeper re-drives s1 after its claim's lease, and the execution completes
    later = _worker_calls(runner, lambda: _run(runner, eid), committing_only=True)
    e = runner.engine.get(eid)
    # then: the crashed delivery's counts up to its last commit (s1's claim) stayed on the item; s1's
    # record write after it is lost with the process; every later delivery that committed is counted
    assert died["n"] == 1 and after_crash is not None
    assert after_crash.requests == crashed_calls - 1
    assert e.status is Status.COMPLETED
    assert e.ledger.requests == after_crash.requests + later
    assert e.ledger.messages == 2  # the start's message, then the sweeper's re-drive


def test_ledger_duplicate_delivery_that_commits_nothing_is_not_counted():
    # given: every message is delivered twice, one step per delivery
    runner = _runner(max_chain_steps=1)
    runner.queue.duplicate_rate = 1.0
    eid = runner.start("chain")
    # when
    committed = _worker_calls(runner, lambda: _run(runner, eid), committing_only=True)
    e = runner.engine.get(eid)
    stale = sum(1 for o in runner.outcomes if o.kind in NOT_COMMITTING)
    # then: the copies read and acknowledged, committing nothing: only the three deliveries that
    # advanced are in the ledger, each with its message and every call it made
    assert stale == 3
    assert e.ledger.messages == 3
    assert e.ledger.requests == committed


def test_ledger_commit_lost_to_a_race_keeps_its_counts_for_the_next_commit():
    # given: a delivery whose meter holds counts, and a commit that loses its condition
    runner = _runner()
    eid = runner.start("chain")
    life = runner.engine.life
    meter = life.meter
    e = runner.engine.get(eid)
    meter.begin(eid, delivered=True)
    runner.store.load(eid)
    from engine_core import transitions
    stale = e.model_copy(update={"version": e.version + 5})
    # when: the commit fails on its condition
    with pytest.raises(Exception):
        life.commit(stale, transitions.redriven(stale, runner.clock.now(), 60, 0, 0))
    # then: the failed write is counted too, and nothing was reset: the next commit carries all of it
    assert meter.requests == 2 and meter.messages == 1
    new = life.commit(e, transitions.redriven(e, runner.clock.now(), 60, 0, 0))
    meter.end()
    assert new.ledger is not None and new.ledger.requests == 3 and new.ledger.messages == 1
    assert runner.engine.get(eid).ledger == new.ledger


def _parent_committing_calls(runner: LocalRunner, eid: str, run) -> tuple[int, int]:
    """(store calls of the deliveries that moved the execution item's version, all deliveries' calls)."""
    counted, every = {"n": 0}, {"n": 0}
    process = runner.engine.process

    def measured(message, *args, **kwargs):
        before, version = sum(runner.store.calls.values()), runner.store.metas[eid]["version"]
        outcome = process(message, *args, **kwargs)
        calls = sum(runner.store.calls.values()) - before
        every["n"] += calls
        if runner.store.metas[eid]["version"] != version:
            counted["n"] += calls
        return outcome

    runner.engine.process = measured
    try:
        run()
    finally:
        del runner.engine.process
    return counted["n"], every["n"]


def test_ledger_code_first_execution_counts_every_delivery_that_commits():
    # given: a code-first function of two steps
    from engine_core.durable import durable
    from engine_core.durable import step as durable_step

    registry = Registry()

    @durable("coded_cost", registry=registry)
    def flow(input):
        return durable_step("a", lambda: 1) + durable_step("b", lambda: 2)

    runner = LocalRunner(registry, clock=ManualClock(dt.datetime(2026, 3, 1, 12, 0, tzinfo=UTC)),
                         settings=EngineSettings(lease_s=120))
    eid = runner.start("coded_cost")
    # when
    committed, _ = _parent_committing_calls(runner, eid, lambda: _run(runner, eid))
    e = runner.engine.get(eid)
    # then
    assert e.status is Status.COMPLETED and e.ledger is not None
    assert e.ledger.requests == committed and e.ledger.messages >= 1


def _carried_calls(runner: LocalRunner, run) -> tuple[int, int, int]:
    """(store calls the ledger should hold, every delivery's store calls, deliveries that carried something):
    a delivery's calls up to its last carrying write (a commit of the execution item, or a write of the
    branch item a branch delivery runs), and the finalize counted in advance with an ending."""
    store, process = runner.store, runner.engine.process
    state = {"expected": 0, "every": 0, "carried": 0, "mark": None, "branch": None}

    def total() -> int:
        return sum(store.calls.values())

    def wrap(name: str):
        write = getattr(store, name)

        def carrying(*args, **kwargs):
            result = write(*args, **kwargs)
            if name == "commit" or (args[1].step_index, args[1].branch) == state["branch"]:
                state["mark"] = total()
            return result
        return carrying

    def measured(message, *args, **kwargs):
        before, finalized = total(), store.calls.get("finalize", 0)
        state["mark"], state["branch"] = None, None if message.branch is None else (message.step, message.branch)
        outcome = process(message, *args, **kwargs)
        state["every"] += total() - before
        if state["mark"] is not None:
            state["carried"] += 1
            state["expected"] += state["mark"] - before + (store.calls.get("finalize", 0) - finalized)
        return outcome

    for name in ("commit", "update_branch", "complete_branch"):
        setattr(store, name, wrap(name))
    runner.engine.process = measured
    try:
        run()
    finally:
        del runner.engine.process
        for name in ("commit", "update_branch", "complete_branch"):
            delattr(store, name)
    return state["expected"], state["every"], state["carried"]


def _map_runner(body, **settings) -> LocalRunner:
    from engine_core import map_
    from engine_core.registry import build_workflow

    registry = Registry()
    registry.register(build_workflow("fan_cost", [map_(body, over="xs", max_concurrency=2)]))
    return LocalRunner(registry, clock=ManualClock(dt.datetime(2026, 3, 1, 12, 0, tzinfo=UTC)),
                       settings=EngineSettings(**{"lease_s": 120, **settings}))


def test_ledger_map_counts_every_branch_delivery_through_the_fan_in():
    # given: a map of four items, two at a time; each branch body takes 30 ms of the worker's time
    import time

    def square(ctx):
        time.sleep(0.03)
        return ctx.item * ctx.item

    runner = _map_runner(square)
    eid = runner.start("fan_cost", {"xs": [1, 2, 3, 4]})
    # when
    expected, every, carried = _carried_calls(runner, lambda: _run(runner, eid))
    e = runner.engine.get(eid)
    # then: the branch deliveries' requests and messages are on the execution's ledger (the fan-in added
    # each branch's), less only what each did after its last write (a launch, a join read)
    assert e.status is Status.COMPLETED and e.ledger is not None
    assert carried == 5  # the fan-out, four branches (the last one fans in)
    assert e.ledger.requests == expected < every
    assert e.ledger.messages == 5
    assert e.ledger.lambda_ms >= 4 * 30


def test_ledger_map_redriven_after_a_branch_failed_counts_the_failed_generation_at_the_fan_in():
    # given: a map whose branch 1 fails for good the first time (no retries), then a redrive
    from engine_core.errors import PermanentStepError

    seen = {"failed": 0}

    def flaky(ctx):
        if ctx.branch == 1 and not seen["failed"]:
            seen["failed"] += 1
            raise PermanentStepError("not yet")
        return ctx.item

    runner = _map_runner(flaky)
    eid = runner.start("fan_cost", {"xs": [1, 2, 3, 4]})
    first, _, first_carried = _carried_calls(runner, lambda: _run(runner, eid))
    assert runner.engine.get(eid).status is Status.FAILED
    runner.engine.operator.redrive(eid, "ops")
    # when
    second, _, second_carried = _carried_calls(runner, lambda: _run(runner, eid))
    e = runner.engine.get(eid)
    # then: the failed generation's branch deliveries, carried on their branch items (the failed branch
    # kept its ledger through the redrive's reset), are counted by the fan-in
    assert e.status is Status.COMPLETED and seen["failed"] == 1
    assert e.ledger.requests == first + second
    assert e.ledger.messages == first_carried + second_carried  # each delivery that wrote was brought by one


def test_ledger_an_operators_commit_between_a_deliverys_commit_and_its_carried_counts_nothing_twice():
    # given: one process serving the API and a worker (the lite runtime, the simulation): an operator's
    # cancel lands right after a delivery's commit applied, before the delivery marked its counts carried
    runner = _runner(max_chain_steps=1)
    eid = runner.start("chain")
    commit, state = runner.store.commit, {"cancelled": False}

    def commit_then_cancel(transition):
        commit(transition)
        if not state["cancelled"] and transition.new.execution_id == eid:
            state["cancelled"] = True
            runner.engine.operator.cancel(eid, "ops", "stop")

    runner.store.commit = commit_then_cancel
    try:
        _run(runner, eid)
    finally:
        del runner.store.commit
    e = runner.engine.get(eid)
    # then: the delivery's message and requests once (its own commit carried them); the cancel carries none
    committed = sum(1 for o in runner.outcomes if o.kind not in NOT_COMMITTING)
    assert state["cancelled"] and e.status is Status.CANCELLED
    assert e.ledger is not None and e.ledger.messages == committed == 1
