"""Code-first workflows (``engine_core.durable``): replay, exact values, determinism, the ContextVar,
typed inputs, failures of the function itself. Real Engine and Sweeper on the memory store, manual clock."""

from __future__ import annotations

import contextvars
import datetime as dt
import inspect
import threading
from collections import Counter
from decimal import Decimal
from typing import Any

import pytest
from pydantic import BaseModel, Field, Json, Secret, SecretStr, field_validator

from engine_core import (
    EngineSettings,
    InvalidInputError,
    ManualClock,
    PermanentStepError,
    RegistrationError,
    RetryPolicy,
    Status,
    StepRecord,
    faults,
    workflow,
)
from engine_core.durable import DurableCallError, durable, idempotency_key, new_id, now, sleep, step, wait_for_event
from engine_core.testing import LocalRunner

UTC = dt.timezone.utc


class Crash(BaseException):
    """The process died here."""


@pytest.fixture(autouse=True)
def _no_fault_hook():
    yield
    faults.install(None)


def crash_once_at(point: str, when=lambda info: True) -> None:
    left = {"n": 1}

    def hook(name, info):
        if name == point and left["n"] and when(info):
            left["n"] -= 1
            raise Crash(point)

    faults.install(hook)


def make_runner(registry, **settings) -> LocalRunner:
    clock = ManualClock(dt.datetime(2026, 3, 1, 12, 0, tzinfo=UTC))
    return LocalRunner(registry, clock=clock, settings=EngineSettings(**{"lease_s": 120, **settings}))


def run(runner: LocalRunner, eid: str):
    for _ in range(5_000):
        e = runner.engine.get(eid)
        if e.status.is_terminal:
            return e
        try:
            runner.step_once()
        except Crash:
            pass
    raise AssertionError("execution did not finish")


def records(runner, eid) -> list[StepRecord]:
    return [r for r in runner.history(eid) if isinstance(r, StepRecord)]


def run_one_step(registry, name: str, body) -> tuple[LocalRunner, str, Any]:
    """A function whose one step (``name``) runs ``body`` under a five-attempt policy, run to its end."""
    @durable(name, registry=registry, retry=RetryPolicy(max_attempts=5, base=1))
    def flow(input):
        return step(name, body)

    runner = make_runner(registry)
    eid = runner.start(name)
    return runner, eid, run(runner, eid)


def returned(runner, eid):
    from engine_core import codec

    r = next(r for r in records(runner, eid) if r.kind == "return")
    return codec.decode(r.result_blob)


# -- replay -------------------------------------------------------------------------------------------
def test_durable_step_values_come_back_with_their_exact_types_after_a_crash(registry):
    # given: a step returns a tuple, a set, a datetime, bytes, a Decimal and int keys; the worker dies
    # after the record is written and before the function sees the value
    runs = Counter()
    value = {"pair": (1, 2), "tags": {"a", "b"}, "at": dt.datetime(2026, 1, 2, tzinfo=UTC), "raw": b"\x00\x01",
             "money": Decimal("12.30"), 7: "seven"}
    seen = []

    def fetch():
        runs["fetch"] += 1
        return value

    @durable("types", registry=registry)
    def flow(input):
        got = step("fetch", fetch)
        seen.append(got)
        return {"same": got == value, "pair_is_tuple": isinstance(got["pair"], tuple)}

    runner = make_runner(registry)
    crash_once_at("worker.after_record")
    eid = runner.start("types")

    # when
    e = run(runner, eid)

    # then: the body ran once; the replay returned the recorded value, type for type
    assert e.status is Status.COMPLETED and runs["fetch"] == 1
    assert seen[-1] == value and type(seen[-1]["pair"]) is tuple and type(seen[-1]["tags"]) is set
    assert type(seen[-1]["money"]) is Decimal and 7 in seen[-1]
    assert returned(runner, eid) == {"same": True, "pair_is_tuple": True}


def test_durable_a_value_the_codec_cannot_keep_fails_the_step_at_once_naming_the_path(registry):
    # given
    runs = Counter()

    def build():
        runs["build"] += 1
        return {"ok": 1, "nested": [1, {"handle": threading.Lock()}]}

    # when
    _, _, e = run_one_step(registry, "build", build)

    # then: no retry (the same value would fail again), and the message says where the value is
    assert e.status is Status.FAILED and runs["build"] == 1
    assert e.error.code == "non_serializable_result"
    assert "nested" in e.error.message and "handle" in e.error.message


