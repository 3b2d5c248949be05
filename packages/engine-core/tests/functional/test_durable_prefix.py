"""A worker process keeps what it read of a code-first history (``durable/prefix.py``): its next delivery
of the execution reads only the records after it. These tests check that a kept prefix is used when it
still fits, and that a stale one (injected with a wrong value, so using it would show) is never used:
after a redrive, a redrive to another version, a cancel, a new run under the same id, a lost write, or
in another process. Memory store, manual clock."""

from __future__ import annotations

import dataclasses
import datetime as dt

import pytest

from engine_core import Engine, EngineSettings, ManualClock, PermanentStepError, Registry, Status, StepRecord, codec
from engine_core.durable import durable, sleep, step
from engine_core.durable import replay as replay_module
from engine_core.durable.prefix import Prefix, index_records, prefix_of
from engine_core import transitions
from engine_core.ports import Transition
from engine_core.testing import LocalRunner

UTC = dt.timezone.utc
WRONG = codec.encode({"n": -1})


def make_runner(registry, store=None, queue=None, clock=None, **settings) -> LocalRunner:
    clock = clock or ManualClock(dt.datetime(2026, 3, 1, 12, 0, tzinfo=UTC))
    return LocalRunner(registry, clock=clock, store=store, queue=queue,
                       settings=EngineSettings(**{"lease_s": 120, "max_chain_steps": 1, **settings}))


class Reads:
    """Counts the store's history reads, by where they start."""

    def __init__(self, store):
        self.since: list[int | None] = []
        original = store.load_state

        def load_state(execution_id, since=None):
            self.since.append(since)
            return original(execution_id, since=since)

        store.load_state = load_state


def counting_flow(registry, seen: list, steps: int = 4, fail: dict | None = None) -> None:
    @durable("counting", registry=registry)
    def flow(input):
        values = []
        for i in range(steps):
            value = step(f"s{i}", _make(i, fail))
            seen.append((i, codec.copy_value(value)))
            value["n"] += 1000  # the function changes what it got: no later replay may see it
            values.append(value["n"] - 1000)
        return values


def _make(i: int, fail: dict | None):
    def body():
        if fail is not None and fail.get(i):
            fail[i] -= 1
            raise PermanentStepError(f"step {i} fails")
        return {"n": i}
    return body


def tamper(runner, eid) -> None:
    """Replace the kept record of position 0 with one holding a wrong value, keeping everything else."""
    kept = runner.engine.prefixes.get(eid)
    assert kept is not None
    bad = kept.records[0].model_copy(update={"result_blob": WRONG})
    records, ready = (bad, *kept.records[1:]), {}
    index_records(records, {}, ready)  # what prefix_of keeps beside the records it keeps
    runner.engine.prefixes.keep(eid, dataclasses.replace(kept, records=records, values={}, ready=ready, tasks={}))


def test_durable_a_warm_process_reads_only_the_records_after_what_it_kept_and_replays_the_same_values(registry):
    # given: one step a delivery, so every delivery replays the ones before
    seen: list = []
    counting_flow(registry, seen)
    runner = make_runner(registry)
    reads = Reads(runner.store)

    # when
    eid = runner.start("counting")
    e = runner.run_until_done(eid)

    # then: after the first delivery each read starts where the kept prefix ends; every replay of each
    # position saw its recorded value, never the one the function changed
    assert e.status is Status.COMPLETED and runner.result(eid) == [0, 1, 2, 3]
    assert reads.since == [None, 1, 2, 3]
    assert all(value == {"n": i} for i, value in seen)
    assert len(seen) == 1 + 2 + 3 + 4
    assert runner.engine.prefixes.get(eid) is None  # a completed execution keeps nothing


