"""``loom cost`` and the ledger in ``loom status`` / ``loom history``, against a loopback fake of the API."""

from __future__ import annotations

import json
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from loom_cli import prices
from loom_cli.main import main

LEDGERS = {
    "e1": ("orders", {"requests": 10, "read_units": 2.0, "write_units": 8.0, "messages": 2, "lambda_ms": 300}),
    "e2": ("orders", {"requests": 6, "read_units": 1.0, "write_units": 4.0, "messages": 1, "lambda_ms": 100}),
    "e3": ("reports", {"requests": 4, "read_units": 0.5, "write_units": 3.0, "messages": 1, "lambda_ms": 50}),
    "e4": ("reports", None),  # started, never delivered yet
}


MAPPED = {"e2"}
"""Executions whose history has a map's branches, and no fan-in yet."""
FANNED_IN = {"e1"}
"""Executions whose history has a map that fanned in."""


class FakeApi:
    def __init__(self):
        self.gets: list[str] = []
        self.status = {"e2": "RUNNING"}  # the others ended COMPLETED

    def route(self, path: str, query: dict) -> tuple[int, dict]:
        ids = [i for i in LEDGERS if query.get("workflow") in (None, LEDGERS[i][0])]
        if path == "/executions":
            start = int(query.get("next_token", 0))
            limit = int(query["limit"])
            page = ids[start:start + min(limit, 2)]  # two a page: the command must follow the token
            token = str(start + len(page)) if start + len(page) < len(ids) else None
            return 200, {"executions": [{"execution_id": i, "workflow": LEDGERS[i][0], "status": "COMPLETED",
                                         "created_at": "2026-01-01T00:00:00.000000Z"} for i in page],
                         "next_token": token}
        eid = path.rsplit("/", 1)[-1]
        if path.endswith("/history"):
            eid = path.split("/")[2]
            branch = {"step_index": 0, "branch": 0, "kind": "branch", "status": "SUCCEEDED", "attempts": 1}
            fan_in = {"step_index": 0, "name": "m", "kind": "fanout", "status": "SUCCEEDED", "attempts": 1}
            steps = [branch] if eid in MAPPED else [fan_in, branch] if eid in FANNED_IN else []
            return 200, {"execution_id": eid, "steps": steps, "operations": [], "events": [], "cost": LEDGERS[eid][1]}
        self.gets.append(eid)
        doc = {"execution_id": eid, "workflow": LEDGERS[eid][0], "status": self.status.get(eid, "COMPLETED"),
               "total_attempts": 2}
        if LEDGERS[eid][1] is not None:
            doc["cost"] = LEDGERS[eid][1]
        return 200, doc


@pytest.fixture
def api():
    fake = FakeApi()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            split = urllib.parse.urlsplit(self.path)
            status, payload = fake.route(split.path, dict(urllib.parse.parse_qsl(split.query)))
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    fake.url = f"http://127.0.0.1:{server.server_address[1]}"
    yield fake
    server.shutdown()
    server.server_close()


def test_cost_sums_each_workflows_ledgers_over_every_page_and_prices_them(api, capsys):
    # when
    assert main(["--url", api.url, "--json", "cost", "--memory-mb", "1024"]) == 0
    doc = json.loads(capsys.readouterr().out)
    # then: each execution read once; the sums are the ledgers'; dollars at the one price table
    assert sorted(api.gets) == ["e1", "e2", "e3", "e4"]
    orders, reports = doc["workflows"]["orders"], doc["workflows"]["reports"]
    assert (orders["executions"], orders["requests"], orders["write_units"], orders["messages"]) == (2, 16, 12.0, 3)
    assert (reports["executions"], reports["without_ledger"], reports["requests"]) == (2, 1, 4)
    expected = (3 * prices.LAMBDA_REQUEST.usd / 1e6 + 0.4 * prices.LAMBDA_GB_SECOND.usd
                + 3.0 * prices.DYNAMODB_READ_REQUEST_UNIT.usd / 1e6 + 12.0 * prices.DYNAMODB_WRITE_REQUEST_UNIT.usd / 1e6
                + 9 * prices.SQS_REQUEST.usd / 1e6)
    assert orders["usd"] == pytest.approx(expected)
    assert doc["more"] is False and doc["prices_checked"] == prices.PRICES_CHECKED


