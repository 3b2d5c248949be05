"""Small pure pieces: backoff, sharding, timestamps, settings, the public surface, boto3-free import."""

from __future__ import annotations

import datetime as dt
import math
import re
import subprocess
import sys
from pathlib import Path

import pytest

import engine_core
from engine_core import ConfigurationError, EngineSettings, RetryPolicy
from engine_core.clock import ManualClock, format_ts, parse_ts
from engine_core.retries import backoff_s
from engine_core.sharding import shard_of

UTC = dt.timezone.utc


def test_backoff_grows_exponentially_up_to_the_ceiling():
    policy = RetryPolicy(base=2, max_delay=900, jitter=False)
    assert [backoff_s(policy, n) for n in range(1, 12)] == [2, 4, 8, 16, 32, 64, 128, 256, 512, 900, 900]


def test_backoff_jitter_stays_in_the_upper_half_and_is_deterministic():
    policy = RetryPolicy(base=10, max_delay=10_000)
    delays = [backoff_s(policy, 3, seed=f"e{i}") for i in range(200)]
    assert all(20 <= d <= 40 for d in delays)
    assert len({round(d, 6) for d in delays}) > 150  # spread, not lockstep
    assert backoff_s(policy, 3, seed="e1") == backoff_s(policy, 3, seed="e1")


def test_backoff_with_huge_attempt_numbers_does_not_overflow():
    assert backoff_s(RetryPolicy(base=1, max_delay=60, multiplier=10, jitter=False), 100_000) == 60
    # a multiplier whose 64th power is past a float: the ceiling, not an OverflowError after the body ran
    assert backoff_s(RetryPolicy(base=1, max_delay=60, multiplier=1e10, jitter=False), 40) == 60


@pytest.mark.parametrize("ceiling", [math.inf, 367 * 86400.0])
def test_a_retry_policy_whose_ceiling_is_past_the_longest_sleep_is_refused_saying_the_limit(ceiling):
    # before: accepted, and a backoff past the last date the clock can add ended every delivery of the step in an
    # error after its body ran (the message redelivered at once, the body run again, no backoff at all)
    with pytest.raises(ValueError, match=r"max_delay .* must be at most 31,622,400 s \(366 days"):
        RetryPolicy(max_attempts=60, base=1, max_delay=ceiling)
    assert RetryPolicy(base=1, max_delay=366 * 86400.0).max_delay == 366 * 86400


def test_shard_is_stable_and_spreads():
    ids = [f"00000000-0000-4000-8000-{n:012d}" for n in range(4000)]
    shards = [shard_of(i, 16) for i in ids]
    assert shards == [shard_of(i, 16) for i in ids]
    counts = [shards.count(s) for s in range(16)]
    assert min(counts) > 180 and max(counts) < 320
    # pinned: a different answer would strand due items in existing tables
    assert shard_of("00000000-0000-4000-8000-000000000001", 16) == shard_of("00000000-0000-4000-8000-000000000001", 16)
    assert [shard_of(ids[i], 4) for i in range(3)] == _pinned_shards()


def _pinned_shards():
    # computed once with sha256; must never change for existing tables
    import hashlib
    return [int.from_bytes(hashlib.sha256(f"00000000-0000-4000-8000-{n:012d}".encode()).digest()[:8], "big") % 4 for n in range(3)]


def test_shard_of_runs_the_same_in_another_process():
    code = "from engine_core.sharding import shard_of; print(shard_of('abc', 7))"
    out = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout for _ in range(2)}
    assert out == {f"{shard_of('abc', 7)}\n"}


def test_timestamps_are_fixed_width_and_sort_as_time():
    times = [dt.datetime(2026, 1, 1, tzinfo=UTC) + dt.timedelta(seconds=s) for s in (0, 0.000001, 9, 10, 86400 * 400)]
    texts = [format_ts(t) for t in times]
    assert len({len(t) for t in texts}) == 1
    assert sorted(texts) == texts
    assert [parse_ts(t) for t in texts] == times
    assert format_ts(dt.datetime(2026, 1, 1, 5, tzinfo=dt.timezone(dt.timedelta(hours=5)))) == "2026-01-01T00:00:00.000000Z"
    with pytest.raises(ValueError, match="timezone-aware"):
        format_ts(dt.datetime(2026, 1, 1))