def test_durable_a_return_value_the_codec_cannot_keep_fails_the_execution_naming_the_return_value(registry):
    # given: a function whose step succeeds and whose return value holds a lock
    @durable("returns_a_lock", registry=registry)
    def flow(input):
        step("fetch", lambda: {"n": 1})
        return {"rows": [1, {"handle": threading.Lock()}]}

    runner = make_runner(registry)
    eid = runner.start("returns_a_lock")

    # when
    e = run(runner, eid)

    # then: the message names the function's return value and where in it, not a step's result
    assert e.status is Status.FAILED and e.error.code == "non_serializable_result"
    assert e.error.message.startswith("return value['rows'][1]['handle'] cannot be stored"), e.error.message
    assert "step result" not in e.error.message


@pytest.mark.parametrize("shape", ["async", "generator"])
def test_durable_a_step_whose_function_is_async_or_yields_fails_at_once_saying_so(registry, shape, recwarn):
    # given: a body whose call returns a coroutine (or a generator) and does none of its work
    runs = Counter()

    async def fetch():
        runs["fetch"] += 1
        return 1

    def rows():
        runs["rows"] += 1
        yield 1

    # when
    runner, eid, e = run_one_step(registry, "load", fetch if shape == "async" else rows)

    # then: failed at its first attempt, naming what it returned and what to do; nothing ran, nothing warned
    assert e.status is Status.FAILED and e.error.code == "non_serializable_result" and not e.error.retryable
    [record] = [r for r in runner.history(eid) if r.name == "load"]
    assert record.attempts == 1
    assert ("async" in e.error.message and "asyncio.run" in e.error.message) if shape == "async" else \
        ("yields" in e.error.message and "return a list" in e.error.message)
    assert runs == Counter() and not [w for w in recwarn if "never awaited" in str(w.message)]


def test_durable_a_generator_function_is_refused_at_registration(registry):
    with pytest.raises(RegistrationError, match="yields; a durable workflow is a plain function"):
        @durable("rows", registry=registry)
        def flow(input):
            yield step("one", lambda: 1)


def test_durable_each_delivery_replays_recorded_steps_without_running_them(registry):
    # given: one step per delivery, so every delivery replays the earlier ones
    runs, tops = Counter(), Counter()

    @durable("chain", registry=registry)
    def flow(input):
        tops["top"] += 1
        a = step("a", lambda: runs.update(["a"]) or 1)
        b = step("b", lambda: runs.update(["b"]) or a + 1)
        return step("c", lambda: runs.update(["c"]) or b + 1)

    runner = make_runner(registry, max_chain_steps=1)
    eid = runner.start("chain")

    # when
    e = run(runner, eid)

    # then: each body once; the function itself ran once per delivery (the code outside steps re-runs)
    assert e.status is Status.COMPLETED and returned(runner, eid) == 3
    assert runs == Counter(a=1, b=1, c=1)
    assert tops["top"] == 3


def test_durable_the_same_name_twice_is_two_positions_by_occurrence(registry):
    # given
    @durable("twice", registry=registry)
    def flow(input):
        return [step("tick", lambda i=i: i) for i in range(3)]

    runner = make_runner(registry, max_chain_steps=1)
    eid = runner.start("twice")

    # when
    e = run(runner, eid)

    # then
    assert e.status is Status.COMPLETED and returned(runner, eid) == [0, 1, 2]
    assert [(r.step_index, r.name) for r in records(runner, eid) if r.kind == "task"] == [(0, "tick"), (1, "tick"), (2, "tick")]


def test_durable_now_and_new_id_are_recorded_and_replayed_unchanged(registry):
    # given: the values are read before a sleep and compared after it, in a later delivery
    seen = []

    @durable("stamps", registry=registry)
    def flow(input):
        at, ident = now(), new_id()
        sleep(minutes=5)
        seen.append((at, ident))
        return {"at": at, "id": ident}

    runner = make_runner(registry)
    eid = runner.start("stamps")

    # when
    e = run(runner, eid)

    # then: the clock moved five minutes, the recorded instant did not
    assert e.status is Status.COMPLETED
    assert seen[-1][0] == dt.datetime(2026, 3, 1, 12, 0, tzinfo=UTC) and len(seen[-1][1]) == 32
    assert returned(runner, eid) == {"at": seen[-1][0], "id": seen[-1][1]}


