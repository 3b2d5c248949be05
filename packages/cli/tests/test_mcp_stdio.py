"""``loom mcp`` answers every line a client sends: a line the MCP SDK cannot read gets the JSON-RPC error
the specification names, with the request's id, instead of no answer at all (``loom_cli/mcp_stdio.py``)."""

from __future__ import annotations

import json
import subprocess
import sys
import threading

import pytest

from loom_cli.mcp_stdio import INVALID_REQUEST, PARSE_ERROR, SKIP, problem

INITIALIZE = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
              "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}


def _validate(line: str):
    import mcp.types as types
    return types.jsonrpc_message_adapter.validate_json(line, by_name=False)


@pytest.mark.parametrize(("line", "code", "request_id"), [
    ("garbage {", PARSE_ERROR, None),
    ('{"jsonrpc": "2.0", "id": 7}', INVALID_REQUEST, 7),
    ('{"jsonrpc": "1.0", "id": "a", "method": "tools/list"}', INVALID_REQUEST, "a"),
    ('{"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": {"name": "x", "arguments": {"id": "\\ud800"}}}',
     INVALID_REQUEST, 9),
    ('[1, 2]', INVALID_REQUEST, None),
    ('{"jsonrpc": "2.0", "id": 1.5, "method": "tools/list"}', INVALID_REQUEST, None),
    ('{"jsonrpc": "2.0", "id": {"a": 1}, "method": "tools/list"}', INVALID_REQUEST, None),
    # the SDK's parser takes NaN and Infinity; JSON has neither (before: passed on as a tool's argument)
    ('{"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "x", "arguments": {"n": NaN}}}',
     PARSE_ERROR, None),
    ('{"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {"name": "x", "arguments": {"n": -Infinity}}}',
     PARSE_ERROR, None),
], ids=["not-json", "no-method", "another-version", "lone-surrogate", "not-an-object", "fractional-id", "object-id",
        "nan", "infinity"])
def test_a_line_the_sdk_cannot_read_is_answered_with_its_json_rpc_error(line, code, request_id):
    found = problem(line, _validate)
    assert found is not None and found is not SKIP
    assert found[:2] == (code, request_id)


def test_a_readable_line_a_blank_line_and_an_invalid_notification_are_not_answered_here():
    assert problem(json.dumps(INITIALIZE), _validate) is None
    assert problem("\n", _validate) is SKIP
    assert problem(json.dumps({**INITIALIZE, "params": {**INITIALIZE["params"], "clientInfo": {
        "name": "NaN Infinity", "version": "1"}}}), _validate) is None  # the words inside a string are fine
    assert problem('{"jsonrpc": "1.0", "method": "notifications/initialized"}', _validate) is SKIP


def test_loom_mcp_answers_every_request_in_order_and_goes_on_serving():
    # given: a client that sends readable requests around lines the SDK cannot read
    lines = [json.dumps(INITIALIZE), json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}),
             "garbage {", json.dumps({"jsonrpc": "2.0", "id": 7}),
             '{"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": {"name": "get_execution", '
             '"arguments": {"execution_id": "\\ud800"}}}',
             json.dumps({"jsonrpc": "2.0", "id": 10, "method": "tools/list"})]
    # when: each line sent, and the answers read before the client hangs up
    server = subprocess.Popen([sys.executable, "-m", "loom_cli.main", "--url", "http://127.0.0.1:9", "mcp"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    watchdog = threading.Timer(60, server.kill)  # an answer that never comes fails the test, not the run
    watchdog.start()
    try:
        server.stdin.write("\n".join(lines) + "\n")
        server.stdin.flush()
        replies = [json.loads(server.stdout.readline()) for _ in range(5)]
    finally:
        watchdog.cancel()
        server.stdin.close()
        server.wait(timeout=30)
    # then: one answer per request, each with its id; the server still serves after them
    assert [r.get("id") for r in replies] == [1, None, 7, 9, 10]
    assert replies[1]["error"]["code"] == PARSE_ERROR and replies[2]["error"]["code"] == INVALID_REQUEST
    assert replies[3]["error"]["code"] == INVALID_REQUEST
    assert "list_workflows" in {t["name"] for t in replies[4]["result"]["tools"]}
    server.stdout.close()
    server.stderr.close()


def test_loom_mcp_answers_the_calls_in_flight_when_the_client_closes_stdin_right_after_them():
    # given: an API that takes a moment to answer (the call is in flight when stdin ends), and a client that
    # writes its requests and closes stdin at once (printf ... | loom mcp)
    import http.server
    import time

    from fake_control_plane import execution_doc

    served: list[str] = []

    class SlowApi(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - the stdlib's name
            time.sleep(1.5)
            served.append(self.path)
            body = json.dumps(execution_doc("e-1", status="RUNNING")).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    api = http.server.ThreadingHTTPServer(("127.0.0.1", 0), SlowApi)
    threading.Thread(target=api.serve_forever, daemon=True).start()
    lines = [json.dumps(INITIALIZE), json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}),
             json.dumps({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                         "params": {"name": "get_execution", "arguments": {"execution_id": "e-1"}}}),
             json.dumps({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "no_such_tool",
                                                                                       "arguments": {}}})]
    try:
        # when
        done = subprocess.run([sys.executable, "-m", "loom_cli.main", "--url", f"http://127.0.0.1:{api.server_port}",
                               "mcp"], input="\n".join(lines) + "\n", capture_output=True, text=True, timeout=60)
    finally:
        api.shutdown()
        api.server_close()
    # then: every request answered before the server stopped, the slow call's with what the API said
    replies = {r["id"]: r for r in map(json.loads, done.stdout.splitlines())}
    assert sorted(replies) == [1, 2, 3], (done.stdout, done.stderr)
    assert served == ["/executions/e-1"] and "e-1" in replies[2]["result"]["content"][0]["text"], replies[2]
    assert replies[3]["result"]["isError"] is True and done.returncode == 0, replies[3]
