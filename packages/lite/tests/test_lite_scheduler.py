"""The one-process runtime's schedules, on a manual clock: each firing at its time through the control plane's own
firing, no back-fill of what passed while no runtime ran, one firing for a stretch the process missed, and a
firing whose store write failed tried again at the next tick."""

from __future__ import annotations

import datetime as dt
import json
import logging
import urllib.request

import pytest

from engine_core import ManualClock, Registry
from engine_core.clock import format_ts
from engine_core.durable import durable, step
from engine_core.schedules.config import Schedules
from loom_lite import LiteConfig, LiteRuntime
from loom_lite.config import lite_settings

T0 = dt.datetime(2026, 12, 6, 9, 0, tzinfo=dt.timezone.utc)
REGISTRY = Registry()


@durable("report", registry=REGISTRY)
def report(input):
    return step("count", len, input.get("scope", ""))


def runtime_at(tmp_path, clock: ManualClock, *schedules: dict) -> LiteRuntime:
    config = LiteConfig(db=tmp_path / "loom.db", record=False, schedules=Schedules.parse(json.dumps(list(schedules))),
                        settings=lite_settings({"LOOM_FUNCTION_TIMEOUT_S": "5"}))
    return LiteRuntime(config, REGISTRY, clock=clock)


EVERY_MINUTE = {"name": "every-minute", "workflow": "report", "expression": "rate(1 minute)", "overlap": "allow",
                "input": {"scope": "all"}}


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(T0)


def test_a_schedule_fires_at_each_of_its_times_and_not_before(tmp_path, clock):
    with runtime_at(tmp_path, clock, EVERY_MINUTE) as runtime:
        # when / then: nothing before its first time
        clock.advance(seconds=59)
        assert runtime.scheduler.tick() == [] and 0 < runtime.scheduler.wait_s() <= 1
        # then: once at it, started by the schedule with its input, and not again until the next time
        clock.advance(seconds=1)
        [first] = runtime.scheduler.tick()
        assert (first.outcome, first.scheduled_at) == ("started", T0 + dt.timedelta(minutes=1)), first
        e = runtime.engine.state(first.execution_id).execution
        assert e.workflow == "report" and e.started_by == "schedule:every-minute"
        clock.advance(seconds=30)
        assert runtime.scheduler.tick() == []
        clock.advance(seconds=30)
        [second] = runtime.scheduler.tick()
        assert second.scheduled_at == T0 + dt.timedelta(minutes=2) and second.execution_id != first.execution_id
        assert runtime.engine.store.get_schedule("every-minute").execution_id == second.execution_id


def test_the_api_lists_a_rates_next_firing_before_its_first_and_after_it(tmp_path, clock):
    # given: a runtime serving its API, a rate schedule that has never fired
    with runtime_at(tmp_path, clock, EVERY_MINUTE).start(sweeper=False, scheduler=False) as runtime:
        def listed() -> dict:
            with urllib.request.urlopen(f"{runtime.url}/schedules", timeout=10) as reply:
                return {s["name"]: s for s in json.loads(reply.read())["schedules"]}["every-minute"]

        # when / then: the firing this process counts toward (on AWS a rate shows none before its first)
        before = listed()
        assert before["next_firing"] == format_ts(T0 + dt.timedelta(minutes=1)) and before["last_firing"] is None
        # after it fires: the next one, counted from the firing the store recorded
        clock.advance(seconds=60)
        [fired] = runtime.scheduler.tick()
        after = listed()
        assert after["last_firing"]["scheduled_at"] == format_ts(fired.scheduled_at)
        assert after["next_firing"] == format_ts(T0 + dt.timedelta(minutes=2)), after