def test_durable_a_warm_process_replays_what_it_recorded_without_decoding_it(registry, monkeypatch):
    # given: two steps a delivery, and every decode of a recorded value counted
    seen: list = []
    counting_flow(registry, seen, steps=6)
    runner = make_runner(registry, max_chain_steps=2)
    decoded: list[int] = []
    real = replay_module.value_of
    monkeypatch.setattr(replay_module, "value_of", lambda r: decoded.append(r.step_index) or real(r))

    # when
    eid = runner.start("counting")
    e = runner.run_until_done(eid)

    # then: every replay handed out the recorded value, never the one the function changed, and none
    # decoded a record: each was replayed from the copy kept when this process recorded it
    assert e.status is Status.COMPLETED and runner.result(eid) == [0, 1, 2, 3, 4, 5]
    assert all(value == {"n": i} for i, value in seen) and len(seen) == 2 + 4 + 6
    assert decoded == []


def test_durable_without_the_cache_every_delivery_reads_the_whole_history(registry):
    # given
    seen: list = []
    counting_flow(registry, seen)
    runner = make_runner(registry, replay_cache_mb=0)
    reads = Reads(runner.store)

    # when
    eid = runner.start("counting")
    runner.run_until_done(eid)

    # then
    assert runner.result(eid) == [0, 1, 2, 3] and reads.since == [None] * 4


def test_durable_a_kept_prefix_that_fits_is_used(registry):
    # given: a kept prefix whose record of position 0 holds a wrong value (the control for the tests
    # below: a prefix that fits is what the replay reads, so a wrong one shows)
    seen: list = []
    counting_flow(registry, seen)
    runner = make_runner(registry)
    eid = runner.start("counting")
    runner.step_once()
    runner.step_once()
    tamper(runner, eid)

    # when
    runner.run_until_done(eid)

    # then
    assert runner.result(eid)[0] == -1


def kept_after(registry, deliveries: int, **flow) -> tuple[LocalRunner, str, Prefix]:
    """A ``counting`` execution after ``deliveries`` deliveries of one step each, and what this process kept."""
    counting_flow(registry, [], **flow)
    runner = make_runner(registry)
    eid = runner.start("counting")
    for _ in range(deliveries):
        runner.step_once()
    kept = runner.engine.prefixes.get(eid)
    assert kept is not None and kept.upto == deliveries
    return runner, eid, kept


def test_durable_a_kept_prefix_is_not_used_after_a_redrive(registry):
    # given: step 2 fails once for good; a stale prefix from before the failure
    runner, eid, stale = kept_after(registry, 2, fail={2: 1})
    assert runner.run_until_done(eid).status is Status.FAILED
    runner.engine.prefixes.keep(eid, dataclasses.replace(
        stale, records=(stale.records[0].model_copy(update={"result_blob": WRONG}), *stale.records[1:]), values={}))

    # when
    runner.engine.operator.redrive(eid, "ops")
    e = runner.run_until_done(eid)

    # then: the redrive's delivery read the whole history
    assert e.status is Status.COMPLETED and runner.result(eid) == [0, 1, 2, 3]


def test_durable_a_kept_prefix_is_not_used_after_a_redrive_to_another_version(registry):
    # given: versions 1 and 2 call the same steps; version 1 fails at step 2
    seen: list = []
    counting_flow(registry, seen, fail={2: 1})

    @durable("counting", version=2, registry=registry)
    def flow2(input):
        return [step(f"s{i}", _make(i, None))["n"] for i in range(4)]

    runner = make_runner(registry)
    eid = runner.start("counting", version=1)
    for _ in range(2):
        runner.step_once()
    stale = runner.engine.prefixes.get(eid)
    assert runner.run_until_done(eid).status is Status.FAILED
    runner.engine.prefixes.keep(eid, dataclasses.replace(
        stale, records=(stale.records[0].model_copy(update={"result_blob": WRONG}), *stale.records[1:]), values={}))

    # when
    runner.engine.operator.redrive(eid, "ops", to_version=2)
    e = runner.run_until_done(eid)

    # then
    assert e.status is Status.COMPLETED and e.workflow_version == 2 and runner.result(eid) == [0, 1, 2, 3]


