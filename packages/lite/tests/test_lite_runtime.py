"""The one-process runtime serves the control plane's own API: the SDK, the ``loom`` command line, the console
and the MCP tools work against it unchanged, found through the per-user state file."""

from __future__ import annotations

import json
import os
import re
import time
import urllib.error
import urllib.parse
import urllib.request

import pytest

from engine_core import PermanentStepError, Registry, StepMessage, map_, sleep, step, wait_for_event, workflow
from loom_cli.console.server import Console
from loom_cli.main import main as loom
from loom_cli.mcp_tools import call_tool, select
from loom_cli.sdk import LoomClient
from loom_lite import LiteConfig, LiteRuntime
from loom_lite.config import lite_settings


def make_registry() -> Registry:
    registry = Registry()

    def hello(ctx):
        return {"greeting": f"hello {ctx['name']}"}

    def shout(ctx):
        return {"shout": ctx["greeting"].upper()}

    @workflow("greet", registry=registry)
    class Greet:
        steps = [hello, sleep(seconds=600, name="nap"), shout]

    @workflow("approve", registry=registry)
    class Approve:
        steps = [hello, wait_for_event("approved", timeout=600), step(shout)]

    def each(ctx):
        if ctx.item == "slow":
            time.sleep(0.3)
        if ctx.item == "bad":
            raise PermanentStepError("no such item")
        return ctx.item

    def dawdle(ctx):
        time.sleep(1.0)
        return {"dawdled": True}

    @workflow("dawdle", registry=registry)
    class Dawdle:
        steps = [dawdle]

    @workflow("fan", registry=registry)
    class Fan:
        steps = [map_(each, over="items", max_concurrency=1, name="each")]

    return registry


@pytest.fixture
def state_file(tmp_path, monkeypatch):
    path = tmp_path / "state" / "local.json"
    monkeypatch.setenv("LOOM_STATE_FILE", str(path))
    monkeypatch.delenv("LOOM_URL", raising=False)
    return path


@pytest.fixture
def lite(tmp_path, state_file):
    config = LiteConfig(db=tmp_path / "loom.db", sweep_every_s=0.1, poll_s=0.02,
                        settings=lite_settings({"LOOM_FUNCTION_TIMEOUT_S": "5"}))
    runtime = LiteRuntime(config, make_registry()).start(worker_thread=True)
    yield runtime
    runtime.stop()


