"""`loom mcp` driven by the MCP SDK's client over stdio, against the deployed functions of the local stack:
what an agent does with it, from listing workflows to redriving a failed import after its fix."""

from __future__ import annotations

import os
import sys
import time

import anyio
from mcp import Client, StdioServerParameters


def mcp_session(url: str, body):
    params = StdioServerParameters(command=sys.executable, args=["-m", "loom_cli.main", "--url", url, "mcp"],
                                   env={"PATH": os.environ.get("PATH", ""), "PYTHONPATH": os.pathsep.join(sys.path)})

    async def main():
        async with Client(params, read_timeout_seconds=60) as client:
            return await body(client)
    return anyio.run(main)


async def until(client, eid: str, statuses: tuple[str, ...], timeout_s: float = 60.0) -> dict:
    deadline = time.monotonic() + timeout_s
    while True:
        r = await client.call_tool("get_execution", {"execution_id": eid})
        assert not r.is_error, r.content
        if r.structured_content["status"] in statuses or time.monotonic() > deadline:
            return r.structured_content
        await anyio.sleep(0.3)


def test_an_agent_lists_starts_watches_cancels_and_redrives_through_mcp(loom):
    greet_token, greet_id = loom.new_token("mcp-greet")
    order_token, order_id = loom.new_token("mcp-order")
    import_token, import_id = loom.new_token("mcp-import")
    expense_token, expense_id = loom.new_token("mcp-expense")
    link_token, link_id = loom.new_token("mcp-callback")
    feed = f"payroll-{import_id[:8]}"

    async def body(client):
        out = {"tools": {t.name for t in (await client.list_tools()).tools}}
        out["workflows"] = (await client.call_tool("list_workflows", {})).structured_content
        # a greeting that retries twice, started and followed to the end
        started = await client.call_tool("start_execution", {"workflow": "flaky_greeting",
                                                             "input": {"name": "mcp", "failures": 2},
                                                             "idempotency_token": greet_token})
        out["started"] = started.structured_content
        out["greeting"] = await until(client, greet_id, ("COMPLETED", "FAILED"))
        out["history"] = (await client.call_tool("get_history", {"execution_id": greet_id})).structured_content
        out["listed"] = (await client.call_tool("list_executions", {"workflow": "flaky_greeting",
                                                                    "limit": 100})).structured_content
        # an order asleep, cancelled; redriving it is refused with the API's code
        await client.call_tool("start_execution", {"workflow": "order_fulfillment", "idempotency_token": order_token,
                                                   "input": {"order_id": "o-mcp", "amount_cents": 300}})
        await until(client, order_id, ("SLEEPING",))
        out["cancel"] = (await client.call_tool("cancel_execution", {"execution_id": order_id,
                                                                      "reason": "agent says duplicate"}))
        out["refused"] = await client.call_tool("redrive_execution", {"execution_id": order_id})
        out["event_refused"] = await client.call_tool("send_event", {"execution_id": order_id, "event": "pickup"})
        out["bad_input"] = await client.call_tool("start_execution", {"workflow": "order_fulfillment",
                                                                      "input": {"order_id": ""}})
        # an approval waiting for its answer, which the agent sends
        await client.call_tool("start_execution", {"workflow": "expense_approval", "idempotency_token": expense_token,
                                                   "input": {"expense_id": "x-mcp", "amount_cents": 120}})
        out["waiting"] = await until(client, expense_id, ("WAITING",))
        out["sent"] = await client.call_tool("send_event", {"execution_id": expense_id, "event": "approved",
                                                            "data": {"approved": False}, "event_id": "mcp-1"})
        out["answered"] = await until(client, expense_id, ("COMPLETED", "FAILED"))
        # another, answered through the callback token its first step issued (an approval link)
        await client.call_tool("start_execution", {"workflow": "expense_approval", "idempotency_token": link_token,
                                                   "input": {"expense_id": "x-link", "amount_cents": 75}})
        asked = await until(client, link_id, ("WAITING",))
        out["callback"] = await client.call_tool("complete_callback", {"token": asked["context"]["approval_callback"],
                                                                       "data": {"approved": True}})
        out["again"] = await client.call_tool("complete_callback", {"token": asked["context"]["approval_callback"],
                                                                    "data": {"approved": False}})
        out["linked"] = await until(client, link_id, ("COMPLETED", "FAILED"))
        # the 3 a.m. import: woken, failed, fixed, redriven
        await client.call_tool("start_execution", {"workflow": "fragile_import", "input": {"feed": feed},
                                                   "idempotency_token": import_token})
        await until(client, import_id, ("SLEEPING",))
        assert not (await client.call_tool("wake_execution", {"execution_id": import_id})).is_error
        out["failed"] = await until(client, import_id, ("FAILED", "COMPLETED"))
        (loom.fixes / feed).touch()
        out["redrive"] = await client.call_tool("redrive_execution", {"execution_id": import_id})
        out["redriven"] = await until(client, import_id, ("COMPLETED", "FAILED"))
        return out

    out = mcp_session(loom.url, body)
    assert {"list_workflows", "start_execution", "get_execution", "get_history", "list_executions", "send_event",
            "cancel_execution", "redrive_execution"} <= out["tools"]
    schemas = {w["name"]: w["input_schema"] for w in out["workflows"]["workflows"]}
    assert set(schemas["order_fulfillment"]["required"]) == {"order_id", "amount_cents"}
    assert out["started"]["execution_id"] == greet_id and out["started"]["created"] is True
    assert out["greeting"]["status"] == "COMPLETED", out["greeting"]
    assert [s["attempts"] for s in out["history"]["steps"]][0] == 3
    assert greet_id in [x["execution_id"] for x in out["listed"]["executions"]]
    assert not out["cancel"].is_error and out["cancel"].structured_content["status"] == "CANCELLED"
    assert loom.execution(order_id)["cancel_reason"] == "agent says duplicate"
    refused = out["refused"]
    assert refused.is_error and refused.content[0].text.startswith("not_failed (HTTP 409): ")
    assert refused.structured_content["execution_status"] == "CANCELLED"
    assert out["event_refused"].is_error and out["event_refused"].structured_content["error"] == "execution_ended"
    assert out["waiting"]["status"] == "WAITING" and out["waiting"]["waiting_for"]["event"] == "approved"
    assert not out["sent"].is_error and out["sent"].structured_content == {
        "execution_id": expense_id, "event": "approved", "event_id": "mcp-1", "outcome": "delivered"}
    assert (out["answered"]["status"], out["answered"]["context"]["decision"]) == ("COMPLETED", "declined")
    assert not out["callback"].is_error, out["callback"].content
    assert (out["linked"]["status"], out["linked"]["context"]["decision"]) == ("COMPLETED", "paid")
    assert out["again"].is_error and out["again"].structured_content["error"] == "callback_used"
    assert out["bad_input"].is_error and out["bad_input"].structured_content["error"] == "invalid_input"
    assert out["bad_input"].structured_content["problems"]
    assert out["failed"]["status"] == "FAILED" and out["failed"]["error"]["code"] == "permanent_error"
    assert not out["redrive"].is_error and out["redrive"].structured_content["redrives"] == 1
    assert out["redriven"]["status"] == "COMPLETED", out["redriven"]