def test_durable_a_kept_prefix_is_not_used_by_a_cancel_and_its_compensations(registry):
    # given: two steps with compensations, then a sleep; a wrong value kept for the first step
    undone: list = []

    @durable("undo", registry=registry)
    def flow(input):
        a = step("a", lambda: {"n": 0}, compensate=lambda result: undone.append(("a", result)))
        step("b", lambda: {"n": 1}, compensate=lambda result: undone.append(("b", result)))
        sleep(hours=1)
        return a

    runner = make_runner(registry)
    eid = runner.start("undo")
    for _ in range(3):
        runner.step_once()
    assert runner.engine.get(eid).status is Status.SLEEPING
    tamper(runner, eid)

    # when
    runner.engine.operator.cancel(eid, "ops")
    e = runner.run_until_done(eid)

    # then: the compensations got the recorded results
    assert e.status is Status.CANCELLED and undone == [("b", {"n": 1}), ("a", {"n": 0})]


def test_durable_a_kept_prefix_of_an_earlier_run_under_the_same_token_is_not_used(registry):
    # given: a run under a token, kept, then expired and started again under the same token
    seen: list = []
    counting_flow(registry, seen)
    runner = make_runner(registry, retention_days=1)
    eid = runner.start("counting", token="t-1")
    runner.step_once()
    runner.step_once()
    old = runner.engine.prefixes.get(eid)
    runner.run_until_done(eid)
    runner.clock.set(runner.clock.now() + dt.timedelta(days=30))
    assert runner.start("counting", token="t-1") == eid
    runner.engine.prefixes.keep(eid, dataclasses.replace(
        old, records=(old.records[0].model_copy(update={"result_blob": WRONG}),), values={}))

    # when
    e = runner.run_until_done(eid)

    # then
    assert e.status is Status.COMPLETED and runner.result(eid) == [0, 1, 2, 3]


def test_durable_another_process_moving_the_execution_on_leaves_this_process_prefix_usable(registry):
    # given: two worker processes on one store and queue, taking turns
    seen: list = []
    counting_flow(registry, seen, steps=6)
    first = make_runner(registry)
    second = make_runner(registry, store=first.store, queue=first.queue, clock=first.clock)
    reads = Reads(first.store)
    eid = first.start("counting")
    first.step_once()
    first.step_once()  # the first process keeps positions 0 and 1

    # when: the second process runs two deliveries, then the first one goes on
    second.step_once()
    second.step_once()
    e = first.run_until_done(eid)

    # then: the first process read from what it kept (position 2), not from where the execution was
    assert e.status is Status.COMPLETED and first.result(eid) == [0, 1, 2, 3, 4, 5]
    assert reads.since[:5] == [None, 1, None, 3, 2]
    assert all(value == {"n": i} for i, value in seen)


def test_durable_a_delivery_whose_write_was_lost_keeps_only_positions_it_saw_passed(registry):
    # given: the second delivery's write that moves past position 1 loses: another writer (the sweeper,
    # after the lease ran out) changed the item first
    seen: list = []
    counting_flow(registry, seen)
    runner = make_runner(registry)
    eid = runner.start("counting")
    runner.step_once()
    original = runner.store.commit
    calls = {"n": 0}

    def commit(transition):
        calls["n"] += 1
        if calls["n"] == 2:
            current = runner.store.load(eid)
            original(Transition(current.current_step, current.version,
                                transitions.redriven(current, runner.clock.now(), 120, 2)))
        return original(transition)

    runner.store.commit = commit

    # when
    runner.step_once()
    runner.store.commit = original

    # then: the delivery lost (nothing it did not see as passed is kept), and the execution completes
    # with the recorded values
    assert runner.outcomes[-1].kind == "conflict"
    kept = runner.engine.prefixes.get(eid)
    assert kept is None or kept.upto <= 1
    assert runner.run_until_done(eid).status is Status.COMPLETED and runner.result(eid) == [0, 1, 2, 3]
    assert all(value == {"n": i} for i, value in seen)


