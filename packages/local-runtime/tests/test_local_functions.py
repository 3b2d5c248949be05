"""Execution environments: isolation like Lambda's, warm reuse, the timeout, crashes, errors."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path


def test_the_handler_runs_from_the_zip_with_only_runtime_provided_libraries(make_function, libs_dir: Path):
    result = make_function().invoke({"action": "look"})
    assert result.ok, result.describe()
    seen = result.payload
    assert seen["importable"] == {"boto3": True, "pytest": False, "moto": False, "loom_local": False,
                                  "engine_core": True}
    assert seen["boto3_file"].startswith(str(libs_dir))
    code_dir = seen["cwd"]
    assert seen["sys_path"][:2] == [code_dir, str(libs_dir)]
    assert not any("site-packages" in p for p in seen["sys_path"])
    assert seen["env"]["TINY_OUT"].endswith("out.jsonl")
    assert "VIRTUAL_ENV" not in seen["env"] and "PYTHONPATH" not in seen["env"]
    assert 0 < seen["remaining_ms"] <= 5000
    assert seen["request_id"] == result.request_id
    assert seen["arn"].endswith(":function:tiny-0")


def test_warm_reuse_and_concurrency(make_function):
    fn = make_function(concurrency=2)
    first, second = fn.invoke({}), fn.invoke({})
    assert first.cold and not second.cold
    assert first.payload["pid"] == second.payload["pid"]
    assert first.payload["loaded_at"] == second.payload["loaded_at"]  # init ran once

    results = []
    threads = [threading.Thread(target=lambda: results.append(fn.invoke({"action": "sleep", "seconds": 1})))
               for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(r.ok for r in results)
    assert len({r.payload["pid"] for r in results}) == 2  # a second environment for the concurrent invocation
    assert len(fn.pids()) == 2


def test_the_timeout_kills_the_process_and_the_next_invocation_starts_a_new_one(make_function):
    # 3 s leaves a trivial warm-up invocation room on a loaded 2-core CI machine
    fn = make_function(timeout_s=3)
    warm = fn.invoke({})
    assert warm.ok, warm.describe()
    slow = fn.invoke({"action": "sleep", "seconds": 30})
    assert slow.status == "timeout"
    assert slow.error["errorMessage"] == "Task timed out after 3.00 seconds"
    assert 2900 < slow.duration_ms < 8000
    _assert_dead(warm.payload["pid"])
    after = fn.invoke({})
    assert after.ok and after.cold and after.payload["pid"] != warm.payload["pid"]


def test_a_process_that_dies_is_reported_and_replaced(make_function):
    fn = make_function()
    died = fn.invoke({"action": "exit"})
    assert died.status == "crashed"
    assert "exit status 7" in died.error["errorMessage"]
    assert fn.invoke({}).ok


def test_function_errors_keep_the_environment(make_function):
    fn = make_function()
    failed = fn.invoke({"action": "raise"})
    assert failed.status == "function_error"
    assert failed.error["errorType"] == "KeyError"
    again = fn.invoke({})
    assert again.ok and not again.cold and again.payload["pid"] == failed.pid

    marshal = fn.invoke({"action": "unserializable"})
    assert marshal.status == "function_error" and marshal.error["errorType"] == "Runtime.MarshalError"


def test_init_errors_say_what_is_wrong(make_function):
    missing_module = make_function(handler="no_such_module.handler").invoke({})
    assert missing_module.status == "init_error"
    assert missing_module.error["errorType"] == "Runtime.ImportModuleError"
    assert "no_such_module" in missing_module.error["errorMessage"]
    missing_function = make_function(handler="tiny_handlers.nope").invoke({})
    assert missing_function.error["errorType"] == "Runtime.HandlerNotFound"


def test_close_kills_every_process(make_function):
    fn = make_function(concurrency=2)
    raised = []

    def invoke():
        try:
            fn.invoke({"action": "sleep", "seconds": 30})
        except Exception as exc:  # an invocation cut short by close() answers; it never raises
            raised.append(repr(exc))

    threads = [threading.Thread(target=invoke) for _ in range(2)]
    for t in threads:
        t.start()
    deadline = 50
    while len(fn.pids()) < 2 and deadline:
        threading.Event().wait(0.1)
        deadline -= 1
    pids = fn.pids()
    assert len(pids) == 2
    fn.close()
    for t in threads:
        t.join(10)
        assert not t.is_alive()
    for pid in pids:
        _assert_dead(pid)
    assert raised == []


def _assert_dead(pid: int) -> None:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return
    # A zombie is dead too (its parent may not have reaped it yet).
    with open(f"/proc/{pid}/stat") as f:
        assert f.read().split()[2] == "Z", f"process {pid} is still running"


def test_new_code_runs_every_invocation_after_the_update_and_one_in_flight_finishes_on_the_old(make_function):
    # given: a warm environment, and an invocation in flight on a second one
    from dataclasses import replace

    fn = make_function(concurrency=3)
    warm = fn.invoke({})
    in_flight: list = []
    sleeper = threading.Thread(target=lambda: in_flight.append(fn.invoke({"action": "sleep", "seconds": 2})))
    sleeper.start()
    deadline = time.monotonic() + 10
    while len(fn.pids()) < 2 and time.monotonic() < deadline:
        fn.invoke({})  # keeps the warm environment busy long enough for the sleeper to take a second one
    # when: the code is updated (a new environment variable stands for the new code)
    fn.update_code(replace(fn.spec, environment={**fn.spec.environment, "TINY_RELEASE": "2"}))
    after = fn.invoke({})
    sleeper.join()
    # then: the next invocation starts cold on the new code, and no old environment is left
    assert after.ok and after.cold and after.payload["env"].get("TINY_RELEASE") == "2", after.describe()
    _assert_dead(warm.payload["pid"])
    # and the invocation in flight finished on the old code, and its environment was shut down when it returned
    (slept,) = in_flight
    assert slept.ok and "TINY_RELEASE" not in slept.payload["env"], slept.describe()
    _assert_dead(slept.payload["pid"])
    assert fn.pids() == [after.payload["pid"]]