def http(url: str, method: str = "GET", body: bytes | None = None) -> tuple[int, dict, dict]:
    req = urllib.request.Request(url, data=body, method=method, headers={"content-type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, dict(r.headers), json.loads(r.read())
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), json.loads(exc.read())


def test_lite_sdk_finds_the_runtime_through_the_state_file_and_drives_an_execution(lite, state_file):
    # given: the runtime recorded itself where loom looks
    recorded = json.loads(state_file.read_text())
    assert recorded["kind"] == "lite" and recorded["url"] == lite.url
    client = LoomClient()  # no URL: the state file's
    # when
    started = client.start("greet", {"name": "ada"})
    sleeping = client.wait(started.execution_id, "SLEEPING", timeout_s=20)
    client.wake(started.execution_id)
    done = client.wait(started.execution_id, timeout_s=20)
    # then
    assert sleeping.status == "SLEEPING" and done.status == "COMPLETED"
    history = client.history(started.execution_id)
    assert [(r.name, r.status) for r in history.records()] == [("hello", "SUCCEEDED"), ("nap", "SUCCEEDED"),
                                                               ("shout", "SUCCEEDED")]
    assert [op.op for op in history.operations] == ["wake"] and history.operations[0].by == "local"


def test_lite_loom_commands_start_send_and_read_against_it(lite, capsys):
    # when: the command line starts an approval, sends its event, and reads it
    assert loom(["--json", "start", "approve", "--input", '{"name": "bo"}']) == 0
    eid = json.loads(capsys.readouterr().out)["execution_id"]
    LoomClient().wait(eid, "WAITING", timeout_s=20)
    assert loom(["send", eid, "approved", "--data", '{"ok": true}', "--event-id", "mail-1"]) == 0
    LoomClient().wait(eid, timeout_s=20)
    capsys.readouterr()
    assert loom(["--json", "status", eid]) == 0
    status = json.loads(capsys.readouterr().out)
    assert loom(["list", "--workflow", "approve"]) == 0
    listed = capsys.readouterr().out
    # then
    assert status["status"] == "COMPLETED" and {"ok": True} in status["context"].values()  # under the wait's name
    assert eid in listed and "COMPLETED" in listed


def test_lite_refusals_are_the_control_planes_own(lite):
    # an unknown route, a wrong method, a bad body, an unknown workflow: the deployed API's answers
    status, _, body = http(lite.url + "/nothing")
    assert status == 404 and body["error"] == "not_found" and "routes are POST /executions" in body["message"]
    status, headers, body = http(lite.url + "/workflows", "POST", b"{}")
    assert status == 405 and body["error"] == "method_not_allowed" and headers.get("Allow") == "GET"
    status, _, body = http(lite.url + "/executions", "POST", b"{not json")
    assert status == 400 and body["error"] == "invalid_json"
    status, _, body = http(lite.url + "/executions", "POST", json.dumps({"workflow": "nope", "input": {}}).encode())
    assert status == 404 and body["error"] == "unknown_workflow"


def test_lite_console_and_mcp_tools_work_against_it(lite):
    client = LoomClient(lite.url)
    eid = client.start("greet", {"name": "cy"}).execution_id
    client.wait(eid, "SLEEPING", timeout_s=20)
    # the console lists it and shows its timeline
    console = Console(LoomClient(lite.url), interval_s=0.1).start()
    try:
        with urllib.request.urlopen(console.url, timeout=10) as r:
            page = r.read().decode()
        with urllib.request.urlopen(console.url + f"executions/{eid}", timeout=10) as r:
            timeline = r.read().decode()
    finally:
        console.stop()
    assert eid in page and "greet" in page and "nap" in timeline
    # the MCP tools read and act on it
    tools = {t.name: t for t in select()}
    ok, doc = call_tool(lambda: LoomClient(lite.url), tools, "get_execution", {"execution_id": eid})
    assert ok and doc["status"] == "SLEEPING"
    # and list the live ones as the API and the command line do (status LIVE: running, sleeping or waiting)
    ok, doc = call_tool(lambda: LoomClient(lite.url), tools, "list_executions", {"status": "LIVE"})
    assert ok and [(x["execution_id"], x["status"]) for x in doc["executions"]] == [(eid, "SLEEPING")], doc
    ok, doc = call_tool(lambda: LoomClient(lite.url), tools, "cancel_execution", {"execution_id": eid, "reason": "test"})
    assert ok and doc["status"] == "CANCELLED"


def test_lite_stop_forgets_its_record_and_a_new_runtime_on_the_file_resumes(tmp_path, state_file):
    config = LiteConfig(db=tmp_path / "loom.db", sweep_every_s=0.1, poll_s=0.02,
                        settings=lite_settings({"LOOM_FUNCTION_TIMEOUT_S": "5"}))
    first = LiteRuntime(config, make_registry()).start(worker_thread=True)
    eid = LoomClient().start("greet", {"name": "di"}).execution_id
    LoomClient().wait(eid, "SLEEPING", timeout_s=20)
    first.stop()
    assert not state_file.exists()
    # when: another runtime opens the same file
    second = LiteRuntime(config, make_registry()).start(worker_thread=True)
    try:
        client = LoomClient()
        assert client.get(eid).status == "SLEEPING"
        client.wake(eid)
        assert client.wait(eid, timeout_s=20).status == "COMPLETED"
    finally:
        second.stop()


def test_lite_runs_a_code_first_workflow_through_its_sleep_and_event(tmp_path, state_file):
    # given: a plain function with step(), a durable sleep and an event, on the SQLite file
    from engine_core import durable as d

    registry = Registry()
    calls: list[str] = []

    def charge(amount):
        calls.append("charge")
        return {"charged": amount}

    @d.durable("code_order", registry=registry, events={"approved": None})
    def code_order(order):
        charged = d.step("charge", charge, order["amount"])
        d.sleep(600, name="cool_off")
        approval = d.wait_for_event("approved", timeout=600)
        return {"charged": charged["charged"], "by": approval["by"]}

    config = LiteConfig(db=tmp_path / "loom.db", sweep_every_s=0.1, poll_s=0.02,
                        settings=lite_settings({"LOOM_FUNCTION_TIMEOUT_S": "5"}))
    with LiteRuntime(config, registry).start(worker_thread=True):
        client = LoomClient()
        # when
        started = client.start("code_order", {"amount": 12})
        client.wait(started.execution_id, "SLEEPING", timeout_s=20)
        client.wake(started.execution_id)
        client.wait(started.execution_id, "WAITING", timeout_s=20)
        client.send(started.execution_id, "approved", {"by": "ops"})
        done = client.wait(started.execution_id, timeout_s=20)
    # then: the result is the function's return, its step ran once across the suspensions
    assert done.status == "COMPLETED" and done.result == {"charged": 12, "by": "ops"}
    assert calls == ["charge"]


def test_loom_dev_finds_the_runtime_through_its_entry_point_serves_and_stops_on_sigterm(tmp_path):
    # given: `loom dev` as a user runs it (loom-cli finds loom-lite's runtime by its entry point)
    import signal
    import subprocess
    import sys

    from loom_lite.cli import UP_LINE

    (tmp_path / "flows.py").write_text(
        "from engine_core import workflow\n\n\ndef hello(ctx):\n    return {'hi': True}\n\n\n"
        "@workflow('hello')\nclass Hello:\n    steps = [hello]\n")
    proc = subprocess.Popen([sys.executable, "-m", "loom_cli.main", "dev", "flows.py", "--db", str(tmp_path / "a.db"),
                             "--no-record", "--no-entry-points", "--quiet"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=tmp_path)
    try:
        # when
        line = proc.stdout.readline()
        url = line.split()[len(UP_LINE.split())]
        status, _, body = http(url + "/workflows")
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=30)
    finally:
        proc.kill()
    # then: it served the control plane's API on the file it was given, and stopped cleanly
    assert line.startswith(UP_LINE) and status == 200 and [w["name"] for w in body["workflows"]] == ["hello"], (line, proc.stderr.read())
    assert code == 0 and (tmp_path / "a.db").exists()


def test_lite_fires_its_schedules_and_lists_each_ones_last_firing(tmp_path, state_file):
    import datetime as dt

    from engine_core.schedules.config import Schedules

    # given: a one-time schedule two seconds from now, and a disabled one
    at = (dt.datetime.now(dt.timezone.utc) + dt.timedelta(seconds=2)).strftime("%Y-%m-%dT%H:%M:%S")
    schedules = Schedules.parse(json.dumps([
        {"name": "soon", "workflow": "dawdle", "expression": f"at({at})"},
        {"name": "off", "workflow": "dawdle", "expression": "rate(1 minute)", "enabled": False}]))
    config = LiteConfig(db=tmp_path / "loom.db", sweep_every_s=0.1, poll_s=0.02, schedules=schedules,
                        settings=lite_settings({"LOOM_FUNCTION_TIMEOUT_S": "5"}))
    with LiteRuntime(config, make_registry()).start(worker_thread=True) as runtime:
        # when: its time comes
        deadline, fired = time.monotonic() + 20, None
        while (fired is None or fired["outcome"] == "starting") and time.monotonic() < deadline:  # claimed, then started
            status, _, body = http(f"{runtime.url}/schedules")
            fired = {s["name"]: s for s in body["schedules"]}["soon"]["last_firing"]
            time.sleep(0.1)
        done = LoomClient().wait(fired["execution_id"], timeout_s=20)
        _, _, after = http(f"{runtime.url}/schedules")
        started = [e.execution_id for e in LoomClient().list(workflow="dawdle")]
    # then: it fired once, started by the schedule, and ran; the disabled one never fired
    listed = {s["name"]: s for s in after["schedules"]}
    assert fired["outcome"] == "started" and fired["scheduled_at"].startswith(at), fired
    assert done.status == "COMPLETED" and done.started_by == "schedule:soon", done
    assert listed["soon"]["next_firing"] is None and listed["off"]["last_firing"] is None, listed
    assert started == [fired["execution_id"]], started


@pytest.mark.parametrize("schedules", ["not json", json.dumps([{"name": "d", "workflow": "nightly",
                                                                "expression": "cron(0 \u00b2 ? * SUN *)"}])])
def test_loom_dev_refuses_a_loom_schedules_it_cannot_fire_naming_the_problem(tmp_path, state_file, monkeypatch,
                                                                           capsys, schedules):
    from loom_lite.cli import main as loom_dev

    # given: a LOOM_SCHEDULES no firing could follow (not JSON; a digit EventBridge does not read)
    monkeypatch.setenv("LOOM_SCHEDULES", schedules)
    # (a workflow name no other test serves: serve() merges what it loads into the process's default registry)
    flows = tmp_path / "flows.py"
    flows.write_text("from engine_core import Registry\nfrom engine_core.durable import durable, step\n"
                     "registry = Registry()\n@durable('nightly', registry=registry)\ndef nightly(input):\n"
                     "    return step('only', dict)\n")
    # when
    code = loom_dev([str(flows), "--no-entry-points", "--db", str(tmp_path / "loom.db"), "--port", "0", "--quiet"])
    # then: it does not start, and says what is wrong with the variable
    err = capsys.readouterr().err
    assert code == 2 and "loom dev: error:" in err and ("LOOM_SCHEDULES" in err or "schedule 'd'" in err), err
    assert not (tmp_path / "loom.db").exists()


def test_loom_dev_serves_a_module_with_its_own_registry_and_refuses_one_with_no_workflows(tmp_path):
    from engine_core.settings import ConfigurationError
    from loom_lite.cli import load_workflows

    # given: a module written as the README's first workflow is (``registry = Registry()``)
    own = tmp_path / "own_flows.py"
    own.write_text("from engine_core import Registry, workflow\nregistry = Registry()\n"
                   "def hello(ctx):\n    return {'hello': ctx['name']}\n"
                   "@workflow('own_hello', registry=registry)\nclass Hello:\n    steps = [hello]\n")
    empty = tmp_path / "no_flows.py"
    empty.write_text("def helper(ctx):\n    return {}\n")
    served = Registry()
    # when / then: its workflows are served
    load_workflows([str(own)], entry_points=False, registry=served)
    assert served.names() == ["own_hello"]
    # and loaded again (the file runs again): still served, not refused
    load_workflows([str(own)], entry_points=False, registry=served)
    # and a module that registers nothing is named, with what to do, instead of serving nothing of it
    with pytest.raises(ConfigurationError, match=r"'.*no_flows.py' registered no workflows: decorate them with "
                                                 r"@workflow\(...\) or @durable\(...\)"):
        load_workflows([str(empty)], entry_points=False, registry=Registry())


def test_lite_history_of_a_failed_map_says_which_branches_never_began(lite, capsys):
    # given: a map one branch at a time whose second item fails for good: the items after it never begin
    started = LoomClient().start("fan", {"items": ["a", "bad", "c", "d"]})
    done = LoomClient().wait(started.execution_id, timeout_s=20)
    branches = LoomClient().history(started.execution_id).branches(0)
    capsys.readouterr()
    # when
    assert loom(["history", started.execution_id]) == 0
    out = capsys.readouterr().out
    # then: no row for the branches never begun (counted, not assumed), and the fan-out's row says so
    assert done.status == "FAILED" and sorted(r.branch for r in branches)[:2] == [0, 1] and len(branches) < 4
    assert re.search(r"^0\s+each\s+fanout\s+FAILED\s.*permanent_error: branch 1: no such item", out, re.M), out
    missing = 4 - len(branches)
    assert f"\neach: {missing} of its 4 branches never started (max_concurrency 1 held them back and the execution " \
           "ended first): they have no row here\n" in out, out


def test_lite_history_of_a_map_cancelled_half_way_says_the_rest_never_began(lite, capsys):
    # given: a map one branch at a time, cancelled once its first branch has a row
    client = LoomClient()
    eid = client.start("fan", {"items": ["slow", "slow", "slow", "slow", "slow", "slow"]}).execution_id
    deadline = time.monotonic() + 20
    while not client.history(eid).branches(0) and time.monotonic() < deadline:
        time.sleep(0.02)
    client.cancel(eid, reason="enough")
    done = client.wait(eid, timeout_s=20)
    history = client.history(eid)
    capsys.readouterr()
    # when
    assert loom(["history", eid]) == 0
    out = capsys.readouterr().out
    # then: the fan-out has no row of its own, fewer branch rows than items, and the table says the rest never began
    assert done.status == "CANCELLED" and 0 < len(history.branches(0)) < 6
    assert not [r for r in history.records() if r.step_index == 0], history.records()
    missing = 6 - len(history.branches(0))
    assert f"\neach: {missing} of its 6 branches never started (max_concurrency 1 held them back and the execution " \
           "ended first): they have no row here\n" in out, out


def test_loom_dev_on_a_port_in_use_says_so_and_exits_2_without_a_traceback(tmp_path, state_file, capsys):
    import socket

    from loom_lite.cli import main as loom_dev

    flows = tmp_path / "busy_flows.py"
    flows.write_text("from engine_core import Registry, workflow\nregistry = Registry()\n"
                     "def hello(ctx):\n    return {}\n"
                     "@workflow('busy_hello', registry=registry)\nclass Hello:\n    steps = [hello]\n")
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        # when
        code = loom_dev([str(flows), "--no-entry-points", "--db", str(tmp_path / "busy.db"), "--port", str(port)])
    err = capsys.readouterr().err
    # then
    assert code == 2
    assert f"loom dev: error: port {port} on 127.0.0.1 is already in use" in err and "--port" in err, err
    assert "Traceback" not in err and not state_file.exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith("busy.db")] == []  # no store made for nothing


