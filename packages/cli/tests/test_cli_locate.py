"""Where loom finds the control plane: --url, $LOOM_URL, then the local stack's per-user state file, the
same from any directory."""

from __future__ import annotations

import json

import pytest

from loom_cli.main import main


def test_url_resolution_prefers_flag_then_env_then_the_local_stacks_state_file(control_plane, tmp_path, monkeypatch,
                                                                             capsys, state_file):
    # given: no URL anywhere, in a directory that is no checkout
    monkeypatch.chdir(tmp_path)
    assert main(["workflows"]) == 2
    err = capsys.readouterr().err
    assert "no control plane URL" in err and str(state_file) in err and "make up" in err
    # when: `make up` recorded the stack in the per-user state file, it is found from any directory
    state_file.parent.mkdir(parents=True)
    state_file.write_text(json.dumps({"url": control_plane.url}))
    assert main(["workflows"]) == 0
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    assert main(["workflows"]) == 0
    # then: $LOOM_URL wins over it, and --url over both
    monkeypatch.setenv("LOOM_URL", "http://127.0.0.1:9")
    assert main(["workflows"]) == 4
    assert main(["--url", control_plane.url, "workflows"]) == 0


def test_an_unreadable_state_file_is_a_usage_error_naming_it(state_file, capsys):
    state_file.parent.mkdir(parents=True)
    state_file.write_text("{not json")
    assert main(["workflows"]) == 2
    err = capsys.readouterr().err
    assert str(state_file) in err and "make down && make up" in err


