"""Where step kinds meet operator actions and time: the defects of issue 19, each reproduced first.

Engine + memory store + manual clock (``LocalRunner``). Every check counts what really happened: a
journal the bodies append to, in order, and the items the store holds; never the engine's answers alone.
Time deletes items the way DynamoDB's TTL does (``reap``: every item whose ``expires_at`` passed).
"""

from __future__ import annotations

import datetime as dt

import pytest

from engine_core import (
    EngineSettings,
    PermanentStepError,
    Registry,
    RetryPolicy,
    Status,
    map_,
    parallel,
    sleep,
    step,
    wait_for_event,
    workflow,
)
from engine_core.errors import ExecutionStateConflictError, InvalidRequestError
from engine_core.testing import LocalRunner


class Crash(BaseException):
    """The worker process died here (nothing after it runs; the message is not acknowledged)."""


def reap(store, now: dt.datetime) -> int:
    """Delete what DynamoDB's TTL would have deleted by ``now``: every item whose ``expires_at`` passed."""
    bound, gone = int(now.timestamp()), 0

    def expired(attrs) -> bool:
        return isinstance(attrs.get("expires_at"), int) and attrs["expires_at"] <= bound

    for table in (store.steps, store.ops, store.events, store.joins, store.branch_items):
        for items in table.values():
            for key in [k for k, attrs in items.items() if expired(attrs)]:
                del items[key]
                gone += 1
    for eid in [e for e, attrs in store.metas.items() if expired(attrs)]:
        del store.metas[eid]
        gone += 1
    for eid in [e for e, attrs in store.starts.items() if expired(attrs)]:
        del store.starts[eid]
        store.inputs.pop(eid, None)
        gone += 1
    return gone


def drive(runner, eid: str, max_iterations: int = 20_000):
    """``run_until_done``, where a worker that dies (Crash) leaves its batch unacknowledged."""
    for _ in range(max_iterations):
        e = runner.engine.get(eid)
        if e.status.is_terminal:
            return e
        try:
            runner.step_once()
        except Crash:
            continue
    raise AssertionError(f"{eid} did not end")


def deliver_all(runner, rounds: int = 50) -> None:
    """Deliver every visible message (acknowledging it), round after round, without moving the clock."""
    for _ in range(rounds):
        batch = runner.queue.receive()
        if not batch:
            return
        for m in batch:
            try:
                runner.outcomes.append(runner.engine.process(m.body))
            except Crash:
                continue  # the worker died: not acknowledged, back after the visibility timeout
            runner.queue.ack(m)


# -- 1. cancel while a compensable step is claimed ------------------------------------------------------

def saga(journal: list, during_charge=None, crash_after_charge: bool = False):
    registry = Registry()

    def reserve(ctx):
        journal.append(("run", "reserve"))
        return {"reservation": "r-1"}

    def release(ctx):
        journal.append(("undo", "reserve", ctx.result))

    def charge(ctx):
        journal.append(("start", "charge"))
        if during_charge is not None:
            during_charge()
        journal.append(("end", "charge"))  # the card is charged
        if crash_after_charge:
            raise Crash()
        return {"charge_id": "ch-1"}

    def refund(ctx):
        journal.append(("undo", "charge", ctx.result))

    def ship(ctx):
        journal.append(("run", "ship"))

    @workflow("saga19", registry=registry)
    class Saga:
        steps = [step(reserve, compensate=release), step(charge, compensate=refund), ship]
        retry = RetryPolicy(max_attempts=3, base=1)

    return LocalRunner(registry)