def test_loom_cancel_while_an_attempt_runs_says_it_is_a_request(lite, capsys):
    # given: an attempt holds the step (its body runs for a second)
    client = LoomClient()
    eid = client.start("dawdle", {}).execution_id
    deadline = time.monotonic() + 20
    while client.get(eid).attempt < 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    capsys.readouterr()
    # when
    assert loom(["cancel", eid, "--reason", "enough"]) == 0
    out = capsys.readouterr().out
    done = client.wait(eid, timeout_s=20)
    # then: the line says the cancel waits for the attempt, and it then takes effect
    assert "RUNNING" in out and "requested: an attempt holds the step, and the cancel takes effect when it ends" in out, out
    assert done.status == "CANCELLED"


def test_a_store_held_busy_by_another_connection_is_a_503_that_names_the_file_and_the_variable(
        tmp_path, state_file, monkeypatch, capsys):
    # given: a runtime that waits 200 ms for the write lock, and a sqlite3 shell holding it in a transaction
    import sqlite3

    monkeypatch.setenv("LOOM_SQLITE_BUSY_TIMEOUT_MS", "200")
    db = tmp_path / "held.db"
    config = LiteConfig.from_env(db=db, sweep_every_s=60, poll_s=0.05)
    assert config.busy_timeout_ms == 200  # read from the variable, as `loom dev` reads it
    runtime = LiteRuntime(config, make_registry()).start(worker_thread=True)
    shell = sqlite3.connect(db, isolation_level=None)
    # a message that becomes visible while the lock is held: the worker's receive then needs the write lock
    runtime.queue.send(StepMessage(execution_id="00000000-0000-4000-8000-000000000000", step=0, version=1), delay_s=1)
    try:
        shell.execute("BEGIN IMMEDIATE")
        # when: a start through the SDK, then through the command line
        with pytest.raises(Exception) as refused:
            LoomClient(runtime.url).start("greet", {"name": "ada"})
        code = loom(["--url", runtime.url, "start", "greet", "--input", '{"name": "bo"}'])
        time.sleep(1.5)  # the message comes visible: each receive of it waits out the lock and fails
        shell.execute("ROLLBACK")
        later = LoomClient(runtime.url).start("greet", {"name": "cy"})
        # and: the worker outlived the lock (it died of it: the API served, nothing ran)
        asleep = LoomClient(runtime.url).wait(later.execution_id, "SLEEPING", timeout_s=20)
        failed_polls = runtime.worker.counts["store_unavailable"]
    finally:
        shell.close()
        runtime.stop()
    assert asleep.status == "SLEEPING" and failed_polls >= 1, (asleep.status, failed_polls)
    # then: the API failed on its side (not a refusal), saying which file, why, and what to change
    exc = refused.value
    assert (exc.code, exc.status, exc.is_refusal) == ("store_unavailable", 503, False)
    assert str(db) in exc.message and "LOOM_SQLITE_BUSY_TIMEOUT_MS" in exc.message and "Retry" in exc.message
    assert "for more than 200 ms" in exc.message, exc.message
    assert code == 4 and "store_unavailable (HTTP 503)" in capsys.readouterr().err
    assert later.created  # the lock released: the same runtime goes on