def test_the_state_file_is_per_user_under_xdg_state_home_unless_loom_state_file_names_one(monkeypatch, tmp_path):
    from loom_cli.sdk import state_file

    monkeypatch.delenv("LOOM_STATE_FILE")
    monkeypatch.delenv("XDG_STATE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert state_file() == tmp_path / "home" / ".local" / "state" / "loom" / "local.json"
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    assert state_file() == tmp_path / "xdg" / "loom" / "local.json"
    monkeypatch.setenv("LOOM_STATE_FILE", str(tmp_path / "mine.json"))
    assert state_file() == tmp_path / "mine.json"


def test_a_recorded_loom_dev_that_was_killed_is_named_with_what_to_do(state_file, capsys):
    # given: `loom dev` recorded itself, then was SIGKILLed (its record stays: only a clean stop removes it)
    import subprocess
    import sys
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    state_file.parent.mkdir(parents=True)
    state_file.write_text(json.dumps({"kind": "lite", "url": "http://127.0.0.1:9", "db": "/srv/flows/.loom/loom.db",
                                      "pids": {"runtime": gone.pid}}))
    # when
    code = main(["workflows"])
    # then: not a refused connection and a hint about `make up`, but the process that is gone and how to resume
    err = capsys.readouterr().err
    assert code == 4
    assert f"the `loom dev` recorded in {state_file} (pid {gone.pid}, on /srv/flows/.loom/loom.db) is not running" in err
    assert "start it again (`loom dev <workflows>`" in err and "make up" not in err


def test_without_a_url_the_message_offers_loom_dev_beside_the_local_stack(state_file, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["workflows"]) == 2
    err = capsys.readouterr().err
    assert "`loom dev <workflows>` (one process on SQLite, no AWS) or `make up` (the local AWS stack)" in err


def test_an_env_dir_named_on_the_command_wins_over_an_ambient_loom_url(control_plane, tmp_path, monkeypatch, capsys):
    # given: $LOOM_URL left pointing at another deployment, and an environment whose outputs name this one
    # (a stand-in `terraform` on PATH prints them as `terraform output -json` does)
    import os
    import stat

    bin_dir, env_dir = tmp_path / "bin", tmp_path / "envs" / "prod"
    bin_dir.mkdir()
    env_dir.mkdir(parents=True)
    fake = bin_dir / "terraform"
    fake.write_text("#!/bin/sh\necho '" + json.dumps({"function_url": {"value": control_plane.url}}) + "'\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    monkeypatch.setenv("LOOM_URL", "http://127.0.0.1:9")
    # when
    code = main(["--env-dir", str(env_dir), "--no-sign", "workflows"])
    # then: the command went where --env-dir said, not where the environment pointed
    assert code == 0, capsys.readouterr().err
    assert control_plane.requests


@pytest.mark.parametrize("how", ["killed, not yet reaped", "its pid reused by a later process"])
def test_a_recorded_loom_dev_whose_pid_still_answers_but_is_not_it_is_named_as_gone(state_file, capsys, how):
    # given: the recorded pid answers kill(pid, 0), but as a zombie, or as a process started after the record
    import subprocess
    import sys
    import time
    if how == "killed, not yet reaped":
        proc, recorded_at = subprocess.Popen([sys.executable, "-c", "pass"]), time.time()
        deadline = time.time() + 10
        while open(f"/proc/{proc.pid}/stat").read().rsplit(")", 1)[1].split()[0] != "Z" and time.time() < deadline:
            time.sleep(0.02)
    else:
        proc, recorded_at = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"]), time.time() - 60
    try:
        state_file.parent.mkdir(parents=True)
        state_file.write_text(json.dumps({"kind": "lite", "url": "http://127.0.0.1:9", "db": "/srv/f.db",
                                          "pids": {"runtime": proc.pid}, "started_at": recorded_at}))
        # when
        code = main(["workflows"])
    finally:
        proc.kill()
        proc.wait()
    # then
    err = capsys.readouterr().err
    assert code == 4 and f"(pid {proc.pid}, on /srv/f.db) is not running any more" in err, err


def test_a_killed_loom_dev_started_beside_another_hands_the_commands_to_the_one_still_serving(state_file, control_plane,
                                                                                            capsys):
    # given: a second loom dev recorded over the first (kept under "previous"), then killed (no clean stop to
    # hand the file back); the first still serves
    import os
    import subprocess
    import sys
    import time
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    state_file.parent.mkdir(parents=True)
    first = {"kind": "lite", "url": control_plane.url, "db": "/srv/f.db", "pids": {"runtime": os.getpid()},
             "started_at": time.time()}
    state_file.write_text(json.dumps({"kind": "lite", "url": "http://127.0.0.1:9", "db": "/srv/f.db",
                                      "pids": {"runtime": gone.pid}, "started_at": time.time(), "previous": first}))
    # when
    code = main(["workflows"])
    # then: the command reached the first one
    assert code == 0, capsys.readouterr().err
    assert control_plane.requests
    # and when that one is gone too, the newest record's process is named as gone
    first["pids"]["runtime"] = gone.pid
    state_file.write_text(json.dumps({"kind": "lite", "url": "http://127.0.0.1:9", "db": "/srv/f.db",
                                      "pids": {"runtime": gone.pid}, "started_at": time.time(), "previous": first}))
    assert main(["workflows"]) == 4 and f"(pid {gone.pid}, on /srv/f.db) is not running any more" in \
        capsys.readouterr().err


@pytest.mark.parametrize("argv, message", [
    (["start", "signup", "--input", "{bad"], "--input is not valid JSON"),
    (["send", "e-1", "approved", "--data", "[1]"], "--data must be a JSON object, got list"),
    (["callback", "tok", "--data", "@missing.json"], "cannot read missing.json"),
])
def test_a_malformed_json_argument_is_told_before_the_missing_control_plane(tmp_path, monkeypatch, capsys, state_file,
                                                                            argv, message):
    # given: no URL anywhere
    monkeypatch.chdir(tmp_path)

    # when
    code = main(argv)

    # then: the argument's own mistake, not the URL's (which the user would fix first, only to be told the other)
    err = capsys.readouterr().err
    assert code == 2 and message in err and "no control plane URL" not in err