def test_defect19_1_cancel_while_a_compensable_step_is_claimed_waits_for_its_attempt_and_undoes_it():
    # given: the operator cancels while the charge's body runs
    journal: list = []
    answers = []
    runner = saga(journal, during_charge=lambda: answers.append(runner.engine.operator.cancel(eid, "ops", "stop")))
    eid = runner.start("saga19", {})
    # when
    done = runner.run_until_done(eid)
    # then: the cancel was a request; no undo started before the charge's body ended; the charge is undone
    # too (first, in reverse order), and compensated is true because every recorded success was undone
    first_undo = next(i for i, j in enumerate(journal) if j[0] == "undo")
    assert journal.index(("end", "charge")) < first_undo
    assert [j[:2] for j in journal if j[0] == "undo"] == [("undo", "charge"), ("undo", "reserve")]
    assert ("undo", "charge", {"charge_id": "ch-1"}) in journal
    assert (done.status, done.compensated) == (Status.CANCELLED, True)
    assert [(a.status, getattr(a, "cancel_requested", False)) for a in answers] == [(Status.RUNNING, True)]
    assert ("run", "ship") not in journal


def test_defect19_1_a_cancelled_attempt_whose_worker_died_is_undone_once_its_lease_ran_out():
    # given: the cancel lands while the charge runs, and its worker dies after charging, before any record
    journal: list = []
    answers = []
    runner = saga(journal, during_charge=lambda: answers.append(runner.engine.operator.cancel(eid, "ops")),
                  crash_after_charge=True)
    eid = runner.start("saga19", {})
    # when
    done = drive(runner, eid)
    # then: nothing was undone while the dead attempt's lease held the step; after it, the charge (whose
    # effect is unknown: ctx.result None) and the reservation were undone, in reverse order
    assert [j for j in journal if j[0] == "undo"] == [("undo", "charge", None),
                                                      ("undo", "reserve", {"reservation": "r-1"})]
    assert journal.count(("start", "charge")) == 1  # the cancelled step never ran again
    assert (done.status, done.compensated) == (Status.CANCELLED, True)
    assert [(a.status, getattr(a, "cancel_requested", False)) for a in answers] == [(Status.RUNNING, True)]


def test_defect19_1_a_cancel_while_branches_run_compensates_only_after_they_end():
    # given: a fan-out after a compensable step; the cancel lands while branch 0's body runs
    journal: list = []
    registry = Registry()

    def reserve(ctx):
        journal.append(("run", "reserve"))
        return {"reservation": "r-1"}

    def release(ctx):
        journal.append(("undo", "reserve"))

    def label(ctx):
        journal.append(("start", ctx.branch))
        if ctx.branch == 0:
            answers.append(runner.engine.operator.cancel(eid, "ops"))
            deliver_all(runner)  # other workers take whatever the cancel sent, while this body still runs
        journal.append(("end", ctx.branch))
        return ctx.branch

    @workflow("fan19", registry=registry)
    class Fan:
        steps = [step(reserve, compensate=release), map_(label, over="items", max_concurrency=2, name="labels")]

    runner, answers = LocalRunner(registry), []
    eid = runner.start("fan19", {"items": [0, 1, 2]})
    # when
    done = runner.run_until_done(eid)
    # then: the release ran after every branch body that had started ended; no branch started after the cancel
    undo_at = journal.index(("undo", "reserve"))
    assert all(journal.index(("end", b)) < undo_at for (kind, b) in journal if kind == "start")
    assert [j for j in journal[journal.index(("end", 0)):] if j[0] == "start"] == []
    assert (done.status, done.compensated) == (Status.CANCELLED, True)
    assert [(a.status, getattr(a, "cancel_requested", False)) for a in answers] == [(Status.RUNNING, True)]


# -- 2. a token reused after expiry starts a clean run ------------------------------------------------------

def approval_flow():
    registry = Registry()
    runs = {"settle": []}

    def ask(ctx):
        return {"asked": True}

    def settle(ctx):
        runs["settle"].append(dict(ctx))
        return {"settled": True}

    @workflow("approval19", registry=registry)
    class Approval:
        steps = [ask, wait_for_event("approved", timeout=3600), settle]

    settings = EngineSettings(retention_days=1, history_grace_s=0)
    return LocalRunner(registry, settings=settings), runs


@pytest.mark.parametrize("timing", ["execution_expired_not_deleted", "execution_deleted_history_kept",
                                    "everything_deleted"])
