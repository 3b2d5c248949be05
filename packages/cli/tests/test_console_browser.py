"""The console in headless Chromium against the fake control plane: the start form, live updates without
a reload, confirmed actions, and an API refusal shown in the page."""

from __future__ import annotations

import re

import pytest
from browser_support import chromium_browser
from fake_control_plane import execution_doc

from loom_cli.sdk import LoomClient
from loom_cli.console import Console


@pytest.fixture(scope="module")
def browser():
    with chromium_browser() as browser:
        yield browser


@pytest.fixture
def page(control_plane, browser):
    console = Console(LoomClient(control_plane.url), interval_s=0.1).start()
    context = browser.new_context(viewport={"width": 1366, "height": 900})
    context.set_default_timeout(15_000)
    try:
        page = context.new_page()
        page.console_url = console.url.rstrip("/")
        yield page
    finally:
        context.close()
    console.stop()


def confirm(page, expect_title: str) -> None:
    dialog = page.locator("#confirm")
    assert dialog.is_visible() and expect_title in page.inner_text("#confirm-title")
    page.click("#confirm-yes")


def test_start_from_the_generated_form_then_watch_wake_and_cancel_live(page, control_plane):
    # given: the form generated from order_fulfillment's input schema
    page.goto(page.console_url + "/workflows/order_fulfillment/start")
    page.fill("#in-order_id", "o-browser")
    page.fill("#in-amount_cents", "1200")
    page.fill("#in-items", '[{"sku": "mug", "qty": 2}]')
    page.fill("#in-token", "tok-1")
    # when: submitted and confirmed
    page.click("#start-submit")
    assert '"order_id": "o-browser"' in page.inner_text("#confirm-body")
    confirm(page, "Start order_fulfillment?")
    # then: the new execution's timeline, and the API got typed values (email left empty is left out)
    page.wait_for_url(re.compile(r"/executions/00000000-0000-4000-8000-000000000001$"))
    start = next(r for r in control_plane.requests if r["method"] == "POST")
    assert start["body"] == {"workflow": "order_fulfillment", "idempotency_token": "tok-1", "input": {
        "order_id": "o-browser", "amount_cents": 1200, "items": [{"sku": "mug", "qty": 2}], "gift": False,
        "speed": "standard"}}
    eid = "00000000-0000-4000-8000-000000000001"
    page.wait_for_selector('#execution .badge.s-running')
    # live: the execution goes to sleep, and the page shows it without a reload
    control_plane.update(eid, status="SLEEPING", current_step=3, timer="sleep", next_wake_at="2999-01-01T00:00:00.000000Z",
                         steps=[{"step_index": 2, "name": "wait_for_carrier_pickup", "status": "SUCCEEDED",
                                 "attempts": 1, "started_at": "2026-01-02T00:00:00.000000Z",
                                 "finished_at": "2026-01-02T00:00:00.000000Z", "result": {"wake_at": "2999-01-01T00:00:00.000000Z"},
                                 "error": None, "final": False}])
    page.wait_for_selector('li.t-sleeping[data-step="2"]')
    assert re.search(r"\d+ d \d+ h left", page.inner_text('li[data-step="2"]'))
    page.click('button[data-action="wake"]')
    confirm(page, "Wake it now?")
    page.wait_for_selector("#banner.ok")
    assert "Woken" in page.inner_text("#banner")
    assert any(r["method"] == "POST" and r["path"] == f"/executions/{eid}/wake" for r in control_plane.requests)
    page.wait_for_selector('#execution .badge.s-running')
    page.click('button[data-action="cancel"]')
    page.fill("#act-reason", "customer called")
    page.press("#act-reason", "Enter")                   # Enter confirms, as the button does
    page.wait_for_selector('#execution .badge.s-cancelled')
    assert "customer called" in page.inner_text(".facts")
    assert not page.is_visible('button[data-action="cancel"]')


def test_a_refused_action_shows_the_api_error_and_an_event_is_sent(page, control_plane):
    # given: an execution waiting for an event
    control_plane.add(execution_doc("w-1", workflow="expense_approval", status="WAITING", step=1,
                                    waiting_for={"event": "approved", "timeout_at": None}))
    page.goto(page.console_url + "/executions/w-1")
    # when: an event is sent from the dialog, prefilled with the awaited event's name
    page.click('button[data-action="send"]')
    assert page.input_value("#act-event") == "approved"
    page.fill("#act-data", '{"by": "ada"}')
    page.fill("#act-event-id", "mail-1")
    confirm(page, "Send an event")
    page.wait_for_selector("#banner.ok")
    assert "approved" in page.inner_text("#banner") and "delivered" in page.inner_text("#banner")
    assert control_plane.events[-1] == {"execution_id": "w-1", "event": "approved", "event_id": "mail-1",
                                        "data": {"by": "ada"}}
    # and: the execution ends while the dialog is open; the API's refusal is shown, nothing else happens
    page.click('button[data-action="send"]')
    control_plane.update("w-1", status="COMPLETED", current_step=5, waiting_for=None)
    page.click("#confirm-yes")
    page.wait_for_selector("#confirm-error:not([hidden])")
    text = page.inner_text("#confirm-error")
    assert "execution_ended (HTTP 409): execution w-1 is COMPLETED" in text, text
    assert "execution_ended" in page.inner_text("#banner.err")
    page.click("#confirm-back")
    page.wait_for_selector('#execution .badge.s-completed')
    assert len(control_plane.events) == 1