def test_a_manual_clock_moves_by_numbers_or_a_timedelta_and_never_back():
    # given
    clock = ManualClock(dt.datetime(2026, 3, 1, tzinfo=dt.timezone.utc))

    # when
    clock.advance(30)
    clock.advance(dt.timedelta(minutes=1), hours=1)
    with pytest.raises(ValueError, match="only moves forward.*set"):
        clock.advance(-5)

    # then: 30 s + 1 min + 1 h, and the refused move changed nothing
    assert clock.now() == dt.datetime(2026, 3, 1, 1, 1, 30, tzinfo=dt.timezone.utc)


def test_settings_from_env_name_the_bad_variable():
    assert EngineSettings.from_env({"LOOM_SHARDS": "8", "LOOM_LEASE_S": "120"}).shards == 8
    with pytest.raises(ConfigurationError, match="LOOM_SHARDS='zero'"):
        EngineSettings.from_env({"LOOM_SHARDS": "zero"})
    with pytest.raises(ConfigurationError, match="LOOM_MAX_STEPS"):
        EngineSettings.from_env({"LOOM_MAX_STEPS": "500000"})


def _loaded_after(code: str, modules: tuple[str, ...]) -> list[str]:
    """Which of ``modules`` a fresh interpreter has imported after running ``code``."""
    probe = f"{code}\nimport sys\nprint(','.join(m for m in {modules!r} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    return [m for m in out.strip().split(",") if m]


def test_importing_engine_core_does_not_import_boto3():
    # given a process that imports the library, its test harness and the boto3-free adapters, and builds
    # the memory store the way LOOM_STORE=memory does
    code = ("import engine_core, engine_core.testing, engine_core.adapters.memory, engine_core.adapters.fake_queue\n"
            "from engine_core.adapters import build_store\n"
            "from engine_core.testing import FakeQueue\n"
            "build_store({'LOOM_STORE': 'memory'}, engine_core.EngineSettings())")
    # when
    loaded = _loaded_after(code, ("boto3", "botocore", "aws_lambda_powertools"))
    # then
    assert loaded == []


def test_only_the_adapters_import_boto3_botocore_or_powertools():
    # given every engine-core module outside engine_core/adapters
    root = Path(engine_core.__file__).parent
    pattern = re.compile(r"^\s*(?:import|from)\s+(?:boto3|botocore|aws_lambda_powertools)\b", re.MULTILINE)
    # when
    offenders = [str(path.relative_to(root)) for path in sorted(root.rglob("*.py"))
                 if path.relative_to(root).parts[0] != "adapters" and pattern.search(path.read_text())]
    # then
    assert offenders == []


def test_bootstrap_store_follows_loom_store_and_refuses_an_unknown_name():
    from engine_core.adapters import STORES, build_store, store_name
    from engine_core.adapters.memory import MemoryStore

    # given / when / then
    assert store_name({}) == "dynamodb" and set(STORES) >= {"dynamodb", "memory"}
    assert isinstance(build_store({"LOOM_STORE": "memory"}, EngineSettings(shards=4)), MemoryStore)
    with pytest.raises(ConfigurationError, match="LOOM_STORE='cassandra'.*dynamodb, memory"):
        build_store({"LOOM_STORE": "cassandra"}, EngineSettings())


def test_public_surface_is_pinned():
    assert sorted(engine_core.__all__) == sorted([
        "Clock", "ConfigurationError", "CorruptRecord", "CorruptStateError", "ENTRY_POINT_GROUP", "Engine",
        "EngineError", "EngineSettings", "ErrorInfo", "Execution", "ExecutionExistsError", "ExecutionNotFoundError",
        "ExecutionState", "ExecutionStateConflictError", "IdempotencyConflictError", "InsufficientTimeError",
        "InvalidInputError", "InvalidRequestError", "ListEntry", "MalformedMessageError", "ManualClock", "EventRecord", "Metrics",
        "NonSerializableResultError", "NullMetrics", "OperationRecord", "Outcome",
        "PermanentStepError", "REGISTRY", "Registry", "RegistrationError", "ResultTooLargeError", "RetryPolicy",
        "StartResult", "StateStore", "Status", "StepContext", "StepMessage", "StepQueue", "StepRecord",
        "StepStatus", "StepSupersededError", "StorageError", "SweepReport", "Sweeper", "SystemClock", "Timer",
        "TransitionConflictError", "UnknownWorkflowError", "WorkflowDef", "__version__", "check_fits", "map", "map_",
        "parallel", "sleep", "step", "wait_for_event", "workflow",
    ])
    assert all(hasattr(engine_core, name) for name in engine_core.__all__)
    assert not hasattr(engine_core, "StepBusyError") and not hasattr(engine_core, "StepSettledError")