def test_durable_a_nested_durable_call_reruns_its_non_step_code_unless_wrapped_in_step(registry):
    # given: inner is a durable function; outer calls it directly once and as a step once, and each
    # delivery runs one position (so the replays are many)
    effects = Counter()

    @durable("inner", registry=registry)
    def inner(tag):
        effects[f"inner outside steps ({tag})"] += 1
        return step(f"inner.{tag}", lambda: tag)

    @durable("outer", registry=registry)
    def outer(input):
        direct = inner("direct")
        wrapped = step("wrapped", inner, "wrapped")
        return step("done", lambda: [direct, wrapped])

    runner = make_runner(registry, max_chain_steps=1)
    eid = runner.start("outer")

    # when
    e = run(runner, eid)

    # then: the direct call's non-step code re-ran on every delivery; the wrapped one ran once, as the
    # body of the step "wrapped" (its own step() a plain call inside it)
    assert e.status is Status.COMPLETED and returned(runner, eid) == ["direct", "wrapped"]
    assert effects["inner outside steps (wrapped)"] == 1
    assert effects["inner outside steps (direct)"] == 3
    assert [r.name for r in records(runner, eid) if r.kind == "task"] == ["inner.direct", "wrapped", "done"]


# -- determinism ----------------------------------------------------------------------------------------
def test_durable_a_replay_that_calls_another_step_fails_nondeterministic_replay_naming_both(registry):
    # given: the function decides from a global that changes between deliveries (a deploy, say)
    flag = {"new": False}
    undone = []

    @durable("drift", registry=registry)
    def flow(input):
        step("charge", lambda: "ch-1", compensate=lambda result: undone.append(result))
        if flag["new"]:
            step("refund_policy", lambda: 1)
        sleep(hours=1)
        return step("ship", lambda: "shipped")

    runner = make_runner(registry)
    eid = runner.start("drift")
    for _ in range(10):
        if runner.engine.get(eid).status is Status.SLEEPING:
            break
        runner.step_once()
    assert runner.engine.get(eid).status is Status.SLEEPING
    flag["new"] = True

    # when
    e = run(runner, eid)

    # then: loud, naming what it called and what was recorded; nothing undone, nothing shipped
    assert e.status is Status.FAILED and e.error.code == "nondeterministic_replay"
    assert "position 1" in e.error.message and "step('refund_policy')" in e.error.message
    assert "sleep('sleep')" in e.error.message
    assert "loom redrive" in e.error.message and "@durable(name, version=N)" in e.error.message  # what to do
    assert "--to-version" not in e.error.message  # no redrive moved it: nothing to say of one
    assert undone == [] and "ship" not in [r.name for r in records(runner, eid)]


def test_durable_a_replay_that_returns_before_a_recorded_step_fails_nondeterministic_replay(registry):
    # given
    flag = {"short": False}

    @durable("shrink", registry=registry)
    def flow(input):
        step("a", lambda: 1)
        if flag["short"]:
            return "early"
        sleep(minutes=1)
        return step("b", lambda: 2)

    runner = make_runner(registry)
    eid = runner.start("shrink")
    for _ in range(10):
        if runner.engine.get(eid).status is Status.SLEEPING:
            break
        runner.step_once()
    flag["short"] = True

    # when
    e = run(runner, eid)

    # then
    assert e.status is Status.FAILED and e.error.code == "nondeterministic_replay"
    assert "return" in e.error.message and "sleep('sleep')" in e.error.message