def test_the_list_filters_pages_and_shows_new_executions_live(page, control_plane):
    for i in range(23):
        control_plane.add(execution_doc(f"e-{i:02d}", status="FAILED" if i % 2 else "COMPLETED",
                                        created_at=f"2026-01-01T00:00:{i:02d}.000000Z"))
    page.goto(page.console_url + "/")
    assert page.locator("table.executions tbody tr").count() == 20
    page.click("#next-page")
    page.wait_for_url(re.compile(r"next_token=2026"))
    assert page.locator("table.executions tbody tr").count() == 3
    page.goto(page.console_url + "/")
    page.select_option("#f-status", "FAILED")
    page.wait_for_url(re.compile(r"status=FAILED"))
    assert page.locator("table.executions tbody tr").count() == 11
    control_plane.add(execution_doc("brand-new", status="FAILED", created_at="2026-01-03T00:00:00.000000Z"))
    page.wait_for_selector('tr[data-id="brand-new"]')
    assert page.locator("table.executions tbody tr").first.get_attribute("data-id") == "brand-new"
    # a start form with a field that is not JSON says which, and sends nothing
    page.goto(page.console_url + "/workflows/order_fulfillment/start")
    page.click("#start-submit")                          # the required fields: the browser says so first
    assert page.evaluate("document.querySelector('#in-order_id').validity.valueMissing")
    page.fill("#in-order_id", "o")
    page.fill("#in-amount_cents", "5")
    page.fill("#in-items", "[not json")
    page.click("#start-submit")
    page.wait_for_selector("#banner.err")
    assert "items is not JSON" in page.inner_text("#banner")
    assert not [r for r in control_plane.requests if r["method"] == "POST"]
    # a start the API refuses lists each field's problem
    page.goto(page.console_url + "/workflows/free_form/start")
    page.fill("#in-raw", '{"x": 1}')
    refusal = {"error": "invalid_input", "message": "input for workflow 'free_form' is invalid",
                             "problems": [{"field": "x", "problem": "Input should be a valid string", "type": "string_type"}]}
    control_plane.refusal = (400, refusal)
    page.click("#start-submit")
    confirm(page, "Start free_form?")
    page.wait_for_selector("#confirm-error:not([hidden])")
    assert "x: Input should be a valid string" in page.inner_text("#confirm-error .problems")


PATTERNS = ["^[A-Z]{2}-[a-z0-9_-]+$", r"^\d{3}-\d{4}$", "[a-z]+(?:-[a-z]+)*", r"^(?P<year>\d{4})-\d{2}$",
            r"^[\w.+-]+@[\w-]+\.[\w.-]+$", r"^\(\d+\)$", r"^a{2,}b?$", "^[^/]+$", r"^\$[0-9]+(\.[0-9]{2})?$",
            "^[&!#%,:;<=>@`~]$", r"^[\[\]{}()|]+$", "x{y}z", r"^\-?\d+$"]


def test_the_start_forms_patterns_compile_in_chromium_and_check_the_value(page, control_plane):
    from loom_cli.console.patterns import html_pattern

    # given: a field whose schema pattern has a bare "-" in a class (valid JavaScript, refused by the v flag)
    schema = control_plane.workflows["workflows"][0]["input_schema"]
    schema["properties"]["coupon"] = {"type": "string", "pattern": "^[A-Z]{2}-[a-z0-9_-]+$", "title": "Coupon"}
    page.goto(page.console_url + "/workflows/order_fulfillment/start")
    # when / then: the browser checks it (a pattern it could not compile would let anything through)
    page.fill("#in-coupon", "not a coupon")
    assert page.evaluate("document.querySelector('#in-coupon').validity.patternMismatch") is True
    page.fill("#in-coupon", "AB-spring_sale-2")
    assert page.evaluate("document.querySelector('#in-coupon').validity.patternMismatch") is False
    # and every translated pattern compiles as the browser compiles the attribute (anchored, v flag)
    translated = {p: html_pattern(p) for p in PATTERNS}
    assert all(translated.values()), translated
    refused = page.evaluate("""(ps) => ps.filter(p => { try { new RegExp('^(?:' + p + ')$', 'v'); return false; }
                                                         catch (e) { return true; } })""", list(translated.values()))
    assert refused == [], refused


