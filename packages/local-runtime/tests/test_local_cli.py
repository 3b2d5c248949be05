"""The command line: up/down/status when nothing runs, and an `up` that cannot start says why."""

from __future__ import annotations

import argparse

import pytest

from loom_local import cli, options


def test_down_and_status_with_nothing_running(tmp_path, capsys):
    assert cli.main(["down", "--repo", str(tmp_path)]) == 0
    assert "nothing to stop" in capsys.readouterr().out
    assert cli.main(["status", "--repo", str(tmp_path)]) == 3
    assert "not running" in capsys.readouterr().out


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