def test_durable_a_warm_process_still_detects_a_replay_that_calls_another_step(registry):
    # given: a kept prefix, then a deploy that renames the first step
    seen: list = []
    counting_flow(registry, seen)
    runner = make_runner(registry)
    eid = runner.start("counting")
    runner.step_once()
    runner.step_once()
    assert runner.engine.prefixes.get(eid) is not None
    changed = Registry()

    @durable("counting", registry=changed)
    def flow(input):
        return [step(f"renamed{i}", _make(i, None))["n"] for i in range(4)]

    runner.deploy(changed)

    # when
    e = runner.run_until_done(eid)

    # then
    assert e.status is Status.FAILED and e.error.code == "nondeterministic_replay"
    assert "renamed0" in e.error.message


def test_durable_a_delivery_that_raises_drops_its_kept_prefix(registry):
    # given
    seen: list = []
    counting_flow(registry, seen)
    runner = make_runner(registry)
    eid = runner.start("counting")
    runner.step_once()
    assert runner.engine.prefixes.get(eid) is not None
    original = runner.store.put_step

    def put_step(execution_id, record):
        raise RuntimeError("the store is down")

    runner.store.put_step = put_step

    # when
    runner.step_once()

    # then
    assert runner.errors and runner.engine.prefixes.get(eid) is None
    runner.store.put_step = original


@pytest.mark.parametrize("change", [
    {"run": "2026-01-01T00:00:00.000000Z"}, {"version": 10_000}, {"upto": 50}, {"redrives": 1},
    {"workflow_version": 2},
])
def test_durable_a_kept_prefix_that_does_not_fit_the_execution_read_is_dropped_and_the_whole_history_read(
        registry, change):
    # given
    seen: list = []
    counting_flow(registry, seen)
    runner = make_runner(registry)
    reads = Reads(runner.store)
    eid = runner.start("counting")
    runner.step_once()
    runner.step_once()
    tamper(runner, eid)
    kept = runner.engine.prefixes.get(eid)
    runner.engine.prefixes.keep(eid, dataclasses.replace(kept, **change))

    # when
    runner.step_once()

    # then: the read from the kept position was followed by a read of it all, and the wrong value unused
    assert reads.since[-2:] == [kept.upto if "upto" not in change else change["upto"], None]
    runner.run_until_done(eid)
    assert runner.result(eid) == [0, 1, 2, 3]


def test_durable_kept_prefixes_stay_within_their_budget(registry):
    # given: a budget for about one execution's kept records
    seen: list = []
    counting_flow(registry, seen, steps=3)
    runner = make_runner(registry, replay_cache_mb=0.0006)  # ~630 bytes: one prefix of two records

    # when: two executions in turns, two deliveries each
    a, b = runner.start("counting"), runner.start("counting")
    for _ in range(2):
        runner.step_once()

    # then: the least recently used one was dropped
    kept = runner.engine.prefixes
    assert kept._bytes <= kept.max_bytes and len(kept) == 1
    assert runner.run_until_done(a).status is Status.COMPLETED and runner.run_until_done(b).status is Status.COMPLETED
    assert isinstance(Prefix, type) and isinstance(StepRecord, type) and Engine


def _records(n: int, **extra) -> list[StepRecord]:
    return [StepRecord(step_index=i, name=f"s{i}", status="SUCCEEDED", attempts=1, result_blob="1", **extra)
            for i in range(n)]


@pytest.mark.parametrize("case", ["compensation", "gap", "corrupt", "compensating", "cancel_requested",
                                  "terminal", "failed_step", "legacy_layout"])
def test_durable_nothing_is_kept_of_a_history_it_cannot_vouch_for(registry, case):
    # given: an execution at position 3 and its records
    seen: list = []
    counting_flow(registry, seen)
    runner = make_runner(registry)
    eid = runner.start("counting")
    e = base = runner.engine.get(eid).model_copy(update={"current_step": 3, "layout": 2})
    records: list = _records(3)
    if case == "compensation":
        records.append(records[1].model_copy(update={"kind": "compensation"}))
    elif case == "gap":
        del records[1]
    elif case == "corrupt":
        from engine_core.model import CorruptRecord

        records[1] = CorruptRecord(sort_key="STEP#001#s1", detail="unreadable")
    elif case == "legacy_layout":
        e = e.model_copy(update={"layout": 1})
    elif case == "terminal":
        e = e.model_copy(update={"status": Status.COMPLETED, "next_wake_at": None, "timer": None, "index_at": None})
    else:
        e = e.model_copy(update={case: True if case != "failed_step" else 2})

    # then
    assert prefix_of(base, _records(3), {}) is not None  # the control: the plain history is kept
    assert prefix_of(e, records, {}) is None