def test_durable_a_mismatch_the_function_swallows_still_fails_the_execution(registry):
    # given: the function catches everything around its calls
    flag = {"new": False}

    @durable("swallow", registry=registry)
    def flow(input):
        try:
            step("b" if flag["new"] else "a", lambda: 1)
        except BaseException:  # noqa: BLE001 - what a careless function does
            pass
        sleep(minutes=1)
        return "done"

    runner = make_runner(registry)
    eid = runner.start("swallow")
    for _ in range(10):
        if runner.engine.get(eid).status is Status.SLEEPING:
            break
        runner.step_once()
    flag["new"] = True

    # when
    e = run(runner, eid)

    # then
    assert e.status is Status.FAILED and e.error.code == "nondeterministic_replay"


# -- the ContextVar --------------------------------------------------------------------------------------
def test_durable_a_call_outside_any_execution_is_refused_with_what_to_do():
    # when
    with pytest.raises(DurableCallError) as refused:
        step("fetch", lambda: 1)

    # then
    assert "outside a Loom execution" in str(refused.value) and "LocalRunner" in str(refused.value)


@pytest.mark.parametrize("call", ["sleep", "wait_for_event"])
def test_durable_a_sleep_or_wait_inside_a_step_body_fails_the_step_at_once_saying_where_to_put_it(registry, call):
    # given: a body that would block its invocation; the step's policy allows five attempts
    runs = Counter()

    def body():
        runs["body"] += 1
        if call == "sleep":
            sleep(60)
        else:
            wait_for_event("approved", timeout=60)
        return 1

    # when
    _, _, e = run_one_step(registry, "blocks", body)

    # then: one attempt (a retry would make the same call), and the message says what to do instead
    assert e.status is Status.FAILED and runs["body"] == 1 and not e.error.retryable
    assert e.error.message.startswith(call) and "inside a step body would block the step" in e.error.message
    assert "between steps" in e.error.message


def test_durable_a_thread_started_inside_the_function_has_no_execution(registry):
    # given
    errors = []

    @durable("threads", registry=registry)
    def flow(input):
        def worker():
            try:
                step("in_thread", lambda: 1)
            except DurableCallError as exc:
                errors.append(str(exc))

        t = threading.Thread(target=worker)
        t.start()
        t.join()
        return step("in_function", lambda: 2)

    runner = make_runner(registry)
    eid = runner.start("threads")

    # when
    e = run(runner, eid)

    # then
    assert e.status is Status.COMPLETED and returned(runner, eid) == 2


@pytest.mark.parametrize("how", ["asyncio.to_thread", "copy_context().run", "sleep in a context-copied thread"])
def test_durable_a_thread_given_the_functions_context_is_refused_not_read_as_a_missing_history(registry, how):
    # given: a thread that carries the run's context (asyncio.to_thread copies it; so does copy_context().run)
    import asyncio
    from engine_core.durable import sleep as durable_sleep

    calls = Counter()

    def in_thread():
        calls["in_thread"] += 1
        if how.startswith("sleep"):
            return durable_sleep(5)
        return step("s1", lambda: 1)

    @durable("context_threads", registry=registry)
    def flow(input):
        step("s0", lambda: 0)
        if how == "asyncio.to_thread":
            return asyncio.run(asyncio.to_thread(in_thread))
        ctx = contextvars.copy_context()
        out: list = []
        t = threading.Thread(target=lambda: out.append(_caught(lambda: ctx.run(in_thread))))
        t.start()
        t.join()
        raise out[0]

    runner = make_runner(registry)
    eid = runner.start("context_threads")

    # when
    e = run(runner, eid)

    # then: the function's own mistake (workflow_error naming the thread), not corrupt_state with a history
    # said to be missing records
    assert e.status is Status.FAILED and e.error.code == "workflow_error", e.error
    assert "from another thread than the function's" in e.error.message and "corrupt" not in e.error.message
    assert calls["in_thread"] == 1  # the refusal is the function's: not retried


def _caught(fn):
    try:
        fn()
    except BaseException as exc:  # noqa: BLE001 - handed back to the function's thread to raise there
        return exc
    return AssertionError("the call in the thread was not refused")
    assert errors and "its own thread" in errors[0]


# -- typed inputs ------------------------------------------------------------------------------------------
class Order(BaseModel):
    order_id: str = Field(min_length=2)
    amount_cents: int = Field(gt=0)


