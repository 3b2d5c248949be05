"""The command line: up/down/status when nothing runs, and an `up` that cannot start says why; what `run`
records for `loom` (the per-user state file), `status` of a running stack, and `up`'s one summary."""

from __future__ import annotations

import argparse
import json
import os
import types

import pytest

from loom_local import cli, options


def test_down_and_status_with_nothing_running(tmp_path, capsys):
    assert cli.main(["down", "--repo", str(tmp_path)]) == 0
    assert "nothing to stop" in capsys.readouterr().out
    # `make local-status` answers the question: exit 0, no make error
    assert cli.main(["status", "--repo", str(tmp_path)]) == 0
    assert "not running" in capsys.readouterr().out
    assert cli.main(["status", "--json", "--repo", str(tmp_path)]) == 0
    assert json.loads(capsys.readouterr().out) == {"running": False}


def _state(tmp_path, functions: dict) -> dict:
    return {"url": "http://127.0.0.1:4010", "endpoint": "http://127.0.0.1:4011", "region": "us-east-1",
            "pids": {"runtime": os.getpid(), "emulator": 4242, "functions": functions},
            "run_dir": str(tmp_path / ".loom"), "logs": str(tmp_path / ".loom" / "logs"), "queue_url": "q",
            "dlq_url": "dlq", "table": "loom-local"}


def test_status_of_a_running_stack_names_each_functions_processes_or_says_none_run_yet(tmp_path, capsys):
    # given: a stack whose worker has two execution environments and whose sweeper has none yet
    (tmp_path / ".loom").mkdir()
    (tmp_path / ".loom" / "local.json").write_text(json.dumps(_state(
        tmp_path, {"worker": [101, 102], "sweeper": [], "control_plane": [103]})))
    # when
    assert cli.main(["status", "--repo", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    # then
    assert out.startswith("the local stack is up: http://127.0.0.1:4010")
    assert "worker: pids 101, 102" in out and "control_plane: pid 103" in out
    assert "sweeper: no execution environment now (one starts with the function's next invocation)" in out
    assert "[]" not in out


class _FakeStack:
    """Enough of LocalStack for `run` to record it: started, waited on (one refresh), stopped."""

    def __init__(self, opts):
        self.opts, self.run_dir, self.url, self.endpoint = opts, opts.run_dir, "http://127.0.0.1:4010", "http://e"
        opts.run_dir.mkdir(parents=True, exist_ok=True)  # as LocalStack does
        self.log_dir, self.fault_dir = opts.run_dir / "logs", opts.run_dir / "faults"
        self.stack_dir = opts.run_dir / "runs" / "fake"  # the run's own directory (cli.state_of records it)
        queue = types.SimpleNamespace(url="q", dlq_url="dlq")
        worker = types.SimpleNamespace(environment={"LOOM_TABLE_NAME": "t"})
        self.deployment = types.SimpleNamespace(queue=queue, worker=worker, summary=lambda: {})
        self.seen: list[dict] = []
        self.environments: list[int] = []

    def start(self):
        pass

    def pids(self):
        return {"runtime": os.getpid(), "emulator": 1, "functions": {"worker": list(self.environments)}}

    def wait(self, tick=None, every_s=2.0):
        from loom_cli.sdk.locate import state_file

        self.seen.append(json.loads(state_file().read_text()))
        self.environments.append(777)  # an execution environment started meanwhile
        tick()
        self.seen.append(json.loads(state_file().read_text()))

    def stop(self):
        pass


def test_run_records_the_stack_for_loom_in_the_user_state_file_refreshes_it_and_forgets_it(
        tmp_path, monkeypatch, capsys, _own_user_state_file):
    stacks = []
    monkeypatch.setattr(cli, "LocalStack", lambda opts: stacks.append(_FakeStack(opts)) or stacks[-1])
    monkeypatch.setattr(cli, "install_signal_handlers", lambda stack: None)
    # when
    assert cli.main(["run", "--repo", str(tmp_path), "--run-dir", str(tmp_path / ".loom")]) == 0
    # then: recorded with its URL and queues, its current processes refreshed, and gone after the stop
    first, refreshed = stacks[0].seen
    assert (first["url"], first["queue_url"], first["run_dir"]) == ("http://127.0.0.1:4010", "q",
                                                                     str((tmp_path / ".loom").resolve()))
    assert first["pids"]["functions"]["worker"] == [] and refreshed["pids"]["functions"]["worker"] == [777]
    assert not _own_user_state_file.exists() and not (tmp_path / ".loom" / "local.json").exists()
    assert capsys.readouterr().out.count("Loom is up.") == 1


def test_up_prints_loom_is_up_once(tmp_path, monkeypatch, capsys):
    # given: a background `run` that announces itself in its log and records the stack
    run_dir = tmp_path / ".loom"

    class FakeRun:
        def __init__(self, argv, stdout, **kw):
            stdout.write("Loom is up. Control plane: http://127.0.0.1:4010  (Ctrl-C stops everything)\n")
            stdout.flush()
            (run_dir / "local.json").write_text(json.dumps(_state(tmp_path, {})))
            self.pid, self.returncode = os.getpid(), None

        def poll(self):
            return None

    monkeypatch.setattr(cli.subprocess, "Popen", FakeRun)
    # when
    assert cli.main(["up", "--repo", str(tmp_path)]) == 0
    # then
    out = capsys.readouterr().out
    assert out.count("Loom is up") == 1, out
    assert "Control plane Function URL: http://127.0.0.1:4010" in out


def test_up_that_cannot_start_reports_the_reason_and_leaves_nothing(tmp_path, capsys):
    empty = tmp_path / "no-zips"
    empty.mkdir()
    code = cli.main(["up", "--repo", str(tmp_path), "--zip-dir", str(empty)])
    out = capsys.readouterr()
    assert code == 1
    assert "make build-local" in out.out  # the background runtime's own message, echoed while waiting
    assert "exited with status 1 while starting" in out.err
    assert not (tmp_path / ".loom" / "local.json").exists()
    assert cli.main(["down", "--repo", str(tmp_path)]) == 0


def test_option_syntax_errors_are_explained():
    with pytest.raises(argparse.ArgumentTypeError, match="NAME=VALUE"):
        options.parse_kv("lease_s")
    with pytest.raises(argparse.ArgumentTypeError, match="ROLE:NAME=VALUE"):
        options.parse_role_kv("db:X=1")
    assert options.parse_role_kv("worker:X=a=b") == ("worker", "X", "a=b")
