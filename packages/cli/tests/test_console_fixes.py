"""The console's issue 21 defects, each checked without a browser: the actions it offers, the fan-out
attempts it counts, the step a sleeping execution's header names, its favicon and the characters its
pages use, and how soon a redriven page leaves FAILED."""

from __future__ import annotations

import re
import time
import urllib.request

import pytest
from fake_control_plane import SCENARIOS, execution_doc, scenario
from test_console import api, get, read_events, retrying_order

from loom_cli.console import Console
from loom_cli.sdk import LoomClient

T0 = "2026-01-01T00:00:00.000000Z"
FONT_COVERED = set("·×→←⇤…–—●✓")
"""Non-ASCII characters that DejaVu Sans and Liberation Sans (a plain Debian Chromium's fonts) draw."""


@pytest.fixture
def console(control_plane):
    c = Console(LoomClient(control_plane.url), interval_s=0.1).start()
    yield c
    c.stop()


def _head(html: str) -> str:
    return html.split('<h2>Timeline</h2>')[0]


def _map_with_branches(attempts: list[int]) -> tuple[dict, list[dict]]:
    doc = execution_doc("m-100", workflow="batch_resize", status="COMPLETED", step=3)
    fan_in = {"step_index": 1, "name": "resize_images", "kind": "fanout", "status": "SUCCEEDED",
              "attempts": len(attempts), "started_at": T0, "finished_at": T0, "result": {"resize_images": []},
              "error": None, "final": False}
    branches = [{"step_index": 1, "branch": i, "kind": "branch", "status": "SUCCEEDED", "attempts": a,
                 "started_at": T0, "finished_at": T0, "next_wake_at": None, "result": {"n": i}, "error": None,
                 "generation": 1} for i, a in enumerate(attempts)]
    return doc, [fan_in, *branches]


@pytest.mark.parametrize("retried, shown", [(0, "100 attempts (none retried)"), (15, "115 attempts (15 retried)")])
def test_a_100_branch_map_counts_its_branches_attempts_and_only_real_retries(console, control_plane, retried, shown):
    doc, records = _map_with_branches([2] * retried + [1] * (100 - retried))
    control_plane.add(doc, steps=records)
    _, html = get(console, "/executions/m-100")
    step = html.split('data-step="1"')[1].split("</li>")[0]
    assert shown in step, step
    assert "100 attempts (retried)" not in step


@pytest.mark.parametrize("sleep_step_is_current", [False, True])
def test_a_sleeping_executions_header_names_the_sleep_step_its_timeline_marks(console, control_plane,
                                                                              sleep_step_is_current):
    eid = control_plane.play("sleeping", at=1)
    if sleep_step_is_current:  # how issue 21's engine side records it
        control_plane.update(eid, current_step=2, current_step_name="wait_for_carrier_pickup")
    _, html = get(console, f"/executions/{eid}")
    assert "<dt>step</dt><dd>2/5 wait_for_carrier_pickup</dd>" in _head(html)
    assert 'class="step t-sleeping k-sleep" data-step="2"' in html


def test_redrive_is_offered_only_where_the_api_takes_it(console, control_plane):
    failed = control_plane.add(execution_doc("plain", status="FAILED", step=1, failed_step=1, error={
        "code": "permanent_error", "message": "card declined"}))["execution_id"]
    compensated = control_plane.play("compensated")
    compensation_failed = control_plane.play("compensation_failed")
    assert 'data-action="redrive"' in get(console, f"/executions/{failed}")[1]
    assert 'data-action="redrive"' not in get(console, f"/executions/{compensated}")[1]
    assert 'data-action="redrive"' not in get(console, f"/executions/{compensation_failed}")[1]


def test_send_event_is_offered_only_for_a_workflow_that_waits_for_one(console, control_plane):
    control_plane.add(execution_doc("order", status="RUNNING", step=0))
    control_plane.add(execution_doc("approval", workflow="expense_approval", status="RUNNING", step=0))
    assert 'data-action="send"' not in get(console, "/executions/order")[1]
    assert 'data-action="send" data-event="approved"' in get(console, "/executions/approval")[1]


def test_the_console_has_a_favicon(console):
    _, html = get(console, "/")
    assert '<link rel="icon" type="image/svg+xml" href="/static/favicon.svg">' in html
    for path in ("/static/favicon.svg", "/favicon.ico"):
        with urllib.request.urlopen(console.url.rstrip("/") + path, timeout=10) as r:
            assert r.status == 200 and r.headers["content-type"] == "image/svg+xml"
            assert r.read().startswith(b"<svg ")