def test_durable_typed_input_is_refused_at_start_and_the_function_gets_the_model(registry):
    # given
    got = []

    @durable("typed", registry=registry)
    def flow(order: Order):
        got.append(order)
        return step("charge", lambda: order.amount_cents)

    runner = make_runner(registry)

    # when
    with pytest.raises(InvalidInputError) as refused:
        runner.start("typed", {"order_id": "x", "amount_cents": 0})
    eid = runner.start("typed", {"order_id": "o-1", "amount_cents": "250"})
    e = run(runner, eid)

    # then
    assert {p["field"] for p in refused.value.problems} == {"order_id", "amount_cents"}
    assert runner.store.calls.get("create", 0) == 1
    assert e.status is Status.COMPLETED and isinstance(got[0], Order) and returned(runner, eid) == 250


class Scaled(BaseModel):
    cents: int
    name: str = "x"

    @field_validator("cents")
    @classmethod
    def _to_cents(cls, v: int) -> int:  # not idempotent: runs again on a rebuild
        return v * 100


class Stable(BaseModel):
    cents: int
    name: str

    @field_validator("name")
    @classmethod
    def _strip(cls, v: str) -> str:  # idempotent: the same value when it runs again
        return v.strip()


class WithJson(BaseModel):
    payload: Json[dict[str, int]]


class WithSecret(BaseModel):
    user: str
    password: SecretStr
    pins: list[Secret[int]] = []


@pytest.mark.parametrize("model,input,field", [
    (Scaled, {"cents": 5}, "cents"),
    (WithJson, {"payload": '{"a": 1}'}, "payload"),
    (WithSecret, {"user": "u", "password": "hunter2"}, "password"),
], ids=["validator that changes its value again", "Json field", "secret"])
def test_durable_a_typed_input_the_function_would_get_otherwise_than_validated_is_refused_at_start(
        registry, model, input, field):
    # given: a function taking the model; each delivery builds its argument from the stored input
    runs = Counter()

    @durable("rebuilt", registry=registry, input_model=model)
    def flow(value):
        runs["function"] += 1
        return step("use", lambda: 1)

    runner = make_runner(registry)

    # when
    with pytest.raises(InvalidInputError) as refused:
        runner.start("rebuilt", input)

    # then: invalid_input naming the field and what to do; nothing written, nothing run
    assert [p["field"] for p in refused.value.problems] == [field]
    assert "cannot be kept" in str(refused.value) and field in str(refused.value)
    assert runner.store.calls.get("create", 0) == 0 and runs["function"] == 0


def test_durable_a_typed_input_whose_validators_give_the_same_value_again_is_taken_as_validated(registry):
    # given
    got = []

    @durable("stable", registry=registry)
    def flow(value: Stable):
        got.append(value)
        return step("use", lambda: value.name)

    runner = make_runner(registry)

    # when
    eid = runner.start("stable", {"cents": "7", "name": "  ada "})
    e = run(runner, eid)

    # then
    assert e.status is Status.COMPLETED and returned(runner, eid) == "ada"
    assert got and all(v == Stable(cents=7, name="ada") for v in got)


def test_a_step_lists_input_with_a_secret_is_refused_at_start_not_stored_as_its_mask(registry):
    # given
    from engine_core import step as step_list_step
    from engine_core import workflow

    @workflow("secretive", registry=registry)
    class Secretive:
        input_model = WithSecret
        steps = [step_list_step(lambda ctx: {"seen": ctx["password"]}, name="see")]

    runner = make_runner(registry)

    # when
    with pytest.raises(InvalidInputError) as refused:
        runner.start("secretive", {"user": "u", "password": "hunter2", "pins": [1234]})

    # then
    assert [p["field"] for p in refused.value.problems] == ["password", "pins.0"]
    assert "reference to the secret" in str(refused.value) and runner.store.calls.get("create", 0) == 0


# -- the function itself fails --------------------------------------------------------------------------------
def test_durable_an_error_outside_any_step_fails_the_execution_and_undoes_what_completed(registry):
    # given
    undone = []

    @durable("buggy", registry=registry)
    def flow(input):
        charge = step("charge", lambda amount: f"ch-{amount}", input["amount"],
                      compensate=lambda result, amount: undone.append((result, amount)))
        return charge["no such key"]

    runner = make_runner(registry)
    eid = runner.start("buggy", {"amount": 5})

    # when
    e = run(runner, eid)

    # then: FAILED with the error and where it happened; the charge refunded with its result and arguments
    assert e.status is Status.FAILED and e.compensated
    assert e.error.code == "workflow_error" and "TypeError" in e.error.message and "test_durable_basics.py" in e.error.message
    assert undone == [("ch-5", 5)]