def test_loom_dev_with_a_directory_for_db_says_to_name_a_file_and_exits_2_without_a_traceback(tmp_path, state_file,
                                                                                               capsys):
    from loom_lite.cli import main as loom_dev

    flows = tmp_path / "dir_flows.py"
    flows.write_text("from engine_core import Registry, workflow\nregistry = Registry()\n"
                     "def hello(ctx):\n    return {}\n"
                     "@workflow('dir_hello', registry=registry)\nclass Hello:\n    steps = [hello]\n")
    code = loom_dev([str(flows), "--no-entry-points", "--db", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2 and f"loom dev: error: --db {tmp_path} is a directory" in err and "loom.db" in err, err
    assert "Traceback" not in err and not state_file.exists()


def test_a_body_over_the_limit_is_answered_413_and_none_of_it_is_taken_for_a_request(lite):
    import socket

    client = LoomClient(lite.url)
    eid = client.start("greet", {"name": "ada"}).execution_id
    client.wait(eid, "SLEEPING", timeout_s=20)
    # given: a body over 6 MB whose first bytes are a request of their own (a cancel of that execution)
    inner = f"POST /executions/{eid}/cancel HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{{}}".encode()
    size = 7_000_000
    head = (f"POST /executions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            f"Content-Length: {size}\r\n\r\n").encode()
    # when: sent on one connection, and the SDK starts with an input over the limit
    where = urllib.parse.urlsplit(lite.url)
    with socket.create_connection((where.hostname, where.port), timeout=20) as sock:
        sock.sendall(head + inner + b" " * (size - len(inner)))
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    with pytest.raises(Exception) as refused:
        client.start("greet", {"name": "x" * 7_000_000})
    # then: one answer, 413, the connection closed; the cancel inside the body never ran
    assert answer.startswith(b"HTTP/1.1 413 ") and answer.count(b"HTTP/1.1 ") == 1, answer[:300]
    assert b'"input_too_large"' in answer and b"connection: close" in answer.lower()
    assert client.get(eid).status == "SLEEPING"
    assert (refused.value.code, refused.value.status) == ("input_too_large", 413)


def test_loom_dev_prints_a_warnings_fields_so_a_failure_shows_its_cause():
    # given: the log format `loom dev` uses, and a warning whose cause is in its fields (as the sweeper logs)
    import logging

    from loom_lite.cli import FieldsFormatter

    formatter = FieldsFormatter("%(name)s %(message)s")
    warning = logging.makeLogRecord({"name": "engine_core.sweeper", "levelno": logging.WARNING, "levelname": "WARNING",
                                     "msg": "sweeping a shard failed; the next tick retries it", "shard": 3,
                                     "error": "SQLite read on loom.db: the file is damaged"})
    info = logging.makeLogRecord({"name": "loom_lite", "levelno": logging.INFO, "msg": "served", "shard": 3})
    # when / then: the warning carries its fields; an info line stays as it was
    assert formatter.format(warning) == ("engine_core.sweeper sweeping a shard failed; the next tick retries it "
                                         "(shard=3, error=SQLite read on loom.db: the file is damaged)")
    assert formatter.format(info) == "loom_lite served"


def test_loom_dev_warns_at_start_of_live_executions_on_a_version_it_does_not_serve(tmp_path, state_file, capsys,
                                                                                  monkeypatch):
    from loom_lite.cli import main as loom_dev

    # given: a greet execution sleeps on version 1 in the file
    config = LiteConfig(db=tmp_path / "loom.db", sweep_every_s=0.1, poll_s=0.02,
                        settings=lite_settings({"LOOM_FUNCTION_TIMEOUT_S": "5"}))
    first = LiteRuntime(config, make_registry()).start(worker_thread=True)
    try:
        eid = LoomClient().start("greet", {"name": "di"}).execution_id
        LoomClient().wait(eid, "SLEEPING", timeout_s=20)
    finally:
        first.stop()
    flows = tmp_path / "greet_v2.py"
    flows.write_text("from engine_core import Registry, workflow\nregistry = Registry()\n"
                     "def hello(ctx):\n    return {}\n"
                     "@workflow('greet', registry=registry, version=2)\nclass Greet:\n    steps = [hello]\n")
    monkeypatch.setattr(LiteRuntime, "run_worker", lambda self: None)  # start, say what it says, stop
    # when: loom dev starts on the file with version 2 only
    code = loom_dev([str(flows), "--no-entry-points", "--db", str(config.db), "--port", "0", "--quiet"])
    # then: it says which executions it strands and what to do, before they fail one by one
    err = capsys.readouterr().err
    assert code == 0
    assert ("loom dev: warning: 1 live execution(s) run on version 1 of workflow 'greet', which this process does not "
            "serve: each fails at its next delivery (workflow_version_missing)") in err, err
    assert "keep its @workflow('greet', version=1) registered" in err and "loom redrive ID --to-version N" in err


def test_loom_dev_names_the_decorator_of_the_style_a_stranded_workflow_is_served_in():
    from engine_core.durable import durable
    from engine_core.durable import step as dstep
    from loom_lite.cli import _decorator

    # given: a code-first workflow served at version 2, a step list, and nothing served for a third
    registry = make_registry()

    @durable("batch", registry=registry, version=2)
    def batch(input):
        return dstep("one", lambda: 1)

    # when / then: the stranded version 1 of each is kept registered the way its served versions are declared
    assert _decorator(registry, "batch") == "@durable"
    assert _decorator(registry, "greet") == "@workflow"
    assert _decorator(registry, "gone") == "@workflow or @durable"


def test_loom_dev_on_a_module_that_is_broken_or_missing_says_which(tmp_path, monkeypatch):
    from engine_core import ConfigurationError

    from loom_lite.cli import load_workflows

    monkeypatch.chdir(tmp_path)
    (tmp_path / "broken_flows.py").write_text("def hello(ctx)\n    return {}\n")
    # when / then: a module that was found and raised on import is not sent looking for a path
    with pytest.raises(ConfigurationError) as broken:
        load_workflows([str(tmp_path / "broken_flows.py")], entry_points=False, registry=Registry())
    assert "SyntaxError" in str(broken.value) and "the module was found" in str(broken.value)
    assert "importable from" not in str(broken.value)
    # and: a name that is nowhere says where it looked
    with pytest.raises(ConfigurationError) as missing:
        load_workflows(["no_such_flows_module"], entry_points=False, registry=Registry())
    assert f"importable from {tmp_path}" in str(missing.value)


def test_stopping_the_second_loom_dev_hands_the_state_file_back_to_the_first_still_running(tmp_path, state_file):
    import subprocess
    import sys

    from loom_lite import state

    def sleeper():
        return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])

    # given: a loom dev (this process) recorded itself, then a second one (a child) replaced its record
    second = sleeper()
    try:
        state.record("http://127.0.0.1:1001", tmp_path / "a.db")
        state.record("http://127.0.0.1:1002", tmp_path / "b.db", pid=second.pid)
        assert json.loads(state_file.read_text())["url"] == "http://127.0.0.1:1002"
        # when: the second stops cleanly
        state.forget(second.pid)
        # then: the first, still running, is found again (it was reported missing: "start Loom")
        assert json.loads(state_file.read_text())["url"] == "http://127.0.0.1:1001"
        assert LoomClient().url.startswith("http://127.0.0.1:1001")
    finally:
        second.kill()
        second.wait()
    # and: a replaced record whose process is gone is not handed back
    third = sleeper()
    try:
        state_file.write_text(json.dumps({"kind": "lite", "url": "http://127.0.0.1:1003", "pids": {"runtime": second.pid}}))
        state.record("http://127.0.0.1:1004", tmp_path / "d.db", pid=third.pid)
        assert "previous" not in json.loads(state_file.read_text())
        state.forget(third.pid)
        assert not state_file.exists()
    finally:
        third.kill()
        third.wait()


def test_lite_answers_sixty_clients_calling_at_once(tmp_path, state_file):
    # given: one runtime, and sixty clients starting executions at the same moment
    from concurrent.futures import ThreadPoolExecutor
    from threading import Barrier

    config = LiteConfig(db=tmp_path / "loom.db", sweep_every_s=60, poll_s=0.05)
    gate = Barrier(60)
    with LiteRuntime(config, make_registry()).start(worker_thread=True) as runtime:
        def start(i: int) -> str:
            gate.wait()
            try:
                return "created" if LoomClient(runtime.url).start("greet", {"name": f"n{i}"}).created else "again"
            except Exception as exc:  # noqa: BLE001 - counted, not raised: the test compares what happened
                return f"{type(exc).__name__}: {exc}"

        # when
        with ThreadPoolExecutor(60) as pool:
            answers = list(pool.map(start, range(60)))
        listed = LoomClient(runtime.url).list_page(workflow="greet", limit=100).executions
    # then: every call answered and every execution there (a short listen backlog reset connections)
    assert answers == ["created"] * 60, [a for a in answers if a != "created"][:3]
    assert len(listed) == 60