def test_version_matches_the_package_metadata():
    """``__version__`` is the version in this checkout's pyproject.toml, and the installed metadata's when
    the installed distribution is this checkout (a venv may hold an editable install of another one)."""
    import json
    import pathlib
    import re
    from importlib.metadata import distribution

    root = pathlib.Path(engine_core.__file__).resolve().parents[2]
    pyproject = (root / "pyproject.toml").read_text()
    assert engine_core.__version__ == re.search(r'^version = "([^"]+)"', pyproject, re.M).group(1)
    dist = distribution("loom-engine-core")
    url = json.loads(dist.read_text("direct_url.json") or "{}").get("url", "")
    if url.removeprefix("file://") and pathlib.Path(url.removeprefix("file://")).resolve() == root:
        assert engine_core.__version__ == dist.version


def test_aws_read_timeouts_are_cut_from_each_functions_own_timeout_not_the_workers():
    from engine_core.adapters.bootstrap import client_config

    # given: a control plane of 10 s beside a worker of 60 s (every function is told the worker's timeout)
    env = {"LOOM_FUNCTION_TIMEOUT_S": "60", "LOOM_INVOCATION_TIMEOUT_S": "10"}
    # when / then: a sixth of its own (at least 2 s), not the worker's 10 s, so a hung call fails in time
    assert client_config(EngineSettings.from_env(env)).read_timeout == 2
    assert client_config(EngineSettings.from_env({**env, "LOOM_INVOCATION_TIMEOUT_S": "24"})).read_timeout == 4
    # unset (an older deploy): the worker's, as before; neither: 10 s
    assert client_config(EngineSettings.from_env({"LOOM_FUNCTION_TIMEOUT_S": "30"})).read_timeout == 5
    assert client_config(EngineSettings()).read_timeout == 10


def test_default_step_budget_is_derived_from_the_function_timeout():
    # unknown function timeout (in-process tests): 60 s
    assert EngineSettings().default_step_timeout_s == 60
    # known: the timeout minus the margin and the startup reserve, so a step on defaults always fits
    s = EngineSettings(function_timeout_s=60)
    assert s.default_step_timeout_s == 60 - 3 - 2
    assert s.default_step_timeout_s + s.time_margin_ms / 1000 <= s.function_timeout_s
    assert EngineSettings.from_env({"LOOM_FUNCTION_TIMEOUT_S": "900"}).default_step_timeout_s == 895
    assert EngineSettings.from_env({"LOOM_MAX_CHAIN_STEPS": "1", "LOOM_INDEX_SLACK_S": "0"}).max_chain_steps == 1
    with pytest.raises(ConfigurationError, match="LOOM_FUNCTION_TIMEOUT_S"):
        EngineSettings.from_env({"LOOM_FUNCTION_TIMEOUT_S": "901"})


def test_index_key_is_sticky_for_leases_and_exact_for_timers():
    from engine_core.model import Timer
    from engine_core.transitions import index_key

    t = dt.datetime(2026, 1, 1, tzinfo=UTC)
    s = dt.timedelta(seconds=1)
    # sleeps and retries: exactly their time
    assert index_key(t + 500 * s, t, Timer.SLEEP, 300) == t
    assert index_key(None, t, Timer.RETRY, 300) == t
    # a lease: pushed slack past it, then kept while it stays within [lease, lease + slack]
    first = index_key(None, t, Timer.LEASE, 300)
    assert first == t + 300 * s
    assert index_key(first, t + 100 * s, Timer.LEASE, 300) == first
    # never before the lease runs out
    assert index_key(first, t + 301 * s, Timer.LEASE, 300) == t + 601 * s
    assert index_key(None, t, Timer.LEASE, 0) == t


