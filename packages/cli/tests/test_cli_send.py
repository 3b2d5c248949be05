"""``loom send ID NAME --data JSON [--event-id ID]`` against the fake control plane (issue 12's event route)."""

from __future__ import annotations

import json

import pytest
from fake_control_plane import execution_doc

from loom_cli.main import main

EID = "6f1c2b1e-0000-4000-8000-0000000000e1"


@pytest.fixture
def waiting(control_plane):
    control_plane.add(execution_doc(EID, status="WAITING", step=2, waiting_for={"event": "approved", "timeout_at": None}))
    return control_plane


def test_send_posts_the_data_and_event_id_and_prints_the_outcome(waiting, capsys):
    # when
    code = main(["--url", waiting.url, "send", EID, "approved", "--data", '{"by": "ada"}', "--event-id", "mail-7"])
    # then
    assert code == 0
    assert capsys.readouterr().out.strip() == f"{EID}  event approved  delivered  (event id mail-7)"
    sent = waiting.requests[-1]
    assert (sent["method"], sent["path"], sent["body"]) == ("POST", f"/executions/{EID}/events/approved",
                                                            {"data": {"by": "ada"}, "event_id": "mail-7"})
    # the same event id again: the API says duplicate, and --json prints its document
    assert main(["--url", waiting.url, "--json", "send", EID, "approved", "--event-id", "mail-7"]) == 0
    assert json.loads(capsys.readouterr().out) == {"execution_id": EID, "event": "approved", "event_id": "mail-7",
                                                   "outcome": "duplicate"}
    assert waiting.requests[-1]["body"] == {"data": {}, "event_id": "mail-7"}


def test_send_of_an_event_nobody_waits_for_yet_is_buffered(waiting, capsys):
    assert main(["--url", waiting.url, "send", EID, "shipped", "--data", "{}"]) == 0
    assert capsys.readouterr().out.strip() == f"{EID}  event shipped  buffered  (event id ev-1)"
    assert waiting.requests[-1]["path"] == f"/executions/{EID}/events/shipped"


def test_send_with_a_name_the_api_would_refuse_names_it_as_typed_and_sends_nothing(waiting, capsys):
    # given: a name outside A-Z a-z 0-9 _ . - (the API would echo it URL-encoded: shipped%2Fby%20carrier)
    seen = len(waiting.requests)
    # when
    code = main(["--url", waiting.url, "send", EID, "shipped/by carrier"])
    # then: a usage error that names it as the user typed it
    err = capsys.readouterr().err
    assert code == 2 and "'shipped/by carrier'" in err and "A-Z a-z 0-9 _ . -" in err, err
    assert "%2F" not in err and len(waiting.requests) == seen


def test_send_again_after_the_end_with_the_same_event_id_is_a_duplicate_not_a_refusal(waiting, capsys):
    # given: an event delivered, then the execution ended
    assert main(["--url", waiting.url, "send", EID, "approved", "--event-id", "mail-9"]) == 0
    waiting.update(EID, status="COMPLETED", waiting_for=None)
    capsys.readouterr()
    # when: a sender retries the same event id (as the API answers it: duplicate, nothing changes)
    code = main(["--url", waiting.url, "send", EID, "approved", "--event-id", "mail-9"])
    # then
    assert code == 0 and capsys.readouterr().out.strip() == f"{EID}  event approved  duplicate  (event id mail-9)"


def test_send_reads_data_from_a_file(waiting, tmp_path, capsys):
    path = tmp_path / "data.json"
    path.write_text('{"rows": 3}')
    assert main(["--url", waiting.url, "send", EID, "approved", "--data", f"@{path}"]) == 0
    assert waiting.requests[-1]["body"] == {"data": {"rows": 3}}


@pytest.mark.parametrize("data, message", [("[1]", "--data must be a JSON object"), ("{bad", "--data is not valid JSON")])
def test_send_with_bad_data_is_a_usage_error_and_sends_nothing(waiting, capsys, data, message):
    seen = len(waiting.requests)
    assert main(["--url", waiting.url, "send", EID, "approved", "--data", data]) == 2
    assert message in capsys.readouterr().err and len(waiting.requests) == seen