def test_defect19_2_a_token_reused_after_expiry_starts_a_clean_run_that_sees_none_of_the_old_runs_items(timing):
    runner, runs = approval_flow()
    # given: the first run buffered an approval it never consumed, then was cancelled and expired
    first = runner.engine.start("approval19", {"amount": 99_999}, token="exp-7").execution.execution_id
    assert runner.send_event(first, "approved", {"approved": True}, event_id="mail-1") == "buffered"
    runner.engine.operator.cancel(first, "ops")
    runner.clock.advance(hours=48)
    if timing == "execution_deleted_history_kept":
        del runner.store.metas[first]
    elif timing == "everything_deleted":
        reap(runner.store, runner.clock.now())
    # when: the same token starts again
    again = runner.engine.start("approval19", {"amount": 99_999}, token="exp-7")
    eid = again.execution.execution_id
    # then: a new run that waits for its own approval (the old one is not consumed)
    assert again.created and eid == first
    waiting = runner.run_until(eid, "WAITING")
    assert waiting.status is Status.WAITING and runs["settle"] == []
    # the old run's event id is this run's to use
    assert runner.send_event(eid, "approved", {"approved": False}, event_id="mail-1") == "delivered"
    done = runner.run_until_done(eid)
    assert done.status is Status.COMPLETED
    assert [c.get("wait_approved", c.get("approved")) for c in runs["settle"]] in ([{"approved": False}], [False])
    assert [r.name for r in runner.engine.history(eid)] == ["ask", "wait_approved", "settle"]


# -- 3. an event cannot overwrite the context ------------------------------------------------------------

def test_defect19_3_an_event_cannot_replace_the_input_or_an_earlier_steps_result():
    registry = Registry()
    seen = []

    def limit(ctx):
        return {"limit": 5}

    def pay(ctx):
        seen.append((ctx["amount_cents"], ctx["limit"]))
        return {"paid": ctx["amount_cents"]}

    @workflow("expense19", registry=registry)
    class Expense:
        steps = [limit, wait_for_event("approved", timeout=3600), pay]

    runner = LocalRunner(registry)
    eid = runner.start("expense19", {"amount_cents": 100})
    runner.run_until(eid, "WAITING")
    # when: whoever holds the link sends keys of the context
    runner.send_event(eid, "approved", {"approved": True, "amount_cents": 1, "limit": 10**9})
    runner.run_until_done(eid)
    # then: the input and the earlier result stand; the event is kept under the wait's name
    assert seen == [(100, 5)]
    assert runner.context(eid)["wait_approved"] == {"approved": True, "amount_cents": 1, "limit": 10**9}


# -- 4. a callback token completes only its own wait --------------------------------------------------------

def two_waits():
    registry = Registry()
    tokens = []

    def ask(ctx):
        tokens.append(ctx.callback_token("approved"))

    @workflow("twowaits19", registry=registry)
    class TwoWaits:
        steps = [ask, wait_for_event("approved", timeout=3600, name="first"),
                 wait_for_event("approved", timeout=3600, name="second")]

    return LocalRunner(registry), tokens


def test_defect19_4_a_callback_token_issued_for_a_wait_answered_otherwise_completes_no_other_wait():
    runner, tokens = two_waits()
    eid = runner.start("twowaits19", {})
    runner.run_until(eid, "WAITING")
    # given: the first wait is answered by a plain event; its token stays unused
    assert runner.send_event(eid, "approved", {"by": "mail"}, event_id="mail-1") == "delivered"
    deliver_all(runner)
    second = runner.engine.get(eid)
    assert (second.status, second.current_step) == (Status.WAITING, 2)
    before = len(runner.store.events[eid])
    # when: the token issued for the first wait is used
    with pytest.raises(ExecutionStateConflictError) as refused:
        runner.engine.operator.complete_callback(tokens[0], {"by": "link"}, "partner")
    # then: refused, and the second wait still waits
    assert refused.value.code == "callback_used"
    assert len(runner.store.events[eid]) == before
    assert runner.engine.get(eid).status is Status.WAITING