def test_error_text_is_truncated_valid_utf8_and_step_timeout_is_not_an_exception():
    from engine_core._runner import MAX_ERROR_MESSAGE_CHARS, StepTimeoutError, truncate

    assert not issubclass(StepTimeoutError, Exception) and issubclass(StepTimeoutError, BaseException)
    short = truncate("x" * 1_000_000)
    assert len(short) <= MAX_ERROR_MESSAGE_CHARS and short.endswith("more characters in the log]")
    assert truncate("ok") == "ok"
    assert truncate("bad \ud800 text").encode("utf-8")  # a lone surrogate no longer breaks encoding


def test_a_trusted_step_record_is_the_record_model_construct_builds():
    # given: every field, as the history decoder gives them
    from engine_core.adapters._items import step_from_attrs, step_to_attrs, record_sort_key
    from engine_core.model import ErrorInfo, StepRecord, StepStatus

    now = dt.datetime(2026, 3, 1, 12, 0, 0, 123456, tzinfo=dt.timezone.utc)
    original = StepRecord(step_index=3, name="charge", status=StepStatus.FAILED, attempts=2, started_at=now,
                          finished_at=now, result_blob=None, error=ErrorInfo(code="boom", message="m"), is_final=True,
                          expires_at=now.replace(microsecond=0), event_id="ev", kind="task", version=7, run="r",
                          context_blob='{"a":1}', undo=True)
    fields = dict(original)

    # when
    trusted = StepRecord.trusted(dict(fields))
    decoded = step_from_attrs(record_sort_key(original), step_to_attrs(original))

    # then: equal, with the same set fields, dumps and copies; frozen; and a missing field is refused
    built = StepRecord.model_construct(**fields)
    assert trusted == built == original == decoded
    assert trusted.model_fields_set == built.model_fields_set
    assert trusted.model_dump() == built.model_dump() and trusted.model_copy(update={"attempts": 3}).attempts == 3
    with pytest.raises(Exception):
        trusted.attempts = 5  # type: ignore[misc]
    with pytest.raises(ValueError):
        StepRecord.trusted({k: v for k, v in fields.items() if k != "undo"})


def test_with_fields_is_dataclasses_replace_for_the_delivery_paths_dataclasses():
    # given: an execution's state and a workflow definition, as a delivery copies them
    import dataclasses

    from engine_core.frozen import with_fields
    from engine_core.model import Execution, ExecutionState, Status, Timer
    from engine_core.registry import build_workflow

    now = dt.datetime(2026, 3, 1, tzinfo=dt.timezone.utc)
    e = Execution(execution_id="7d9f1c2e-3b4a-4c5d-8e6f-0a1b2c3d4e5f", workflow="w", status=Status.RUNNING,
                  current_step=0, version=1, created_at=now, updated_at=now, fingerprint="f", input_digest="d",
                  next_wake_at=now, timer=Timer.LEASE)
    state = ExecutionState(execution=e, input_blob="{}", records=["r0"], events=["ev"], records_from=3)
    def first(ctx):
        return {}

    wf = build_workflow("w", [first], source="tests")

    # when
    copied_state = with_fields(state, records=["r0", "r1"], records_from=None)
    copied_wf = with_fields(wf, steps=())

    # then: what dataclasses.replace builds, the original untouched, and a name that is no field refused
    assert copied_state == dataclasses.replace(state, records=["r0", "r1"], records_from=None)
    assert copied_wf == dataclasses.replace(wf, steps=())
    assert type(copied_wf) is type(wf) and copied_wf.name == "w" and len(wf.steps) == 1
    assert state.records == ["r0"] and state.records_from == 3 and copied_state.events is state.events
    with pytest.raises(dataclasses.FrozenInstanceError):
        copied_state.records = []  # type: ignore[misc]
    with pytest.raises(TypeError, match="no field 'record'"):
        with_fields(state, record=[])