def test_loom_mcp_read_only_started_outside_the_repository_finds_the_stack(loom, tmp_path):
    # given: an agent's host starting `loom mcp --read-only` in its own directory, the stack recorded in
    # the per-user state file (this test's own), no --url
    import json

    state = tmp_path / "state" / "local.json"
    state.parent.mkdir()
    state.write_text(json.dumps({"url": loom.url}))
    token, eid = loom.new_token("mcp-ro")
    loom.start("flaky_greeting", {"name": "ro", "failures": 0}, token)
    params = StdioServerParameters(command=sys.executable, args=["-m", "loom_cli.main", "mcp", "--read-only"],
                                   cwd=str(tmp_path), env={"PATH": os.environ.get("PATH", ""), "HOME": str(tmp_path),
                                                           "PYTHONPATH": os.pathsep.join(sys.path),
                                                           "LOOM_STATE_FILE": str(state)})

    async def main():
        async with Client(params, read_timeout_seconds=60) as client:
            tools = {t.name for t in (await client.list_tools()).tools}
            done = await until(client, eid, ("COMPLETED", "FAILED"))
            cancel = await client.call_tool("cancel_execution", {"execution_id": eid})
            return tools, done, cancel

    tools, done, cancel = anyio.run(main)
    # then
    assert tools == {"list_workflows", "get_execution", "get_history", "list_executions", "list_schedules"}
    assert done["status"] == "COMPLETED"
    assert cancel.is_error and cancel.structured_content["error"] == "unknown_tool"