def test_defect19_4_the_events_route_refuses_ids_reserved_for_callbacks_and_burns_no_token():
    runner, tokens = two_waits()
    eid = runner.start("twowaits19", {})
    runner.run_until(eid, "WAITING")
    # when: someone sends an event under the id a callback would use
    with pytest.raises(InvalidRequestError, match="reserved"):
        runner.send_event(eid, "approved", {"by": "forger"}, event_id="callback:1")
    # then: nothing was written, and the token still completes its wait
    assert eid not in runner.store.events or not runner.store.events[eid]
    assert runner.engine.operator.complete_callback(tokens[0], {"by": "link"}, "partner").outcome == "delivered"


# -- 5. after a redrive, a branch an attempt holds is not run again -------------------------------------------

def _fail_fix_and_redrive_meanwhile(runner, eid: str, branch_1, fixed: dict) -> None:
    """While branch 0's first attempt runs: branch 1's delivery fails the step, the operator fixes the cause
    and redrives, and the new generation's deliveries go on at once."""
    runner.engine.process(branch_1.body)
    assert runner.engine.get(eid).status is Status.FAILED
    fixed["on"] = True
    runner.engine.operator.redrive(eid, "ops")
    deliver_all(runner)


def test_defect19_5_a_redrive_never_runs_a_branch_body_while_an_attempt_of_it_still_runs():
    registry = Registry()
    running: set = set()
    overlaps, starts = [], []
    fixed = {"on": False}
    queue_during: list = []

    def item(ctx):
        b = ctx.branch
        if b in running:
            overlaps.append(b)
        running.add(b)
        starts.append(b)
        try:
            if b == 1 and not fixed["on"]:
                raise PermanentStepError("item 1 is broken")
            if b == 0 and starts.count(0) == 1:
                _fail_fix_and_redrive_meanwhile(runner, eid, queue_during.pop(0), fixed)
            return b
        finally:
            running.discard(b)

    @workflow("redrive19", registry=registry)
    class Redrive:
        steps = [map_(item, over="items", max_concurrency=2, name="items_done")]
        retry = RetryPolicy(max_attempts=1)

    runner = LocalRunner(registry)
    eid = runner.start("redrive19", {"items": [0, 1]})
    deliver_all(runner, rounds=1)  # the fan-out begins: one message per branch
    batch = runner.queue.receive()
    by_branch = {m.body.branch: m for m in batch}
    queue_during.append(by_branch[1])
    # when: branch 0's delivery runs (and everything above happens inside its body)
    runner.engine.process(by_branch[0].body)
    for m in batch:
        runner.queue.ack(m)
    done = runner.run_until_done(eid)
    # then: branch 0's body never ran twice at once; the redriven execution completed
    assert overlaps == []
    assert done.status is Status.COMPLETED
    assert runner.context(eid)["items_done"] == [0, 1]


def _held_through_a_redrive(items: list[int]):
    """A map (two at once, one attempt each) whose branch 1 fails the step for good while an attempt holds
    branch 0; meanwhile the operator fixes the cause and redrives, and the new generation's deliveries go on.
    Then branch 0's attempt returns. Returns the runner, the execution, that delivery's outcome, the branch
    bodies started and when branch 0's attempt began."""
    registry = Registry()
    starts: list = []
    fixed = {"on": False}
    queue_during: list = []

    def item(ctx):
        b = ctx.branch
        starts.append(b)
        if b == 1 and not fixed["on"]:
            raise PermanentStepError("item 1 is broken")
        if b == 0 and starts.count(0) == 1:  # (branch 1 runs again; branch 0's lane waits for this attempt)
            _fail_fix_and_redrive_meanwhile(runner, eid, queue_during.pop(0), fixed)
        return f"done-{b}"

    @workflow("held_redrive", registry=registry)
    class Held:
        steps = [map_(item, over="items", max_concurrency=2, name="items_done")]
        retry = RetryPolicy(max_attempts=1)

    runner = LocalRunner(registry)
    eid = runner.start("held_redrive", {"items": items})
    deliver_all(runner, rounds=1)
    batch = runner.queue.receive()
    by_branch = {m.body.branch: m for m in batch}
    queue_during.append(by_branch[1])
    began = runner.clock.now()
    outcome = runner.engine.process(by_branch[0].body)
    for m in batch:
        runner.queue.ack(m)
    return runner, eid, outcome, starts, began