def test_a_cancel_of_an_execution_undoing_a_failure_says_it_changed_nothing(page, control_plane):
    # given: an execution that failed at step 3 and is undoing its completed steps
    control_plane.add(execution_doc("u-1", status="RUNNING", step=1, compensating=True, failed_step=3,
                                    error={"code": "permanent_error", "message": "the carrier refuses"}))
    page.goto(page.console_url + "/executions/u-1")
    # when: the operator cancels it
    page.click('button[data-action="cancel"]')
    confirm(page, "Cancel this execution?")
    # then: the API answered it unchanged, and the page says so (it said "Cancelled by -.")
    page.wait_for_selector("#banner.ok")
    banner = page.inner_text("#banner")
    assert "Not cancelled: it is already undoing its completed steps" in banner and "Cancelled by" not in banner


def test_a_start_sends_the_token_as_typed_and_a_repeat_says_it_started_nothing_new(page, control_plane):
    # given: the form, with a token typed with a space at its end
    def start_once() -> None:
        page.goto(page.console_url + "/workflows/free_form/start")
        page.fill("#in-raw", '{"n": 1}')
        page.fill("#in-token", "tok-x ")
        page.click("#start-submit")
        assert '"tok-x "' in page.inner_text("#confirm-body")  # the token shown as it goes, space and all
        confirm(page, "Start free_form?")

    # when: started, then started again with the same token and input
    start_once()
    page.wait_for_url(re.compile(r"/executions/00000000-0000-4000-8000-000000000001$"))
    start_once()
    # then: the token went as typed (the CLI and the SDK send it so: one token, one execution on every
    # surface), and the repeat says nothing new started, linking the execution it names
    page.wait_for_selector("#banner.ok")
    banner = page.inner_text("#banner")
    assert "Already started with this token and input: nothing new started" in banner, banner
    assert "00000000-0000-4000-8000-000000000001" in banner and page.url.endswith("/workflows/free_form/start")
    starts = [r for r in control_plane.requests if r["method"] == "POST" and r["path"] == "/executions"]
    assert [s["body"]["idempotency_token"] for s in starts] == ["tok-x ", "tok-x "]


def test_a_wait_offers_a_wake_that_says_it_times_the_wait_out_and_a_form_refusal_names_no_http_status(page,
                                                                                                    control_plane):
    # given: an execution waiting for an event
    control_plane.add(execution_doc("w-2", workflow="expense_approval", status="WAITING", step=1, timer="event",
                                    waiting_for={"event": "approved", "timeout_at": "2999-01-01T00:00:00Z"}))
    page.goto(page.console_url + "/executions/w-2")
    # when: woken (the API takes a wake of a wait: it times the wait out)
    page.click('button[data-action="wake"]')
    assert "The wait times out now" in page.inner_text("#confirm-body")
    confirm(page, "Wake it now?")
    page.wait_for_selector("#banner.ok")
    assert any(r["method"] == "POST" and r["path"] == "/executions/w-2/wake" for r in control_plane.requests)
    # and: an event whose data is an array is refused in the page, before any request: no HTTP status named
    control_plane.update("w-2", status="WAITING", timer="event")
    page.goto(page.console_url + "/executions/w-2")
    page.click('button[data-action="send"]')
    page.fill("#act-data", "[1, 2]")
    page.click("#confirm-yes")
    page.wait_for_selector("#confirm-error:not([hidden])")
    text = page.inner_text("#confirm-error")
    assert "invalid_request: the data must be a JSON object, not an array" in text and "HTTP 0" not in text, text


def test_a_live_update_during_a_click_waits_for_its_release_and_the_click_opens_its_dialog(page, control_plane):
    import time

    # given: a sleeping execution's page, its first live update shown
    control_plane.add(execution_doc("p-1", status="SLEEPING", step=2))
    page.goto(page.console_url + "/executions/p-1")
    page.wait_for_function("() => Number(document.querySelector('#execution').dataset.updates || 0) >= 1")
    shown = page.evaluate("Number(document.querySelector('#execution').dataset.updates)")
    # when: the cancel button is pressed, the execution changes (its update comes while the button is held), and
    # the button is released
    page.hover('button[data-action="cancel"]')
    page.mouse.down()
    control_plane.update("p-1", status="RUNNING", current_step=3)
    deadline = time.monotonic() + 0.8
    while time.monotonic() < deadline:  # the console polls every 0.1 s: the update is in the page by now
        assert page.evaluate("Number(document.querySelector('#execution').dataset.updates)") == shown
        time.sleep(0.05)
    page.mouse.up()
    # then: the click reached the button it pressed (its dialog is open), and the held update was shown after it
    page.wait_for_selector("#confirm[open]")
    assert "Cancel this execution?" in page.inner_text("#confirm-title")
    page.wait_for_selector("#execution .badge.s-running")
    assert page.evaluate("Number(document.querySelector('#execution').dataset.updates)") == shown + 1