def test_cost_with_max_below_the_matches_says_there_were_more(api, capsys):
    # when
    assert main(["--url", api.url, "cost", "--max", "3"]) == 0
    out = capsys.readouterr().out
    # then: three read, the table printed, and the cut named with what to do
    assert len(api.gets) == 3
    assert "orders" in out and "usd/execution" in out
    assert "only the newest 3 were summed (raise --max" in out


def test_cost_for_one_workflow_reads_only_its_executions(api, capsys):
    assert main(["--url", api.url, "cost", "--workflow", "reports"]) == 0
    out = capsys.readouterr().out
    assert sorted(api.gets) == ["e3", "e4"] and "orders" not in out
    assert "1 execution(s) have no ledger (not delivered yet, ended before any delivery" in out


@pytest.mark.parametrize("value", ["0", "-3", "many"])
def test_cost_with_a_bad_max_is_a_usage_error(api, capsys, value):
    with pytest.raises(SystemExit) as exit_:
        main(["--url", api.url, "cost", "--max", value])
    assert exit_.value.code == 2 and "at least 1" in capsys.readouterr().err and api.gets == []


def test_status_and_history_show_the_ledger_with_its_price(api, capsys):
    assert main(["--url", api.url, "status", "e1"]) == 0
    out = capsys.readouterr().out
    assert "10 DynamoDB requests, 2 read units, 8 write units, 2 messages, 300 worker ms: about $" in out
    assert main(["--url", api.url, "history", "e1"]) == 0
    out = capsys.readouterr().out
    assert "cost so far: 10 DynamoDB requests" in out and "branch deliveries" not in out  # its map fanned in


def test_history_of_a_fan_out_that_has_not_fanned_in_says_its_branch_deliveries_are_not_in_the_ledger_yet(api, capsys):
    assert main(["--url", api.url, "history", "e2"]) == 0
    assert ("; the branch deliveries of a parallel or map step that has not fanned in are not in it (its fan-in "
            "adds them)") in capsys.readouterr().out


def test_history_of_an_execution_that_ended_before_its_fan_in_does_not_promise_the_fan_in(api, capsys):
    # given: cancelled while its map's branches ran: no fan-in will come
    api.status["e2"] = "CANCELLED"
    # when
    assert main(["--url", api.url, "history", "e2"]) == 0
    out = capsys.readouterr().out
    # then
    assert "never fanned in are not in it (the execution ended before its fan-in)" in out and "fan-in adds" not in out


def test_watch_ends_with_the_history_as_loom_history_prints_it_with_its_cost(api, capsys):
    assert main(["--url", api.url, "watch", "e1", "--interval", "0.001"]) == 0
    out = capsys.readouterr().out
    assert main(["--url", api.url, "history", "e1"]) == 0
    assert out.endswith(capsys.readouterr().out)  # the closing history is the whole of what history prints
    assert "cost so far: 10 DynamoDB requests" in out


@pytest.mark.parametrize("usd, text", [(0, "$0"), (1.49e-6, "$0.00000149"), (0.045, "$0.0450"), (0.9996, "$1.00"),
                                       (12.345, "$12.35")])
def test_a_dollar_amount_reads_without_an_exponent(usd, text):
    from loom_cli.prices import usd_text

    assert usd_text(usd) == text


def test_one_message_is_one_message():
    from loom_cli.render import cost_text
    from loom_cli.sdk.models import Cost

    line = cost_text(Cost(requests=2, read_units=0, write_units=3, messages=1, lambda_ms=11))
    assert "2 DynamoDB requests, 0 read units, 3 write units, 1 message, 11 worker ms: about $0.0000" in line


@pytest.mark.parametrize("memory", ["99999", "64", "0"])
def test_cost_refuses_a_memory_lambda_does_not_have(api, capsys, memory):
    with pytest.raises(SystemExit) as done:
        main(["--url", api.url, "cost", "--memory-mb", memory])
    assert done.value.code == 2 and "128 to 10240" in capsys.readouterr().err and api.gets == []


def test_cost_of_a_workflow_with_no_executions_says_where_the_deployed_ones_are_listed(api, capsys):
    assert main(["--url", api.url, "cost", "--workflow", "nope"]) == 0
    assert "no executions match (of workflow 'nope': `loom workflows` lists the deployed ones)" in capsys.readouterr().out
