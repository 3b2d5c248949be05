"""``loom mcp`` as an agent's host starts it: from any directory, before the stack is up, read-only or
with an allow-list of tools, and refusing to start over stdio (a readable JSON-RPC error) when it cannot
serve; its tools' annotations say what they do."""

from __future__ import annotations

import json
import os
import sys

import anyio
import pytest
from fake_control_plane import execution_doc

READ_ONLY = {"list_workflows", "list_schedules", "get_execution", "get_history", "list_executions"}


def params(*args: str, cwd=None, state_file=None):
    from mcp import StdioServerParameters

    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": os.pathsep.join(sys.path), "HOME": str(cwd or "/")}
    if state_file is not None:
        env["LOOM_STATE_FILE"] = str(state_file)
    return StdioServerParameters(command=sys.executable, args=["-m", "loom_cli.main", *args], env=env,
                                 cwd=str(cwd) if cwd else None)


def session(server, body):
    async def main():
        from mcp import Client

        async with Client(server, read_timeout_seconds=30) as client:
            return await body(client)
    return anyio.run(main)


def _leaves(group: BaseException) -> list[BaseException]:
    inner = getattr(group, "exceptions", None)
    return [leaf for e in inner for leaf in _leaves(e)] if inner else [group]


def test_the_annotations_say_which_tools_decide_for_people(control_plane):
    async def body(client):
        return {t.name: t for t in (await client.list_tools()).tools}

    tools = session(params("--url", control_plane.url, "mcp"), body)
    hints = {name: (t.annotations.read_only_hint, t.annotations.destructive_hint) for name, t in tools.items()}
    assert {n for n, (ro, _) in hints.items() if ro} == READ_ONLY
    # waking an event wait times it out (its default, or a failure and compensation); a callback or an
    # event answers for a person (an approval): neither is harmless
    for name in ("wake_execution", "complete_callback", "send_event", "cancel_execution"):
        assert hints[name] == (False, True), name
    assert "times out" in tools["wake_execution"].description or "as a timeout" in tools["wake_execution"].description
    assert "only when they asked you to" in tools["complete_callback"].description


def test_read_only_offers_and_runs_only_the_tools_that_change_nothing(control_plane):
    control_plane.add(execution_doc("r-1"))

    async def body(client):
        names = {t.name for t in (await client.list_tools()).tools}
        got = await client.call_tool("get_execution", {"execution_id": "r-1"})
        cancel = await client.call_tool("cancel_execution", {"execution_id": "r-1"})
        return names, got, cancel

    names, got, cancel = session(params("--url", control_plane.url, "mcp", "--read-only"), body)
    assert names == READ_ONLY
    assert not got.is_error and got.structured_content["status"] == "RUNNING"
    assert cancel.is_error and cancel.structured_content["error"] == "unknown_tool"
    assert not [r for r in control_plane.requests if r["method"] == "POST"]
    assert control_plane.executions["r-1"]["status"] == "RUNNING"


def test_an_allow_list_offers_only_the_tools_it_names(control_plane):
    async def body(client):
        return {t.name for t in (await client.list_tools()).tools}

    assert session(params("--url", control_plane.url, "mcp", "--tools", "list_executions,get_execution"),
                   body) == {"list_executions", "get_execution"}


@pytest.mark.parametrize("args, message", [
    (["--tools", "list_executions,drop_tables"], "--tools names no tool: drop_tables"),
    (["--read-only", "--tools", "get_execution,cancel_execution"], "--tools names cancel_execution"),
])
def test_a_start_that_cannot_serve_says_why_over_stdio(control_plane, args, message):
    from mcp import MCPError

    async def body(client):
        return await client.list_tools()

    with pytest.raises(BaseException) as failed:
        session(params("--url", control_plane.url, "mcp", *args), body)
    errors = [e for e in _leaves(failed.value) if isinstance(e, MCPError)]
    assert errors and message in str(errors[0]), _leaves(failed.value)


def test_started_outside_the_repository_it_finds_the_stack_make_up_recorded(control_plane, tmp_path):
    # given: an agent's host starts `loom mcp` from its own directory, no --url, no LOOM_URL
    state = tmp_path / "state" / "local.json"
    state.parent.mkdir()
    state.write_text(json.dumps({"url": control_plane.url}))
    control_plane.add(execution_doc("o-1"))

    async def body(client):
        return await client.call_tool("get_execution", {"execution_id": "o-1"})

    got = session(params("mcp", cwd=tmp_path, state_file=state), body)
    assert not got.is_error and got.structured_content["execution_id"] == "o-1"


def test_started_before_the_stack_each_call_says_what_is_missing_until_it_is_up(control_plane, tmp_path):
    state = tmp_path / "state" / "local.json"
    control_plane.add(execution_doc("o-2"))

    async def body(client):
        before = await client.call_tool("get_execution", {"execution_id": "o-2"})
        state.parent.mkdir()
        state.write_text(json.dumps({"url": control_plane.url}))  # `make up` now
        after = await client.call_tool("get_execution", {"execution_id": "o-2"})
        return before, after

    before, after = session(params("mcp", cwd=tmp_path, state_file=state), body)
    assert before.is_error and before.content[0].text.startswith("configuration: no control plane URL")
    assert "make up" in before.content[0].text
    assert not after.is_error and after.structured_content["execution_id"] == "o-2"


def test_refusing_over_stdio_answers_each_request_with_the_reason_and_ignores_notifications(capsys):
    import io

    from loom_cli.mcp_server import refuse_over_stdio

    requests = [{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}},
                {"jsonrpc": "2.0", "method": "notifications/initialized"}, "not json",
                {"jsonrpc": "2.0", "id": "b", "method": "tools/list"}]
    stdin = io.StringIO("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in requests))
    stdout = io.StringIO()
    assert refuse_over_stdio("it needs the MCP SDK", stdin, stdout) == 2
    replies = [json.loads(line) for line in stdout.getvalue().splitlines()]
    assert [r["id"] for r in replies] == [1, "b"]
    assert all(r["error"]["message"] == "loom mcp cannot serve: it needs the MCP SDK" for r in replies)
    assert "loom mcp: error: it needs the MCP SDK" in capsys.readouterr().err