def test_a_stretch_the_process_missed_fires_once_for_its_latest_time(tmp_path, clock, caplog):
    with runtime_at(tmp_path, clock, EVERY_MINUTE) as runtime:
        # given: five firing times pass while the process is asleep
        clock.advance(minutes=5, seconds=20)
        # when
        with caplog.at_level(logging.WARNING, logger="loom_lite"):
            fired = runtime.scheduler.tick()
        # then: the latest alone fires, and the log says how many were missed
        assert [(f.outcome, f.scheduled_at) for f in fired] == [("started", T0 + dt.timedelta(minutes=5))]
        assert any("4 firing(s)" in r.getMessage() and "every-minute" in r.getMessage() for r in caplog.records)


def test_a_restarted_runtime_does_not_back_fill_what_passed_while_none_ran(tmp_path, clock):
    # given: a runtime fired the schedule at 09:01, then stopped
    with runtime_at(tmp_path, clock, EVERY_MINUTE) as first:
        clock.advance(minutes=1)
        assert [f.outcome for f in first.scheduler.tick()] == ["started"]
    # when: another starts on the file at 09:10
    clock.advance(minutes=9)
    with runtime_at(tmp_path, clock, EVERY_MINUTE) as second:
        # then: nothing for 09:02-09:10; the next firing, counted from the last recorded one, is 09:11
        assert second.scheduler.tick() == []
        assert second.scheduler.next_firing("every-minute") == T0 + dt.timedelta(minutes=11)
        clock.advance(minutes=1)
        [fired] = second.scheduler.tick()
        assert fired.scheduled_at == T0 + dt.timedelta(minutes=11)


def test_a_firing_whose_store_write_failed_is_tried_again_at_the_next_tick(tmp_path, clock, monkeypatch):
    import loom_lite.scheduler as scheduler

    real, calls = scheduler.fire, []

    def failing_once(*args, **kwargs):
        calls.append(args[3])
        if len(calls) == 1:
            raise OSError("disk I/O error")
        return real(*args, **kwargs)

    monkeypatch.setattr(scheduler, "fire", failing_once)
    with runtime_at(tmp_path, clock, EVERY_MINUTE) as runtime:
        clock.advance(minutes=1)
        # when: the first try fails, the next tick tries the same firing
        assert runtime.scheduler.tick() == []
        [fired] = runtime.scheduler.tick()
    # then: one execution for that time
    assert calls == [T0 + dt.timedelta(minutes=1)] * 2 and fired.outcome == "started"


def test_a_disabled_schedule_never_fires_and_a_runtime_without_schedules_runs_no_scheduler(tmp_path, clock):
    off = {**EVERY_MINUTE, "enabled": False}
    with runtime_at(tmp_path, clock, off) as runtime:
        clock.advance(minutes=3)
        assert runtime.scheduler.tick() == [] and runtime.engine.store.get_schedule("every-minute") is None
    with runtime_at(tmp_path, clock) as plain:
        assert plain.scheduler is None


def test_loom_dev_says_at_start_which_schedules_it_fires(tmp_path, monkeypatch, capsys):
    from loom_lite.cli import main as loom_dev

    monkeypatch.setenv("LOOM_STATE_FILE", str(tmp_path / "state" / "local.json"))
    monkeypatch.setenv("LOOM_SCHEDULES", json.dumps([EVERY_MINUTE, {**EVERY_MINUTE, "name": "paused", "enabled": False}]))
    monkeypatch.setattr(LiteRuntime, "run_worker", lambda self: None)  # start, say what it says, stop
    flows = tmp_path / "flows.py"
    flows.write_text("from engine_core import Registry\nfrom engine_core.durable import durable, step\n"
                     "registry = Registry()\n@durable('report', registry=registry)\ndef report(input):\n"
                     "    return step('count', dict)\n")
    # when
    assert loom_dev([str(flows), "--no-entry-points", "--db", str(tmp_path / "loom.db"), "--port", "0", "--quiet"]) == 0
    # then
    err = capsys.readouterr().err
    assert ("loom dev: firing 2 schedule(s) of LOOM_SCHEDULES while it runs: every-minute (rate(1 minute)), paused "
            "(rate(1 minute), disabled)") in err, err
