"""``loom mcp`` driven by the MCP SDK's own client over stdio (a subprocess), against the fake control plane."""

from __future__ import annotations

import os
import sys

import anyio
from fake_control_plane import execution_doc


TOOLS = {"list_workflows", "list_schedules", "start_execution", "get_execution", "get_history", "list_executions", "send_event",
         "complete_callback", "cancel_execution", "redrive_execution", "wake_execution"}


def server_params(url: str):
    from mcp import StdioServerParameters

    return StdioServerParameters(command=sys.executable, args=["-m", "loom_cli.main", "--url", url, "mcp"],
                                 env={"PATH": os.environ.get("PATH", ""), "PYTHONPATH": os.pathsep.join(sys.path)})


def run_session(url: str, body):
    async def main():
        from mcp import Client

        async with Client(server_params(url), read_timeout_seconds=30) as client:
            return await body(client)
    return anyio.run(main)


def test_the_tools_are_listed_with_descriptions_and_json_schemas(control_plane):
    async def body(client):
        return (await client.list_tools()).tools

    tools = {t.name: t for t in run_session(control_plane.url, body)}
    assert set(tools) == TOOLS
    for t in tools.values():
        assert len(t.description) > 80 and t.input_schema["type"] == "object", t.name
        assert t.input_schema["additionalProperties"] is False
    assert tools["start_execution"].input_schema["required"] == ["workflow"]
    assert tools["send_event"].input_schema["required"] == ["execution_id", "event"]
    assert tools["list_executions"].input_schema["properties"]["status"]["enum"] == [
        "RUNNING", "SLEEPING", "WAITING", "COMPLETED", "FAILED", "CANCELLED", "COMPENSATION_FAILED", "LIVE"]
    assert tools["get_execution"].annotations.read_only_hint is True
    assert tools["cancel_execution"].annotations.destructive_hint is True


def test_an_agent_starts_inspects_signals_and_cancels_an_execution(control_plane):
    async def body(client):
        out = {"workflows": await client.call_tool("list_workflows", {})}
        out["start"] = await client.call_tool("start_execution", {
            "workflow": "order_fulfillment", "input": {"order_id": "o-1", "amount_cents": 100},
            "idempotency_token": "t-1"})
        eid = out["start"].structured_content["execution_id"]
        out["status"] = await client.call_tool("get_execution", {"execution_id": eid})
        out["history"] = await client.call_tool("get_history", {"execution_id": eid})
        out["list"] = await client.call_tool("list_executions", {"workflow": "order_fulfillment", "status": "RUNNING",
                                                                 "limit": 5})
        out["list_lower"] = await client.call_tool("list_executions", {"status": "running", "limit": 5})
        out["send"] = await client.call_tool("send_event", {"execution_id": eid, "event": "approved",
                                                            "data": {"by": "agent"}, "event_id": "e-1"})
        out["cancel"] = await client.call_tool("cancel_execution", {"execution_id": eid, "reason": "test"})
        return eid, out

    eid, out = run_session(control_plane.url, body)
    assert not any(r.is_error for r in out.values()), {k: r.content for k, r in out.items() if r.is_error}
    schemas = {w["name"]: w["input_schema"] for w in out["workflows"].structured_content["workflows"]}
    assert schemas["order_fulfillment"]["required"] == ["order_id", "amount_cents"]
    assert out["start"].structured_content["created"] is True
    assert out["status"].structured_content["status"] == "RUNNING"
    assert out["history"].structured_content == {"execution_id": eid, "steps": [], "operations": [], "events": [],
                                                 "next_token": None}
    assert [x["execution_id"] for x in out["list"].structured_content["executions"]] == [eid]
    # a status in lower case, as the API, the CLI and the SDK take it, is sent as the API reads it
    assert [x["execution_id"] for x in out["list_lower"].structured_content["executions"]] == [eid]
    assert out["send"].structured_content == {"execution_id": eid, "event": "approved", "event_id": "e-1",
                                              "outcome": "buffered"}
    assert out["cancel"].structured_content["status"] == "CANCELLED"
    assert '"status": "CANCELLED"' in out["cancel"].content[0].text  # the same document as text
    sent = {(r["method"], r["path"].split("?")[0]): r["body"] for r in control_plane.requests}
    assert sent[("POST", "/executions")]["idempotency_token"] == "t-1"
    assert sent[("POST", f"/executions/{eid}/events/approved")] == {"data": {"by": "agent"}, "event_id": "e-1"}
    assert sent[("POST", f"/executions/{eid}/cancel")] == {"reason": "test"}
    assert [r["path"] for r in control_plane.requests if r["path"].startswith("/executions?")] == [
        "/executions?workflow=order_fulfillment&status=RUNNING&limit=5", "/executions?status=RUNNING&limit=5"]