def test_durable_a_durable_call_that_refuses_its_arguments_names_the_workflows_line_not_loom_s(registry):
    # given: step() handed something that is not a function, on a line of this file
    @durable("misused", registry=registry)
    def flow(input):
        return step("fetch", 5)

    line = flow.__code__.co_firstlineno + 2
    runner = make_runner(registry)
    eid = runner.start("misused")

    # when
    e = run(runner, eid)

    # then: the message says what was wrong and where the call is
    assert e.status is Status.FAILED and e.error.code == "workflow_error"
    assert "the second argument must be the function to run" in e.error.message
    assert f"test_durable_basics.py:{line}). Fix the function and deploy it" in e.error.message, e.error.message
    assert e.error.message.endswith(f"`loom redrive {eid}`: the replay takes every recorded result and goes on from here")


def test_durable_a_step_and_its_compensation_get_every_keyword_argument_even_one_named_ctx(registry):
    # given: a keyword argument named like what runs a body (ctx), and a step() inside the body
    seen: list = []
    undone: list = []

    def charge(amount, *, ctx):
        seen.append(("charge", amount, ctx, step("inner", lambda: "plain")))
        return f"ch-{amount}"

    @durable("kw", registry=registry)
    def flow(input):
        step("charge", charge, 5, ctx="c", compensate=lambda result, amount, *, ctx: undone.append((result, amount, ctx)))
        return step("fail", lambda: (_ for _ in ()).throw(PermanentStepError("no")))

    runner = make_runner(registry)
    eid = runner.start("kw")

    # when
    e = run(runner, eid)

    # then: the body saw its arguments, a step() inside it was a plain call (no position of its own)
    assert seen == [("charge", 5, "c", "plain")]
    assert undone == [("ch-5", 5, "c")] and e.status is Status.FAILED and e.compensated
    assert [r.name for r in records(runner, eid) if r.kind == "task"] == ["charge", "fail"]


# -- registration ---------------------------------------------------------------------------------------------
def test_durable_registration_refuses_what_cannot_run(registry):
    with pytest.raises(RegistrationError, match="exactly one argument"):
        durable("two_args", registry=registry)(lambda a, b: None)
    with pytest.raises(RegistrationError, match="async"):
        async def coro(input):
            return None
        durable("async_one", registry=registry)(coro)
    with pytest.raises(RegistrationError, match="workflow name"):
        durable("bad name!", registry=registry)


def test_durable_and_step_list_workflows_live_in_one_registry_and_run_side_by_side(registry):
    # given
    def mark(ctx):
        return {"listed": True}

    @workflow("listed", registry=registry)
    class Listed:
        steps = [mark]

    @durable("coded", registry=registry)
    def coded(input):
        return step("one", lambda: "coded")

    runner = make_runner(registry)

    # when
    a, b = runner.start("listed"), runner.start("coded")
    ea, eb = run(runner, a), run(runner, b)

    # then
    assert ea.status is eb.status is Status.COMPLETED
    assert runner.context(a)["listed"] is True and returned(runner, b) == "coded"
    assert registry.get("coded").code is not None and registry.get("listed").code is None


# -- a budget no delivery can fit ------------------------------------------------------------------------------
def test_durable_a_call_whose_timeout_cannot_fit_the_worker_fails_at_once_naming_both_and_undoes_what_ran(registry):
    from engine_core.durable import map as durable_map

    ran: list[Any] = []

    @durable("too_long", registry=registry)
    def flow(input):
        step("reserve", lambda: ran.append("reserve") or "r-1", compensate=lambda result: ran.append(("release", result)))
        if input.get("fan"):
            return durable_map("each", lambda x: ran.append(x), [1, 2], timeout_s=20)
        return step("quick", lambda: ran.append("quick"), timeout_s=20)

    for fan in (False, True):
        ran.clear()
        runner = make_runner(registry, function_timeout_s=12)
        eid = runner.start("too_long", {"fan": fan})
        e = run(runner, eid)
        # Released for redelivery for ever before: every delivery had too little time for a 20 s budget.
        assert e.status is Status.FAILED, e
        assert e.error.code == "step_timeout_too_long" and e.error.step_name == ("each" if fan else "quick")
        assert "20 s budget" in e.error.message and "12 s (LOOM_FUNCTION_TIMEOUT_S)" in e.error.message
        assert ran == ["reserve", ("release", "r-1")]  # the call never ran; what did is undone

    # The same call fits a worker whose timeout has room for it.
    runner = make_runner(registry, function_timeout_s=30)
    eid = runner.start("too_long", {})
    assert run(runner, eid).status is Status.COMPLETED


