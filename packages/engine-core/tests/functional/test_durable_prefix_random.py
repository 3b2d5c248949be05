"""Code-first executions handed between worker processes that keep what they read (``durable/prefix.py``),
under duplicated and lost messages, process deaths at the engine's fault points (a dead process loses
what it kept), operator wakes and a redrive after a failure: every replay must see each position's
recorded value, and each execution must return what its steps recorded. Seeded, so a failure replays."""

from __future__ import annotations

import datetime as dt
import random

import pytest

from engine_core import EngineSettings, ManualClock, PermanentStepError, RetryPolicy, Status, codec, faults
from engine_core.durable import durable, parallel, sleep, step
from engine_core.testing import LocalRunner

UTC = dt.timezone.utc
POINTS = ["worker.after_claim", "step.enter", "step.return", "worker.after_record", "worker.after_checkpoint",
          "worker.after_enqueue"]
STEPS = 7


class Crash(BaseException):
    """The process died here."""


@pytest.fixture(autouse=True)
def _no_fault_hook():
    yield
    faults.install(None)


def flow(registry, seen: list, fail: dict, flaky: dict) -> None:
    def make(i: int):
        def body():
            if fail.get(i):
                fail[i] -= 1
                raise PermanentStepError(f"step {i} fails for good")
            if flaky.get(i):
                flaky[i] -= 1
                raise RuntimeError(f"step {i} fails, to be retried")
            return {"n": i, "items": [i, {"deep": i}]}
        return body

    @durable("random", registry=registry, retry=RetryPolicy(max_attempts=4, base=1, max_delay=2))
    def run(input):
        out = []
        for i in range(STEPS):
            value = step(f"s{i}", make(i))
            seen.append((i, codec.copy_value(value)))
            value["items"][1]["deep"] = -1  # changed in place: no later replay may see it
            out.append(value["n"])
            if i == 2:
                sleep(minutes=5)
            if i == 4:
                pair = parallel("pair", lambda: {"p": 1}, lambda: {"p": 2})
                seen.append(("pair", codec.copy_value(pair)))
                pair[0]["p"] = -1
        return out


@pytest.mark.parametrize("seed", range(120))
def test_durable_kept_histories_never_change_what_a_replay_sees(registry, seed):
    rng = random.Random(seed)
    seen: list = []
    fail = {rng.randrange(STEPS): 1} if rng.random() < 0.4 else {}
    flaky = {i: rng.choice([0, 0, 1, 2]) for i in range(STEPS)}
    flow(registry, seen, fail, flaky)
    clock = ManualClock(dt.datetime(2026, 3, 1, 12, 0, tzinfo=UTC))
    settings = EngineSettings(lease_s=120, max_chain_steps=rng.choice([1, 1, 2, 3]))
    first = LocalRunner(registry, clock=clock, settings=settings)
    first.queue.duplicate_rate, first.queue.drop_rate = rng.choice([0.0, 0.3]), rng.choice([0.0, 0.1])
    runners = [first] + [LocalRunner(registry, clock=clock, settings=settings, store=first.store, queue=first.queue)
                         for _ in range(rng.choice([0, 1, 2]))]
    crashes = {"left": rng.choice([0, 1, 3])}

    def hook(name, info):
        if name in POINTS and crashes["left"] and rng.random() < 0.05:
            crashes["left"] -= 1
            raise Crash(name)

    faults.install(hook)
    eid = first.start("random", {})
    redrives = 0
    for _ in range(5_000):
        e = first.engine.get(eid)
        if e.status is Status.FAILED and redrives < 6:  # the planted failure, or retries used up by crashes
            assert e.error is not None and e.error.code in ("permanent_error", "step_error", "attempts_exhausted"), e.error
            first.engine.operator.redrive(eid, "ops")
            redrives += 1
            continue
        if e.status.is_terminal:
            break
        if e.status is Status.SLEEPING and e.next_wake_at > first.clock.now() and rng.random() < 0.3:
            first.engine.operator.wake(eid, "ops")  # (one already due is refused: nothing to skip)
        runner = rng.choice(runners)
        try:
            runner.step_once()
        except Crash:
            runner.engine.prefixes.clear()  # the process died with what it kept
    faults.install(None)

    # then
    e = first.engine.get(eid)
    assert e.status is Status.COMPLETED, (e.status, e.error)
    assert first.result(eid) == list(range(STEPS))
    for position, value in seen:
        if position == "pair":
            assert value == [{"p": 1}, {"p": 2}]
        else:
            assert value == {"n": position, "items": [position, {"deep": position}]}