def _pages(console, control_plane) -> dict[str, str]:
    retrying_order(control_plane)
    ids = {name: control_plane.play(name, at=at) for name in SCENARIOS
           for at in range(len(scenario(name)["sequence"]))}
    control_plane.add(execution_doc("c-live", workflow="expense_approval", status="RUNNING", step=2, compensating=True,
                                    error={"code": "permanent_error", "message": "no"}, redrives=2))
    control_plane.events.append({"execution_id": "c-live", "event": "approved", "event_id": "e-1", "data": {}})
    paths = ["/", "/workflows", "/workflows/order_fulfillment/start", "/executions/c-live",
             "/executions/6f1c2b1e-0000-4000-8000-00000000000a", *(f"/executions/{eid}" for eid in ids.values())]
    return {path: get(console, path)[1] for path in paths}


def test_pages_use_only_characters_a_plain_debian_chromium_can_draw_and_svg_icons(console, control_plane):
    for path, html in _pages(console, control_plane).items():
        missing = {c for c in html if ord(c) > 127} - FONT_COVERED
        assert not missing, f"{path} uses characters its fonts may lack: {sorted(missing)}"
    _, html = get(console, "/executions/c-live")  # compensating, redriven twice, an event sent
    for name in ("undo", "redrive", "event"):
        assert f'<svg class="icon i-{name}"' in html, name


def test_a_page_redriven_from_the_console_leaves_failed_at_once(control_plane):
    # given: a FAILED execution, followed live (an ended one is polled five times less often: every 5 s)
    console = Console(LoomClient(control_plane.url), interval_s=1.0).start()
    try:
        control_plane.add(execution_doc("f-9", workflow="order_fulfillment", status="FAILED", step=1, failed_step=1,
                                        error={"code": "permanent_error", "message": "card declined"}))
        resp = urllib.request.urlopen(console.url + "sse/executions/f-9", timeout=10)
        (first,) = read_events(resp, 1)
        assert first[1]["status"] == "FAILED"
        time.sleep(0.3)  # the stream is in its (long) pause now
        # when: redriven through the page's API
        redriven_at = time.monotonic()
        status, e = api(console, "POST", "/executions/f-9/redrive")
        assert (status, e["status"]) == (202, "RUNNING")
        (update,) = read_events(resp, 1)
        # then: the page shows it RUNNING well before the next slow poll
        assert update[1]["status"] == "RUNNING"
        assert time.monotonic() - redriven_at < 2.0
        resp.close()
    finally:
        console.stop()


def test_the_start_form_gives_the_browser_patterns_it_can_compile_and_the_rest_as_a_hint(console, control_plane):
    schema = control_plane.workflows["workflows"][0]["input_schema"]
    schema["properties"]["coupon"] = {"type": "string", "pattern": "^[A-Z]{2}-[a-z0-9_-]+$", "title": "Coupon"}
    schema["properties"]["ref"] = {"type": "string", "pattern": "(?i)^ref-\\d+$", "title": "Ref"}
    _, html = get(console, "/workflows/order_fulfillment/start")
    coupon = re.search(r'<input type="text"[^>]*name="coupon"[^>]*>', html).group(0)
    assert 'pattern=".*(?:^[A-Z]{2}-[a-z0-9_\\-]+$).*"' in coupon, coupon
    assert 'title="must match ^[A-Z]{2}-[a-z0-9_-]+$"' in coupon
    ref = re.search(r'<input type="text"[^>]*name="ref"[^>]*>', html).group(0)
    assert "pattern=" not in ref and "must match <code>(?i)^ref-\\d+$</code> (the API checks it)" in html


def test_the_list_offers_older_only_when_there_are_older_and_looks_that_up_once_a_while(console, control_plane):
    # given: exactly a page of executions (the API hands out a token for a full page)
    for i in range(20):
        control_plane.add(execution_doc(f"e-{i:02d}", created_at=f"2026-01-01T00:00:{i:02d}.000000Z"))
    # when / then: no link to an empty page
    _, html = get(console, "/")
    assert 'id="next-page"' not in html
    # and the live list, polling every 0.1 s, looks past the token once, not on every poll
    resp = urllib.request.urlopen(console.url + "sse/list", timeout=10)
    read_events(resp, 1)
    time.sleep(1.0)
    resp.close()
    polls = [r["path"] for r in control_plane.requests if r["path"].startswith("/executions?")]
    peeks = [p for p in polls if "limit=1&" in p or p.endswith("limit=1")]
    assert len(polls) - len(peeks) >= 5 and len(peeks) == 1, polls
    # with one more, there is an older page
    control_plane.add(execution_doc("e-new", created_at="2026-01-02T00:00:00.000000Z"))
    _, html = get(console, "/")
    assert 'id="next-page"' in html