@pytest.mark.parametrize("call, code, advice", [
    ("map over 1001 items", "too_many_items", "Split the items over several map steps"),
    ("timeout_s=5000", "step_timeout_too_long", "Lower it (to at most the worker's timeout"),
])
def test_durable_a_call_no_delivery_could_run_fails_with_the_step_lists_code_and_a_fixed_redrive_goes_on(
        registry, call, code, advice):
    from engine_core.durable import map as durable_map

    fixed = {"yes": False}

    @durable("refused", registry=registry)
    def flow(input):
        first = step("first", lambda: 1)
        if call.startswith("map"):
            items = list(range(10 if fixed["yes"] else 1001))
            return first + sum(durable_map("each", lambda x: x, items))
        return first + step("slow", lambda: 2, timeout_s=60 if fixed["yes"] else 5000)

    line = flow.__code__.co_firstlineno + (5 if call.startswith("map") else 6)
    runner = make_runner(registry)
    eid = runner.start("refused", {})
    e = run(runner, eid)

    # then: the code a step list's step with it fails with, the line, what to do; nothing of it ran
    assert (e.status, e.error.code, e.current_step) == (Status.FAILED, code, 1), e.error
    assert f"test_durable_basics.py:{line}). {advice}" in e.error.message, e.error.message
    # and once the code is fixed, a redrive goes on from that call
    fixed["yes"] = True
    runner.engine.operator.redrive(eid, "ops")
    assert run(runner, eid).status is Status.COMPLETED and runner.result(eid) == (1 + 45 if call.startswith("map") else 3)


def test_durable_check_fits_refuses_a_step_timeout_or_a_compensation_timeout_that_cannot_fit(registry):
    from engine_core import ConfigurationError, check_fits
    from engine_core import step as list_step
    from engine_core.registry import build_workflow

    @durable("slow_default", registry=registry, step_timeout_s=20)
    def flow(input):
        return step("quick", lambda: 1)

    with pytest.raises(ConfigurationError, match=r"'slow_default' \(its step_timeout_s\) has a 20 s budget"):
        check_fits(registry, EngineSettings(function_timeout_s=12))
    check_fits(registry, EngineSettings(function_timeout_s=24))

    registry.register(build_workflow("slow_undo", [list_step(lambda ctx: {}, name="book", timeout_s=5,
                                                       compensate=list_step(lambda ctx: {}, timeout_s=40))]))
    with pytest.raises(ConfigurationError, match="'slow_undo' the compensation of step 'book' has a 40 s budget"):
        check_fits(registry, EngineSettings(function_timeout_s=30))


def test_durable_a_workflow_function_calling_sys_exit_fails_the_execution_and_the_worker_goes_on(registry):
    # given: a function that calls sys.exit(4) after a compensable step (outside any step)
    import sys

    undone = []

    @durable("exits", registry=registry)
    def exits(order):
        step("charge", lambda: "ch-1", compensate=lambda result: undone.append(result))
        sys.exit(4)

    runner = make_runner(registry)
    eid = runner.start("exits", {})
    # when: driven to the end (a SystemExit let through would end this test's process, as it ended loom dev)
    e = run(runner, eid)
    # then: the execution failed with what happened and where, its charge undone; nothing else ended
    assert e.status is Status.FAILED and e.compensated and undone == ["ch-1"], (e.status, undone)
    assert e.error.code == "workflow_error" and e.error.message.startswith(
        "SystemExit: 4; the workflow function called sys.exit() (at "), e.error.message
    assert "test_durable_basics.py" in e.error.message and "Raise an exception instead" in e.error.message