def test_durable_a_duplicate_delivery_after_another_process_completed_the_execution_reads_once(registry):
    # given: this process keeps positions 0-1; another process runs the execution to its end
    seen: list = []
    counting_flow(registry, seen)
    first = make_runner(registry)
    second = make_runner(registry, store=first.store, queue=first.queue, clock=first.clock)
    eid = first.start("counting")
    first.step_once()
    first.step_once()
    message = first.queue.messages[0].body
    assert second.run_until_done(eid).status is Status.COMPLETED
    reads = Reads(first.store)

    # when: a copy of an earlier message reaches this process
    outcome = first.engine.process(message)

    # then: one bounded read, nothing run, the entry dropped
    assert outcome.kind == "terminal" and reads.since == [2]
    assert first.engine.prefixes.get(eid) is None and first.result(eid) == [0, 1, 2, 3]


def test_durable_a_record_read_after_the_kept_prefix_leaves_the_kept_table_as_it_was(registry):
    # given: this process keeps positions 0 and 1; another process records position 2 and dies before
    # the write that moves on
    from engine_core import faults

    seen: list = []
    counting_flow(registry, seen, steps=5)
    first = make_runner(registry)
    second = make_runner(registry, store=first.store, queue=first.queue, clock=first.clock)
    eid = first.start("counting")
    first.step_once()
    first.step_once()
    kept = first.engine.prefixes.get(eid)
    assert kept is not None and kept.upto == 2
    ready_before, tasks_before = dict(kept.ready), dict(kept.tasks)

    class Died(BaseException):
        """The other process dying (no SystemExit: a function's sys.exit() is its failure, not a crash)."""

    def die_after_the_record(name, info):
        if name == "worker.after_record":
            raise Died("the other process died")

    faults.install(die_after_the_record)
    try:
        with pytest.raises(Died):
            second.step_once()
    finally:
        faults.install(None)
    (recorded,) = [r for r in first.store.history(eid) if isinstance(r, StepRecord) and r.step_index == 2]

    # when: this process delivers again (its read from position 2 on holds that record)
    first.clock.advance(minutes=10)
    e = first.run_until_done(eid)

    # then: the record was replayed, not run again; the table this process had kept did not change under it
    assert e.status is Status.COMPLETED and first.result(eid) == [0, 1, 2, 3, 4]
    again = [r for r in first.store.history(eid) if isinstance(r, StepRecord) and r.step_index == 2]
    assert again == [recorded] and all(value == {"n": i} for i, value in seen)
    assert kept.ready == ready_before and set(kept.ready) == {0, 1}
    assert kept.tasks == tasks_before and set(kept.tasks) == {0, 1}


def test_durable_a_kept_position_holds_its_record_and_one_tuple_for_the_garbage_collector(registry):
    # given: four positions recorded in this process (one step a delivery), so four are kept
    import gc

    _, _, kept = kept_after(registry, 4, steps=6)

    # when: every object the entry's tables hold, the records aside, is counted if the collector tracks it
    held = {id(o): o for table in (kept.ready, kept.tasks, kept.values) for o in table.values()
            if gc.is_tracked(o) and not isinstance(o, StepRecord)}

    # then: one per position (its value's entry, which the step() table shares), and the tables name the
    # records themselves
    assert set(kept.tasks) == set(kept.ready) == {0, 1, 2, 3}
    assert len(held) == kept.upto
    assert all(kept.tasks[i] is kept.values[i] and kept.ready[i] is kept.records[i] for i in range(4))
    assert [kept.tasks[i][3] for i in range(4)] == ["s0", "s1", "s2", "s3"]
