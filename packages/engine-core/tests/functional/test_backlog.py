"""A backlog on the step queue (a burst of starts, throttled concurrency, a slow downstream): the sweeper
must not multiply the queue (issue 27). Engine + sweeper + memory store + manual clock; the queue holds
every message until the test delivers it, as a backlog would. Counted from the queue's own sends."""

from __future__ import annotations

import datetime as dt
import math
from collections import Counter

from engine_core import EngineSettings, Registry, sleep, workflow
from engine_core.backlog import BacklogMark
from engine_core.testing import LocalRunner

LEASE_S = 360.0  # the Terraform default: the step queue's visibility timeout (6 x the worker's 60 s)


def flow(registry: Registry, runs: Counter):
    def work(ctx):
        runs[ctx.execution_id] += 1
        return {"done": True}

    @workflow("backlogged", registry=registry)
    class Backlogged:
        steps = [work]

    def before(ctx):
        return {}

    def after(ctx):
        runs[ctx.execution_id] += 1

    @workflow("napping", registry=registry)
    class Napping:
        steps = [before, sleep(minutes=5), after]


def copies(runner, eid: str) -> int:
    return sum(1 for m in runner.queue.messages if m.body.execution_id == eid)


def test_a_backlog_older_than_the_lease_costs_copies_logarithmic_in_its_age_and_each_step_runs_once():
    registry, runs = Registry(), Counter()
    flow(registry, runs)
    runner = LocalRunner(registry, settings=EngineSettings(lease_s=LEASE_S))
    ids = [runner.start("backlogged", {}) for _ in range(20)]
    # when: nothing is delivered for two hours (every message waits behind the backlog) while the
    # sweeper ticks every minute
    backlog_s = 7200
    for _ in range(backlog_s // 60):
        runner.clock.advance(60)
        runner.sweeper.sweep()
    # then: each execution's message was re-sent with a doubling lease, not every lease period
    bound = 1 + math.ceil(math.log2(backlog_s / LEASE_S)) + 1
    per_execution = [copies(runner, eid) for eid in ids]
    assert max(per_execution) <= bound, per_execution
    assert min(per_execution) >= 2  # the first lease ran out: the sweeper did re-send once at least
    # and when the backlog drains, every execution runs its step once; the other copies are stale
    for eid in ids:
        assert runner.run_until_done(eid).status.value == "COMPLETED"
    assert all(runs[eid] == 1 for eid in ids)
    stale = [o for o in runner.outcomes if o.kind == "stale"]
    assert len(stale) == sum(per_execution) - len(ids)


def test_a_due_timer_whose_delayed_message_is_queued_is_not_dispatched_again_by_the_sweeper():
    registry, runs = Registry(), Counter()
    flow(registry, runs)
    runner = LocalRunner(registry, settings=EngineSettings(lease_s=LEASE_S))
    eid = runner.start("napping", {})
    while runner.engine.get(eid).status.value != "SLEEPING":
        runner.step_once()
    assert copies(runner, eid) == 1  # the sleep's delayed message
    # when: the wake time passes with the message still queued behind a backlog, and the sweeper ticks
    for _ in range(6):
        runner.clock.advance(60)
        runner.sweeper.sweep()
    # then: no second message; the queued one wakes it
    assert copies(runner, eid) == 1
    assert runner.run_until_done(eid).status.value == "COMPLETED" and runs[eid] == 1
    assert not [o for o in runner.outcomes if o.kind == "stale"]


def test_a_wake_sends_its_message_and_the_sweeper_does_not_send_another():
    registry, runs = Registry(), Counter()
    flow(registry, runs)
    runner = LocalRunner(registry, settings=EngineSettings(lease_s=LEASE_S))
    eid = runner.start("napping", {})
    while runner.engine.get(eid).status.value != "SLEEPING":
        runner.step_once()
    runner.queue.purge()  # (as if the sleep's message were far behind)
    runner.engine.operator.wake(eid, "ops")
    for _ in range(3):
        runner.clock.advance(60)
        runner.sweeper.sweep()
    assert copies(runner, eid) == 1


def drain_a_growing_backlog(marks: bool, lose: int | None = None) -> dict:
    """90 starts, one every 20 s, while the fleet receives one message every 30 s (the backlog grows to a
    15-minute wait), the sweeper ticking every minute; ``lose``: the start whose first message is lost.
    Returns what the queue and the engine counted."""
    registry, runs = Registry(), Counter()
    flow(registry, runs)
    runner = LocalRunner(registry, settings=EngineSettings(lease_s=LEASE_S, backlog_marks=marks))
    ids: list[str] = []
    lost_id, lost_at, redriven_at = None, None, None
    for tick in range(1, 100_000):
        runner.clock.advance(10)
        t = tick * 10
        if t % 20 == 0 and len(ids) < 90:
            ids.append(runner.start("backlogged", {}))
            if len(ids) == lose:
                lost_id, lost_at = ids[-1], t
                runner.queue.messages = [m for m in runner.queue.messages if m.body.execution_id != lost_id]
        if t % 30 == 0:
            for m in runner.queue.receive(1):
                runner.engine.backlog.observe(m.body, m.sent_at)
                runner.outcomes.append(runner.engine.process(m.body))
                runner.queue.ack(m)
        if t % 60 == 0:
            runner.sweeper.sweep()
        if lost_id and redriven_at is None and copies(runner, lost_id):
            redriven_at = t
        if len(ids) == 90 and not runner.queue.messages and all(
                runner.engine.get(eid).status.is_terminal for eid in ids):
            break
    return {"ids": ids, "runs": runs, "statuses": Counter(runner.engine.get(eid).status.value for eid in ids),
            "stale": sum(1 for o in runner.outcomes if o.kind == "stale"), "sent": runner.queue.sent,
            "lost_at": lost_at, "redriven_at": redriven_at, "marks": runner.engine.backlog.marks_written,
            "ended_at": t}


def test_a_growing_backlog_with_backlog_marks_sends_no_copy_and_each_step_runs_once():
    # when: the fleet falls 15 minutes behind (2.5 leases) and the workers mark the backlog they see
    got = drain_a_growing_backlog(marks=True)

    # then: the sweeper re-sent nothing (every send is a start's first message): no stale delivery
    assert got["marks"] > 0
    assert got["statuses"] == {"COMPLETED": 90}
    assert got["sent"] == 90 and got["stale"] == 0
    assert all(got["runs"][eid] == 1 for eid in got["ids"])


def test_a_growing_backlog_without_backlog_marks_is_redriven_on_leases_and_its_copies_are_stale():
    # the same run with the marks off (LOOM_BACKLOG_MARKS=0): the lease alone decides
    got = drain_a_growing_backlog(marks=False)

    assert got["marks"] == 0
    assert got["statuses"] == {"COMPLETED": 90}
    assert got["sent"] > 90 and got["stale"] == got["sent"] - 90
    assert all(got["runs"][eid] == 1 for eid in got["ids"])


def test_a_message_lost_behind_a_backlog_is_redriven_once_the_workers_pass_it_by_a_lease():
    # given: the 30th start's message (sent at 600 s) is lost while the backlog grows
    got = drain_a_growing_backlog(marks=True, lose=30)

    # then: re-driven once the workers receive messages visible a lease after it (sent at 960 s,
    # received at 1,440 s when the fleet drains at 2/3 of the arrival rate), within one mark interval
    # (a quarter lease) and one sweeper tick; its step runs once and no other copy was sent
    workers_pass_it = (got["lost_at"] + LEASE_S) * 1.5
    assert workers_pass_it <= got["redriven_at"] <= workers_pass_it + LEASE_S / 4 + 60 + 30
    assert got["statuses"] == {"COMPLETED": 90}
    assert got["sent"] == 91 and got["stale"] == 0
    assert all(got["runs"][eid] == 1 for eid in got["ids"])


def test_a_lost_message_under_a_backlog_that_ends_is_redriven_when_the_mark_goes_stale():
    # given: a backlog marked by the workers, then the fleet stops receiving altogether (a throttle to 0)
    registry, runs = Registry(), Counter()
    flow(registry, runs)
    runner = LocalRunner(registry, settings=EngineSettings(lease_s=LEASE_S))
    old = runner.start("backlogged", {})
    runner.clock.advance(LEASE_S)
    (m,) = runner.queue.receive(1)
    assert runner.engine.backlog.observe(m.body, m.sent_at) is not None  # waited a lease: marked
    runner.engine.process(m.body)
    runner.queue.ack(m)
    marked_at = runner.clock.now()
    eid = runner.start("backlogged", {})
    runner.queue.purge()  # its message is lost
    # when: the sweeper ticks every minute and no worker receives anything
    redriven_after = None
    for minute in range(1, 40):
        runner.clock.advance(60)
        runner.sweeper.sweep()
        if copies(runner, eid):
            redriven_after = (runner.clock.now() - marked_at).total_seconds()
            break
    # then: not while the mark is fresh (two leases), and within a tick after it goes stale
    assert redriven_after is not None and 2 * LEASE_S < redriven_after <= 2 * LEASE_S + 60
    assert runner.run_until_done(eid).status.value == "COMPLETED" and runs[eid] == 1 and runs[old] == 1


def test_a_due_sleep_whose_delayed_message_waits_behind_a_marked_backlog_is_not_sent_again():
    registry, runs = Registry(), Counter()
    flow(registry, runs)
    runner = LocalRunner(registry, settings=EngineSettings(lease_s=LEASE_S))
    eid = runner.start("napping", {})
    while runner.engine.get(eid).status.value != "SLEEPING":
        runner.step_once()
    wake = runner.engine.get(eid).next_wake_at
    # when: past the wake and its lease, the workers are still receiving messages that became visible
    # before the wake (they mark it every tick), and the sweeper ticks
    for _ in range(20):
        runner.clock.advance(60)
        behind = runner.clock.now() - wake - dt.timedelta(seconds=LEASE_S / 2)
        runner.store.put_backlog_mark(BacklogMark(visible_at=wake - dt.timedelta(seconds=60) + behind / 2,
                                                  observed_at=runner.clock.now()))
        runner.sweeper.sweep()
    # then: the sleep's own message is the only one; it wakes the execution
    assert runner.clock.now() > wake + dt.timedelta(seconds=2 * LEASE_S)
    assert copies(runner, eid) == 1
    assert runner.run_until_done(eid).status.value == "COMPLETED" and runs[eid] == 1


def fanned_out_behind_a_backlog(registry: Registry, marked: bool):
    """A map over three items fans out; its branch messages wait in the queue past the step's lease while
    (``marked``) the workers mark a backlog that has not reached them. The sweeper re-drives the step and
    its reconcile runs. Returns the runner, the execution id and the reconcile's outcome."""
    from engine_core import map_

    def square(ctx):
        return {"n": ctx.item * ctx.item}

    @workflow("mapped", registry=registry)
    class Mapped:
        steps = [map_(square, over="xs")]

    runner = LocalRunner(registry, settings=EngineSettings(lease_s=LEASE_S))
    eid = runner.start("mapped", {"xs": [1, 2, 3]})
    (first,) = runner.queue.receive()
    assert runner.engine.process(first.body).kind == "fanned_out"
    runner.queue.ack(first)
    sent_at = runner.clock.now()
    runner.clock.advance(LEASE_S + 1)
    if marked:  # the workers are receiving messages sent a minute before the branches'
        runner.store.put_backlog_mark(BacklogMark(visible_at=sent_at - dt.timedelta(seconds=60),
                                                  observed_at=runner.clock.now()))
    assert runner.sweeper.sweep().redriven == {"stalled_lease": 1}
    (reconcile,) = [m for m in runner.queue.receive() if m.body.branch is None]
    outcome = runner.engine.process(reconcile.body)
    runner.queue.ack(reconcile)
    return runner, eid, outcome


def test_a_reconcile_leaves_branches_whose_messages_wait_behind_a_marked_backlog_alone():
    registry = Registry()
    runner, eid, outcome = fanned_out_behind_a_backlog(registry, marked=True)

    assert outcome.kind == "reconciled" and outcome.detail == "0 branches re-driven, 3 left behind a queue backlog"
    # no second copy of any branch message: the three queued ones run the map, each item once
    assert sum(1 for m in runner.queue.messages if m.body.branch is not None) == 3
    assert runner.run_until_done(eid).status.value == "COMPLETED"
    assert not [o for o in runner.outcomes if o.kind == "stale"]


def test_a_reconcile_without_a_backlog_mark_sends_the_branches_whose_lease_passed_again():
    registry = Registry()
    runner, eid, outcome = fanned_out_behind_a_backlog(registry, marked=False)

    assert outcome.kind == "reconciled" and outcome.detail == "3 branches re-driven"
    assert sum(1 for m in runner.queue.messages if m.body.branch is not None) == 6
    assert runner.run_until_done(eid).status.value == "COMPLETED"


def test_a_message_held_behind_a_backlog_is_redriven_before_its_items_stamps_run_out():
    # given: a short retention, so the items of a live execution are stamped only a few leases ahead; its first
    # message is lost while the workers keep marking a backlog that never reaches it
    registry, runs = Registry(), Counter()
    flow(registry, runs)
    runner = LocalRunner(registry, settings=EngineSettings(lease_s=LEASE_S, retention_days=0.01, history_grace_s=0))
    started = runner.clock.now()
    eid = runner.start("backlogged", {})
    runner.queue.purge()
    stamped = runner.engine.get(eid).stamped_until
    # when: the sweeper ticks every minute under that fresh mark
    redriven_at = None
    for tick in range(1, 60):
        runner.clock.advance(60)
        runner.store.put_backlog_mark(BacklogMark(visible_at=started + dt.timedelta(milliseconds=tick),
                                                  observed_at=runner.clock.now()))
        if runner.sweeper.sweep().redriven:
            redriven_at = runner.clock.now()
            break
    # then: held while the stamps had room, re-driven (and re-stamped) before they ran out, and it runs once
    assert redriven_at is not None and redriven_at - started > dt.timedelta(seconds=2 * LEASE_S)
    assert redriven_at < stamped
    assert runner.engine.get(eid).stamped_until > stamped
    assert runner.run_until_done(eid).status.value == "COMPLETED" and runs[eid] == 1


def test_a_reconcile_leaves_a_branch_whose_retry_message_waits_behind_a_marked_backlog_alone():
    # given: a map whose branch 1 fails its first attempt; its retry message comes due, then the step's lease
    # runs out, while the workers mark a backlog that has not reached messages visible at that retry time
    from engine_core import RetryPolicy, map_

    registry, attempts = Registry(), Counter()

    def flaky(ctx):
        attempts[ctx.item] += 1
        if ctx.item == 2 and attempts[2] == 1:
            raise RuntimeError("carrier busy")
        return {"n": ctx.item}

    @workflow("mapped_retry", registry=registry)
    class MappedRetry:
        steps = [map_(flaky, over="xs", retry=RetryPolicy(max_attempts=3, base=5, jitter=False))]

    runner = LocalRunner(registry, settings=EngineSettings(lease_s=LEASE_S))
    eid = runner.start("mapped_retry", {"xs": [1, 2, 3]})
    (first,) = runner.queue.receive()
    assert runner.engine.process(first.body).kind == "fanned_out"
    runner.queue.ack(first)
    for message in runner.queue.receive():  # each branch's first attempt: branch 1 (item 2) fails
        runner.engine.process(message.body)
        runner.queue.ack(message)
    [retrying] = [b for b in runner.store.branches(eid, 0) if b.status.value == "RETRY"]
    runner.clock.advance(LEASE_S + 10)
    runner.store.put_backlog_mark(BacklogMark(visible_at=retrying.next_wake_at - dt.timedelta(seconds=60),
                                              observed_at=runner.clock.now()))
    assert runner.sweeper.sweep().redriven == {"stalled_lease": 1}
    # when: the step's reconcile runs
    (reconcile,) = [m for m in runner.queue.receive() if m.body.branch is None]
    outcome = runner.engine.process(reconcile.body)
    runner.queue.ack(reconcile)
    # then: the retry's own message is left to run it (no second copy, nothing stale), each item once more
    assert outcome.kind == "reconciled" and outcome.detail == "0 branches re-driven, 1 left behind a queue backlog"
    assert sum(1 for m in runner.queue.messages if m.body.branch == 1) == 1
    assert runner.run_until_done(eid).status.value == "COMPLETED"
    assert not [o for o in runner.outcomes if o.kind == "stale"] and attempts == Counter({1: 1, 2: 2, 3: 1})