def test_a_branch_held_through_a_redrive_keeps_its_success_and_its_body_runs_once():
    # when: branch 0's first attempt returns after the redrive began a new generation
    runner, eid, outcome, starts, began = _held_through_a_redrive([0, 1, 2])
    done = runner.run_until_done(eid)
    # then: its success counts in the new generation and launches its lane's next branch; its body ran once,
    # and nothing waited for a lease (the manual clock did not move past one)
    assert outcome.kind != "superseded", outcome
    assert sorted(starts) == [0, 1, 1, 2], starts
    assert done.status is Status.COMPLETED
    assert runner.context(eid)["items_done"] == ["done-0", "done-1", "done-2"]
    assert (runner.clock.now() - began).total_seconds() < 5, runner.clock.now() - began
    branch0 = runner.store.branches(eid, 0)[0]
    assert (branch0.status.value, branch0.attempt) == ("SUCCEEDED", 1), branch0


def test_a_branch_held_through_a_redrive_that_finishes_last_fans_in_at_once():
    # (the held attempt's delivery read the execution before the failure: its fan-in's record, written at
    # that version, met the failure's record of the same version and stopped, and the fan-in waited a lease)
    # when: branch 0's first attempt returns last, after the redrive's generation counted branch 1
    runner, eid, outcome, starts, began = _held_through_a_redrive([0, 1])
    # then: that delivery fans in and completes the execution itself, its body having run once
    assert outcome.kind not in ("superseded", "branch_succeeded"), outcome
    assert runner.engine.get(eid).status is Status.COMPLETED, runner.engine.get(eid).error
    done = runner.run_until_done(eid)
    assert sorted(starts) == [0, 1, 1], starts
    assert runner.context(eid)["items_done"] == ["done-0", "done-1"] and done.status is Status.COMPLETED
    assert (runner.clock.now() - began).total_seconds() < 5, runner.clock.now() - began


# -- 6. time deletes no live data ----------------------------------------------------------------------------

def test_defect19_6_a_fan_out_that_outlives_retention_keeps_every_earlier_item():
    registry = Registry()
    attempts: dict = {}

    def prepare(ctx):
        return {"prepared": True}

    def slow(ctx):
        attempts[ctx.branch] = attempts.get(ctx.branch, 0) + 1
        if attempts[ctx.branch] < 4:
            raise RuntimeError("downstream busy")  # retried after long backoffs: the fan-out lasts hours
        return {"ok": ctx.item}

    @workflow("longfan19", registry=registry)
    class LongFan:
        steps = [prepare, map_(slow, over="items", max_concurrency=1, name="results")]
        retry = RetryPolicy(max_attempts=4, base=1800, max_delay=1800, jitter=False)

    settings = EngineSettings(retention_days=0.05, history_grace_s=0)  # 72 minutes
    runner = LocalRunner(registry, settings=settings)
    eid = runner.start("longfan19", {"items": [1, 2, 3]})
    # when: time passes, deleting whatever expired, while the fan-out runs for hours
    for _ in range(20_000):
        e = runner.engine.get(eid)
        if e.status.is_terminal:
            break
        runner.step_once()
        reap(runner.store, runner.clock.now())
    # then: it completed with the earlier step's result (nothing of the live execution expired)
    assert e.status is Status.COMPLETED, e.error
    assert e.updated_at - e.created_at > dt.timedelta(hours=4)
    assert runner.context(eid)["prepared"] is True and [r["ok"] for r in runner.context(eid)["results"]] == [1, 2, 3]