@pytest.mark.parametrize("where", ["step", "compensation"])
def test_durable_a_function_that_cannot_take_the_arguments_its_step_passes_fails_at_once_naming_the_step(registry, where):
    # given: step() passes one argument too many (or the undo takes no result)
    runs = Counter()

    def one(a):
        runs["one"] += 1
        return a

    def undo_without_result():
        runs["undo"] += 1

    def inner_mistake(a):  # a TypeError from inside the function stays the body's own, retried
        runs["inner"] += 1
        return one(a, 2)

    @durable("misfit", registry=registry)
    def flow(input):
        if where == "step":
            return step("x", one, 1, 2)
        step("y", lambda: 1, compensate=undo_without_result)
        step("z", inner_mistake, 1)

    runner = make_runner(registry)
    eid = runner.start("misfit")

    # when
    e = run(runner, eid)

    # then: no retry of a call that can never fit; the message names the step, the function and its line
    if where == "step":
        assert e.status is Status.FAILED and e.error.code == "permanent_error" and runs["one"] == 0
        assert e.error.message.startswith("step('x'): its function 'test_durable_a_function_that_cannot")
        assert "one' (defined at " in e.error.message and "_current.py" not in e.error.message
    else:
        assert runs["inner"] == 3 and e.error.code == "step_error" and "test_durable_basics.py" in e.error.message
        assert e.status is Status.COMPENSATION_FAILED and runs["undo"] == 0
        assert e.compensation_error.code == "permanent_error"
        assert "the compensation of step 'y'" in e.compensation_error.message
        assert "cannot take its result and the step's arguments" in e.compensation_error.message


def test_durable_step_takes_its_own_keywords_and_hands_every_other_to_the_function(registry):
    # given: a step with a retry policy and a timeout of its own, and keywords for its function, which fails
    # twice: the step's two attempts fail it (the workflow's default policy, three attempts, would complete it)
    calls: list = []

    def charge(amount, *, currency):
        calls.append((amount, currency))
        if len(calls) <= 2:
            raise RuntimeError("card network busy")
        return f"{amount} {currency}"

    @durable("keywords", registry=registry)
    def flow(input):
        return step("charge", charge, 5, currency="EUR", retry=RetryPolicy(max_attempts=2, base=1), timeout_s=30)

    runner = make_runner(registry)
    eid = runner.start("keywords")

    # when
    e = run(runner, eid)

    # then: the function got only its own keywords, twice (the step's two attempts), and nothing more ran
    assert e.status is Status.FAILED and "card network busy" in e.error.message, e.error
    assert calls == [(5, "EUR"), (5, "EUR")]
    # and help(), editors and inspect show step()'s keywords, though it reads them out of **kwargs
    params = inspect.signature(step).parameters
    assert [p for p in params if params[p].kind is inspect.Parameter.KEYWORD_ONLY] == ["retry", "timeout_s",
                                                                                        "compensate"]


def test_durable_a_thread_a_step_body_starts_with_its_context_makes_plain_calls_and_knows_the_step(registry):
    # given: a step body that hands work to a thread carrying its context, where step() and idempotency_key()
    # are called; and, after the body, the function's own step()
    inner_runs: list = []

    def inner():
        inner_runs.append(1)
        return "inner"

    def body():
        ctx, out = contextvars.copy_context(), {}
        worker = threading.Thread(target=lambda: out.update(v=ctx.run(lambda: [step("nested", inner),
                                                                                 idempotency_key()])))
        worker.start()
        worker.join()
        return out["v"]

    @durable("threaded-body", registry=registry)
    def flow(input):
        return [step("outer", body), step("after", lambda: "after")]

    runner = make_runner(registry)
    eid = runner.start("threaded-body")

    # when
    e = run(runner, eid)

    # then: inside the body the nested step() was a plain call and the key was the body's; the next step() was a
    # position of its own again
    assert e.status is Status.COMPLETED, e.error
    assert returned(runner, eid) == [["inner", f"{eid}:0"], "after"]
    assert inner_runs == [1]
    assert [r.name for r in records(runner, eid) if r.kind == "task"] == ["outer", "after"]