@pytest.mark.parametrize("update", [None, {}, {"attempt": 3, "checkpoint": 7}, {"ledger": None}])
def test_a_frozen_models_copy_is_pydantics_copy(update):
    # given an execution with set and default fields, a ledger and an error
    from pydantic import BaseModel

    from engine_core.model import ErrorInfo, Execution, Ledger, Status, Timer

    now = dt.datetime(2026, 3, 1, 12, 0, 0, 123456, tzinfo=dt.timezone.utc)
    e = Execution(execution_id="7d9f1c2e-3b4a-4c5d-8e6f-0a1b2c3d4e5f", workflow="w", status=Status.RUNNING,
                  current_step=2, version=4, created_at=now, updated_at=now, ledger=Ledger(requests=3), fingerprint="f",
                  input_digest="d", next_wake_at=now, timer=Timer.LEASE,
                  error=ErrorInfo(code="x", message="y"))
    # when
    ours, theirs = e.model_copy(update=update), BaseModel.model_copy(e, update=update)
    # then: the same fields, the same set fields, still frozen, and the original untouched
    assert ours == theirs and ours.__dict__ == theirs.__dict__ and ours is not e
    assert ours.model_fields_set == theirs.model_fields_set
    assert (ours.__pydantic_extra__, ours.__pydantic_private__) == (theirs.__pydantic_extra__, theirs.__pydantic_private__)
    assert ours.__dict__ is not e.__dict__ and ours.model_fields_set is not e.model_fields_set
    with pytest.raises(Exception):
        ours.attempt = 9  # type: ignore[misc]
    assert e.version == 4 and e.attempt == 0
    assert e.model_copy(update={"version": 5}, deep=True).version == 5


def test_a_step_body_runs_under_its_alarm_and_the_handler_found_before_is_put_back():
    # given: a SIGALRM handler of the process's own, and a body that overruns next to one that does not
    import signal
    import time as _time

    from engine_core._runner import run_body
    from engine_core.context import StepContext

    def mine(signum, frame):  # pragma: no cover - never fires: the engine's timer is off after each body
        raise AssertionError("the process's own handler ran")

    ctx = StepContext(execution_id="e", workflow="w", step_index=0, step_name="s", attempt=1, data={})
    before = signal.signal(signal.SIGALRM, mine)
    try:
        # when
        slow = run_body(lambda c: _time.sleep(2), ctx, 0.05, lambda: _time.monotonic() * 1000)
        after_slow = signal.getsignal(signal.SIGALRM)
        fast = run_body(lambda c: {"ok": 1}, ctx, 5, lambda: _time.monotonic() * 1000)
        after_fast = signal.getsignal(signal.SIGALRM)
    finally:
        signal.signal(signal.SIGALRM, before)
    # then
    assert (slow.error_code, slow.retryable) == ("step_timeout", True) and slow.duration_ms < 1500
    assert fast.ok and fast.result == {"ok": 1}
    assert after_slow is mine and after_fast is mine
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)


def test_the_package_loads_each_exported_name_on_first_use_and_authoring_does_not_load_the_step_path():
    # given a fresh interpreter that imports what a workflow module imports
    code = ("from engine_core import PermanentStepError, RetryPolicy, StepContext, map, sleep, step, workflow\n"
            "from engine_core.durable import durable")
    # when
    loaded = _loaded_after(code, ("engine_core.registry", "engine_core.engine", "engine_core.step_run",
                                  "engine_core.durable.run", "engine_core.operations", "engine_core.sweeper"))
    # then the authoring API is loaded, and none of the step path, the operator or the sweeper
    assert loaded == ["engine_core.registry"]


def test_every_exported_name_resolves_to_its_module_object_and_an_unknown_one_is_an_attribute_error():
    # given
    import engine_core.engine
    import engine_core.registry
    # when
    resolved = {name: getattr(engine_core, name) for name in engine_core.__all__}
    # then
    assert resolved["Engine"] is engine_core.engine.Engine and resolved["map"] is engine_core.registry.map_
    assert set(engine_core.__all__) <= set(dir(engine_core))
    with pytest.raises(AttributeError, match="'engine_core' has no attribute 'Engin'"):
        engine_core.Engin  # noqa: B018


@pytest.mark.parametrize(("code", "says"), [(None, "SystemExit: None;"), (0, "SystemExit: 0;"), ("bye", "SystemExit: bye;")])
def test_a_body_calling_sys_exit_is_a_retryable_step_error_naming_its_code(code, says):
    import sys
    import time as _time

    from engine_core._runner import run_body
    from engine_core.context import StepContext

    ctx = StepContext(execution_id="e", workflow="w", step_index=0, step_name="s", attempt=1, data={})
    out = run_body(lambda c: sys.exit(code), ctx, 5, lambda: _time.monotonic() * 1000)
    assert (out.error_code, out.error_type, out.retryable) == ("step_error", "SystemExit", True), out
    assert out.error_message.startswith(f"{says} the step body called sys.exit()"), out.error_message