def test_defect19_6_every_item_a_run_writes_carries_a_ttl_while_live_and_outlives_the_execution_at_its_end():
    registry = Registry()

    def reserve(ctx):
        return {"r": 1}

    def release(ctx):
        return None

    def fail_once(ctx):
        if ctx.attempt == 1:
            raise RuntimeError("once")

    @workflow("items19", registry=registry)
    class Items:
        steps = [step(reserve, compensate=release), parallel(fail_once, reserve, name="both"), sleep(hours=1),
                 wait_for_event("approved", timeout=3600)]
        retry = RetryPolicy(max_attempts=3, base=1)

    runner = LocalRunner(registry)
    store = runner.store
    eid = runner.start("items19", {})
    runner.send_event(eid, "approved", {"early": True}, event_id="early")  # kept, consumed by the wait
    sleeping = runner.run_until(eid, "SLEEPING")
    runner.engine.operator.wake(eid, "ops")  # an operation record

    def items() -> dict:
        return {
            "#INPUT": [store.starts[eid]],
            "STEP": list(store.steps.get(eid, {}).values()),
            "OP": list(store.ops.get(eid, {}).values()),
            "EVT": list(store.events.get(eid, {}).values()),
            "JOIN": list(store.joins.get(eid, {}).values()),
            "BRANCH": [b for (x, _), branch in store.branch_items.items() if x == eid for b in branch.values()],
        }

    # then, while it lives: every item of every kind carries a TTL in the future
    live = items()
    assert all(live.values()), {k: len(v) for k, v in live.items()}
    now = int(sleeping.updated_at.timestamp())
    assert all(isinstance(a.get("expires_at"), int) and a["expires_at"] > now for v in live.values() for a in v), live
    # and at the end: none expires before the execution itself
    e = runner.run_until_done(eid)
    assert e.status is Status.COMPLETED
    for name, found in items().items():
        for attrs in found:
            assert attrs["expires_at"] >= int(e.expires_at.timestamp()), (name, attrs)


def test_a_start_whose_first_message_is_lost_keeps_its_input_past_the_lease_when_retention_is_shorter():
    # given: retention (14.4 minutes, no grace) shorter than the lease (15 minutes), and the first message lost
    registry = Registry()

    def greet(ctx):
        return {"greeting": f"hello {ctx['name']}"}

    @workflow("shortkept", registry=registry)
    class ShortKept:
        steps = [greet]

    runner = LocalRunner(registry, settings=EngineSettings(retention_days=0.01, history_grace_s=0, lease_s=900))
    eid = runner.start("shortkept", {"name": "ada"})
    runner.queue.purge()  # the first delivery died with its message (or the message was lost)
    # when: the lease runs out, TTL deletes whatever expired by then, and the sweeper re-drives it
    runner.clock.advance(seconds=901)
    runner.store.reap_expired(runner.clock.now())
    done = runner.run_until_done(eid)
    # then: the input was still there (composition simulation seed 60)
    assert done.status is Status.COMPLETED, done.error
    assert runner.context(eid)["greeting"] == "hello ada"


def test_a_wake_is_not_undone_by_a_redrive_onto_another_version():
    # given: a version-1 order sleeping an hour; a deploy keeps only version 2
    journal: list[str] = []

    def reserve(ctx):
        journal.append("reserve")
        return {"reserved": True}

    def pack(ctx):
        journal.append("pack")
        return {"packed": True}

    def ship(ctx):
        journal.append("ship")
        return {"shipped": True}

    v1, v2 = Registry(), Registry()

    @workflow("orders", registry=v1)
    class OrdersV1:
        steps = [reserve, sleep(hours=1), ship]

    @workflow("orders", version=2, registry=v2)
    class OrdersV2:
        steps = [reserve, sleep(hours=1), pack, ship]

    runner = LocalRunner(v1)
    eid = runner.start("orders", {})
    wake_at = runner.run_until(eid, "SLEEPING").next_wake_at
    runner.deploy(v2)
    # when: an operator wakes it (its delivery fails workflow_version_missing), then redrives it onto version 2
    runner.engine.operator.wake(eid, "ops")
    failed = runner.run_until(eid, "FAILED")
    runner.engine.operator.redrive(eid, "ops", to_version=2)
    done = runner.run_until_done(eid)
    # then: the sleep the operator ended stays ended: version 2's next steps run now, not at the old wake time
    assert failed.error.code == "workflow_version_missing"
    assert done.status is Status.COMPLETED and journal == ["reserve", "pack", "ship"]
    assert runner.clock.now() < wake_at