def test_send_to_an_ended_or_missing_execution_exits_3_with_the_code(waiting, capsys):
    waiting.update(EID, status="COMPLETED", waiting_for=None)
    assert main(["--url", waiting.url, "send", EID, "approved"]) == 3
    assert f"execution_ended: execution {EID} is COMPLETED" in capsys.readouterr().err
    assert main(["--url", waiting.url, "--json", "send", "nope", "approved"]) == 3
    assert json.loads(capsys.readouterr().err)["error"] == "execution_not_found"


def test_help_lists_every_command(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    for command in ("start", "status", "history", "watch", "list", "cancel", "redrive", "wake", "send", "workflows",
                    "console", "mcp", "dlq"):
        assert f"    {command} " in out or f"    {command}\n" in out, command


def test_status_watch_and_history_show_waits_events_and_compensation(waiting, capsys):
    # given: the execution waits for "approved", and an event was sent to it
    assert main(["--url", waiting.url, "send", EID, "approved", "--event-id", "mail-3"]) == 0
    # then: status names the wait, history lists the event
    assert main(["--url", waiting.url, "status", EID]) == 0
    assert "event approved (no timeout)" in capsys.readouterr().out
    assert main(["--url", waiting.url, "history", EID]) == 0
    out = capsys.readouterr().out
    assert "mail-3" in out and "kept for a wait" in out
    # and once the execution ended, an event no wait took is "not consumed": nothing will take it now
    waiting.update(EID, status="COMPLETED", waiting_for=None)
    assert main(["--url", waiting.url, "history", EID]) == 0
    out = capsys.readouterr().out
    assert "mail-3" in out and "not consumed" in out and "kept for a wait" not in out
    # and a failed compensation ends a watch with exit 1 and both errors on its line
    waiting.update(EID, status="COMPENSATION_FAILED", waiting_for=None, failed_step=2,
                   error={"code": "permanent_error", "message": "card declined"},
                   compensation_error={"code": "step_error", "message": "refund API down"})
    assert main(["--url", waiting.url, "watch", EID, "--interval", "0.01"]) == 1
    out = capsys.readouterr().out
    assert "permanent_error: card declined; compensation failed: step_error: refund API down" in out


def test_watch_prints_a_wait_once_with_its_timeout():
    from loom_cli.watch import progress_line

    line = progress_line(execution_doc(EID, "expense_approval", "WAITING", 1, timer="event",
                                       waiting_for={"event": "approved", "timeout_at": "2999-01-01T00:00:00.000000Z"}))
    assert line.startswith("WAITING   step 1/3 wait_approved  waiting for event approved, ") and "left (until 2999" in line


def test_callback_posts_the_answer_to_the_token_and_prints_which_wait_it_completed(waiting, capsys):
    # when
    code = main(["--url", waiting.url, "callback", "cb-1", "--data", '{"approved": true}'])
    # then
    assert code == 0
    assert capsys.readouterr().out.strip() == "w-1  event approved  delivered  (callback)"
    sent = waiting.requests[-1]
    assert (sent["method"], sent["path"], sent["body"]) == ("POST", "/callbacks/cb-1", {"data": {"approved": True}})


def test_callback_with_an_unknown_token_says_so_and_exits_nonzero(waiting, capsys):
    code = main(["--url", waiting.url, "callback", "nope"])
    err = capsys.readouterr().err
    assert code != 0 and "callback_not_found" in err, err


@pytest.mark.parametrize("argv", [
    ["callback", "-Xq9.tok", "--data", '{"approved": true}'],
    ["callback", "--data", '{"approved": true}', "-Xq9.tok"],
    ["callback", "--data={\"approved\": true}", "-Xq9.tok"],
    ["--json", "callback", "-Xq9.tok", "--data", '{"approved": true}'],
])
def test_callback_takes_a_token_that_starts_with_a_dash_as_the_link_gave_it(waiting, capsys, argv):
    # given: a base64url token can start with "-" (about one in 64), which argparse would read as an option
    # when
    code = main(["--url", waiting.url, *argv])
    # then: it is the token, answered as any other (here unknown to the fake: 404, not a usage error)
    err = capsys.readouterr().err
    assert code == 3 and "callback_not_found" in err and "no callback -Xq9.tok" in err, err
    assert waiting.requests[-1]["path"] == "/callbacks/-Xq9.tok"


def test_a_workflow_named_callback_keeps_its_options():
    from loom_cli.main import _dash_token_last, parser

    argv = ["--url", "http://x", "start", "callback", "--input", "{}"]
    assert _dash_token_last(parser(), argv) == argv