def test_refusals_come_back_as_tool_errors_with_the_api_code_and_message(control_plane):
    control_plane.add(execution_doc("done-1", status="COMPLETED", step=5))

    async def body(client):
        return [await client.call_tool("redrive_execution", {"execution_id": "done-1"}),
                await client.call_tool("get_execution", {"execution_id": "nope"}),
                await client.call_tool("start_execution", {"workflow": "order_fulfillment", "input": {"order_id": "x"}}),
                await client.call_tool("list_executions", {"limit": 0}),
                await client.call_tool("send_event", {"execution_id": "done-1"}),
                await client.call_tool("complete_callback", {"token": "cb-1", "data": {"approved": True}}),
                await client.call_tool("complete_callback", {"token": "nope"})]

    redrive, missing, invalid, bad_limit, no_event, callback, no_callback = run_session(control_plane.url, body)
    assert not callback.is_error and callback.structured_content["outcome"] == "delivered"
    assert control_plane.events[-1]["data"] == {"approved": True}
    assert no_callback.is_error and no_callback.content[0].text == "callback_not_found (HTTP 404): no callback nope"
    assert redrive.is_error and redrive.content[0].text == "not_failed (HTTP 409): execution done-1 is COMPLETED"
    assert redrive.structured_content["execution_status"] == "COMPLETED"
    assert missing.is_error and missing.structured_content["error"] == "execution_not_found"
    assert invalid.is_error and invalid.structured_content["problems"] == [
        {"field": "amount_cents", "problem": "Field required", "type": "missing"}]
    # arguments outside the tool's schema are refused before any request
    assert bad_limit.is_error and bad_limit.structured_content["error"] == "invalid_argument", bad_limit.content
    assert "nothing was sent. The tool's inputSchema lists what list_executions takes" in bad_limit.content[0].text
    assert no_event.is_error and "'event' is a required property" in no_event.content[0].text
    assert not [r for r in control_plane.requests if "limit=0" in r["path"]]


def test_only_loom_mcp_imports_the_sdk():
    # the CLI and the console stay on the standard library and botocore; `mcp` loads for `loom mcp` alone
    import subprocess

    code = ("import sys, loom_cli.main, loom_cli.console, loom_cli.console.server; "
            "from loom_cli.main import parser; parser().parse_args(['console']); "
            "print(sorted(m for m in ('mcp', 'anyio', 'starlette', 'playwright') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_list_schedules_returns_the_schedules_document_with_next_and_last_firing(control_plane):
    # given
    async def body(client):
        return await client.call_tool("list_schedules", {})

    # when
    result = run_session(control_plane.url, body)

    # then
    assert not result.is_error, result.content
    document = result.structured_content
    assert document == control_plane.schedules
    assert document["schedules"][0]["last_firing"]["outcome"] == "started"


def test_list_workflows_is_the_api_document_and_whole_number_floats_go_as_integers(control_plane):
    control_plane.workflows = {**control_plane.workflows, "live": {"complete": True, "read": 3},
                               "undeployed": [{"workflow": "order_fulfillment", "version": 1, "live": 2}]}
    control_plane.add(execution_doc("failed-1", status="FAILED", step=2))

    async def body(client):
        return [await client.call_tool("list_workflows", {}),
                await client.call_tool("list_executions", {"limit": 5.0}),
                await client.call_tool("redrive_execution", {"execution_id": "failed-1", "to_version": 1.0})]

    workflows, listed, redriven = run_session(control_plane.url, body)
    # then: what GET /workflows says, undeployed versions' live executions included; 5.0 and 1.0 sent as 5 and 1
    assert workflows.structured_content == control_plane.workflows
    assert not listed.is_error and not redriven.is_error, (listed.content, redriven.content)
    assert [r["path"] for r in control_plane.requests if r["path"].startswith("/executions?")] == ["/executions?limit=5"]
    assert [r["body"] for r in control_plane.requests if r["path"] == "/executions/failed-1/redrive"] == [{"to_version": 1}]