RESTAMP_LEASE_S = 120.0


def _taken(runner: LocalRunner, eid: str, *, branch: bool) -> list:
    """Take the execution's queued step messages (``branch``: the branch messages) off the queue: lost."""
    taken = [m for m in runner.queue.messages
             if m.body.execution_id == eid and (m.body.branch is not None) == branch]
    for m in taken:
        runner.queue.messages.remove(m)
    return taken


def test_a_branch_written_after_a_doubled_re_drive_of_its_step_keeps_every_item_past_the_re_stamp():
    """Composition seed 303719. A re-drive of a message nobody claimed doubles the next lease, and the re-stamp
    that goes with it reaches that far; a branch that read the execution before it must not write a TTL below
    it, or TTL deletes the branch of a live execution: the fan-out then re-creates it and runs its body again."""
    registry = Registry()
    bodies: list[int] = []
    runner: LocalRunner

    def slow(ctx):
        bodies.append(ctx.item)
        if ctx.item == 7:  # while its body runs, the step's lease runs out again and the sweeper re-drives it
            runner.clock.advance(dt.timedelta(seconds=2 * RESTAMP_LEASE_S + 1))
            runner.sweeper.sweep()
        return {"done": ctx.item}

    @workflow("restamped-fan", registry=registry)
    class RestampedFan:
        steps = [map_(slow, over="items", name="results")]
        step_timeout_s = 60

    settings = EngineSettings(lease_s=RESTAMP_LEASE_S, retention_days=0.001, history_grace_s=0, max_chain_steps=1)
    runner = LocalRunner(registry, settings=settings)
    eid = runner.start("restamped-fan", {"items": [7, 8]})
    runner.step_once()  # the step's delivery fans out: two branch messages on their way
    assert runner.store.load(eid).attempt >= 1
    branch_message, _lost = sorted(_taken(runner, eid, branch=True), key=lambda m: m.body.branch)
    # given: the step's lease ran out with its message lost, and the sweeper re-drove it (one re-send)
    runner.clock.advance(dt.timedelta(seconds=RESTAMP_LEASE_S + 1))
    runner.sweeper.sweep()
    assert _taken(runner, eid, branch=False), "the sweeper re-drove the step"
    assert runner.store.load(eid).resends == 1
    # when: the branch's delivery reads the execution, and its body outlasts the next (doubled) lease
    outcome = runner.engine.process(branch_message.body)
    assert outcome.kind == "branch_succeeded", outcome
    e = runner.store.load(eid)
    assert e.resends == 2 and e.status is Status.RUNNING
    # then: no item of the live execution expires before the re-stamp (the branch's included)
    for b, item in runner.store.branch_items[(eid, 0)].items():
        assert item["expires_at"] >= int(e.stamped_until.timestamp()), (b, item["expires_at"], e.stamped_until)
    # and time deletes nothing the fan-out needs: it fans in, the body having run once
    runner.clock.set(e.stamped_until - dt.timedelta(seconds=1))
    reap(runner.store, runner.clock.now())
    done = runner.run_until_done(eid)
    assert done.status is Status.COMPLETED, done.error
    assert runner.context(eid)["results"] == [{"done": 7}, {"done": 8}]
    assert bodies == [7, 8]
