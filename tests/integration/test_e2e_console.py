"""`loom console` in headless Chromium against the deployed functions of the session's local stack.

The journeys of issue 14: start order_fulfillment from the form generated from its input schema and
watch its timeline advance live (no reload) through retries and a durable sleep skipped with Wake; cancel
an execution; redrive a failed fragile_import after fixing its feed; a refusal shown as the API's error.
Screenshots of the list and the timeline go to a temporary directory, or to $LOOM_CONSOLE_SCREENSHOTS
(`make console-screenshots` refreshes docs/console/ that way).

Chromium is Debian's (/usr/bin/chromium, installed by .ci/run); without it these tests fail, never skip.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import time
from pathlib import Path

import pytest

from loom_cli.sdk import LoomClient
from loom_cli.console import Console

CHROMIUM = os.environ.get("LOOM_CHROMIUM", "/usr/bin/chromium")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]
ORDER = {"order_id": "o-console", "amount_cents": 4200, "items": [{"sku": "loom-mug", "qty": 2}],
         "email": "ada@example.com"}


@pytest.fixture(scope="module")
def console(loom):
    c = Console(LoomClient(loom.url, sign=False), interval_s=0.25).start()
    yield c
    c.stop()


@pytest.fixture(scope="module")
def browser():
    if not (os.path.isfile(CHROMIUM) and os.access(CHROMIUM, os.X_OK)):
        pytest.fail(f"the console's browser tests need Chromium at {CHROMIUM} (LOOM_CHROMIUM overrides it): "
                    "apt-get install -y chromium (.ci/run does this)", pytrace=False)
    from playwright.sync_api import sync_playwright

    profile = tempfile.mkdtemp(prefix="loom-chromium-")
    with sync_playwright() as p:
        context = p.chromium.launch_persistent_context(profile, executable_path=CHROMIUM, headless=True, args=ARGS,
                                                       viewport={"width": 1366, "height": 900})
        context.set_default_timeout(30_000)
        yield context
        context.close()
    shutil.rmtree(profile, ignore_errors=True)


@pytest.fixture
def page(browser, console):
    page = browser.new_page()
    page.base = console.url.rstrip("/")
    yield page
    page.close()


@pytest.fixture(scope="module")
def shots(tmp_path_factory) -> Path:
    target = os.environ.get("LOOM_CONSOLE_SCREENSHOTS")
    path = Path(target) if target else tmp_path_factory.mktemp("console-screenshots")
    path.mkdir(parents=True, exist_ok=True)
    return path


def confirm(page, title: str) -> None:
    page.wait_for_selector("#confirm[open]")
    assert title in page.inner_text("#confirm-title")
    page.click("#confirm-yes")


def open_execution(page, eid: str) -> None:
    """The execution's page, once its live view has shown its first update (it comes at once on connecting)."""
    page.goto(page.base + f"/executions/{eid}")
    page.wait_for_function("() => Number(document.querySelector('#execution').dataset.updates || 0) >= 1", timeout=30_000)


def watch(page, until, timeout_s: float = 60.0, text: str = "") -> list[tuple]:
    """Sample what the page shows (status badge, each step's state, whether the timeline shows ``text``)
    until ``until(sample)``; returns every distinct sample."""
    seen: list[tuple] = []
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        sample = page.evaluate("""(text) => [
            (document.querySelector('#execution .head .badge') || {}).textContent || '',
            Array.from(document.querySelectorAll('#timeline > li.step')).map(li =>
                li.className.match(/t-(\\w+)/)[1]).join(','),
            !!text && (document.querySelector('#timeline') || {innerText: ''}).innerText.includes(text)]""", text)
        if not seen or seen[-1] != tuple(sample):
            seen.append(tuple(sample))
        if until(sample):
            return seen
        time.sleep(0.1)
    raise AssertionError(f"the page did not get there in {timeout_s:g} s; it showed: {seen}")


def test_start_from_the_form_and_watch_retries_and_a_woken_sleep_live(loom, page, shots):
    # given: the order's id, known before the start (the form takes an idempotency token), and its
    # charge failing three times (each attempt's body raises), so the timeline has retries to show
    token, eid = loom.new_token("console")
    loom.faults.arm("step.enter", action="raise", match={"execution_id": eid, "step_name": "charge_payment"},
                    count=3, message="card network timed out (injected by the test)")
    page.goto(page.base + "/workflows/order_fulfillment/start")
    page.fill("#in-order_id", ORDER["order_id"])
    page.fill("#in-amount_cents", str(ORDER["amount_cents"]))
    page.fill("#in-email", ORDER["email"])
    page.fill("#in-token", token)
    # a start the input model refuses (qty 0) is shown as the API answered, each field's problem listed
    page.fill("#in-items", '[{"sku": "loom-mug", "qty": 0}]')
    page.click("#start-submit")
    confirm(page, "Start order_fulfillment?")
    page.wait_for_selector("#confirm-error:not([hidden])")
    refused = page.inner_text("#confirm-error")
    assert "invalid_input (HTTP 400)" in refused and "items.0.qty: " in refused, refused
    page.click("#confirm-back")
    # when: fixed, started from the form, confirmed
    page.fill("#in-items", '[{"sku": "loom-mug", "qty": 2}]')
    page.click("#start-submit")
    confirm(page, "Start order_fulfillment?")
    page.wait_for_url(re.compile(f"/executions/{eid}$"))
    page.evaluate("window.__no_reload = true")
    # then: the timeline advances by itself through the retries into the 20 s sleep
    seen = watch(page, lambda s: s[1].split(",")[2] == "sleeping", text="card network timed out (injected by the test)")
    assert "retrying" in [s[1].split(",")[1] for s in seen], seen      # the backoff, with its countdown
    assert any(s[2] for s in seen), seen                               # each failed attempt's error, in full
    step1 = page.inner_text('#timeline li[data-step="1"]')
    assert "4 attempts (retried)" in step1, step1
    assert re.search(r"attempt [123] failed: .*injected by the test", step1), step1  # kept by the live view
    assert re.search(r"\d+ s left", page.inner_text('#timeline li[data-step="2"]'))
    assert page.inner_text("#execution .head .badge") == "SLEEPING"
    page.screenshot(path=str(shots / "timeline.png"), full_page=True)
    # when: woken from the page
    page.click('button[data-action="wake"]')
    confirm(page, "Wake it now?")
    page.wait_for_selector("#banner.ok")
    # then: it completes well before the sleep would have ended, shown live, never reloaded
    woke = time.monotonic()
    watch(page, lambda s: s[0] == "COMPLETED", timeout_s=30)
    assert time.monotonic() - woke < 18
    assert page.evaluate("window.__no_reload") is True
    assert page.locator("#timeline li.t-done").count() == 5
    assert "wake by local" in page.inner_text("ul.ops")
    e = loom.execution(eid)
    assert e["status"] == "COMPLETED" and e["context"]["order_id"] == "o-console"
    assert e["context"]["items"] == ORDER["items"] and e["context"]["amount_cents"] == 4200
    # and the list shows it
    page.goto(page.base + "/?workflow=order_fulfillment")
    page.wait_for_selector(f'tr[data-id="{eid}"]', timeout=30_000)


def test_cancel_from_the_page_and_a_refused_wake_shows_the_api_error(loom, page):
    # given: two orders asleep in their carrier-pickup wait
    ids = []
    for label in ("console-cancel", "console-refused"):
        token, eid = loom.new_token(label)
        loom.start("order_fulfillment", {**ORDER, "order_id": f"o-{label}"}, token)
        ids.append(eid)
    for eid in ids:
        loom.wait(eid, until=("SLEEPING",))
    cancel_id, refused_id = ids
    # when: one is cancelled from its page, with a reason
    open_execution(page, cancel_id)
    page.click('button[data-action="cancel"]')
    page.fill("#act-reason", "customer called")
    confirm(page, "Cancel this execution?")
    # then
    watch(page, lambda s: s[0] == "CANCELLED", timeout_s=20)
    assert "customer called" in page.inner_text(".facts")
    assert not page.is_visible('button[data-action="cancel"]')
    e = loom.execution(cancel_id)
    assert (e["status"], e["cancel_reason"], e["cancelled_by"]) == ("CANCELLED", "customer called", "local")
    # when: the other is woken from its page, but someone cancels it while the dialog is open
    open_execution(page, refused_id)
    page.click('button[data-action="wake"]')
    page.wait_for_selector("#confirm[open]")
    loom.api.request("POST", f"/executions/{refused_id}/cancel", {"reason": "ops, from a terminal"})
    page.click("#confirm-yes")
    # then: the API's refusal is shown as it came, code and message
    page.wait_for_selector("#confirm-error:not([hidden])")
    assert "execution_ended (HTTP 409)" in page.inner_text("#confirm-error")
    page.click("#confirm-back")
    watch(page, lambda s: s[0] == "CANCELLED", timeout_s=20)
    assert loom.execution(refused_id)["status"] == "CANCELLED"


def test_redrive_a_failed_import_from_its_page_after_the_fix(loom, page, shots):
    # given: tonight's import, woken early into its poison row: FAILED
    token, eid = loom.new_token("console-3am")
    feed = f"payroll-{eid[:8]}"
    loom.start("fragile_import", {"feed": feed}, token)
    loom.wait(eid, until=("SLEEPING",))
    loom.api.request("POST", f"/executions/{eid}/wake")
    assert loom.wait(eid)["status"] == "FAILED"
    open_execution(page, eid)
    head = page.inner_text("#execution")
    assert "permanent_error" in head and feed in head          # the error in full
    assert page.locator('#timeline li[data-step="2"].t-failed').count() == 1
    # when: the feed is fixed and the execution redriven from its page
    (loom.fixes / feed).touch()
    page.click('button[data-action="redrive"]')
    confirm(page, "Redrive from the failed step?")
    # then: it runs again under the same id, live, to COMPLETED, with the redrive marked
    watch(page, lambda s: s[0] == "COMPLETED", timeout_s=60)
    assert "redriven ×1" in page.inner_text("#execution .head")
    assert "after import_rows failed" in page.inner_text("ul.ops")
    e = loom.execution(eid)
    assert (e["status"], e["redrives"]) == ("COMPLETED", 1)
    # the list of everything this session ran, newest first (the index shows an end a moment later)
    page.goto(page.base + "/")
    page.wait_for_selector(f'tr[data-id="{eid}"]')
    assert page.locator("table.executions tbody tr").first.get_attribute("data-id") == eid
    page.screenshot(path=str(shots / "list.png"), full_page=True)


def test_send_an_event_from_the_page_to_a_waiting_approval(loom, page):
    # given: an expense approval waiting for its "approved" event
    token, eid = loom.new_token("console-send")
    loom.start("expense_approval", {"expense_id": "x-console", "amount_cents": 990}, token)
    loom.wait(eid, until=("WAITING",))
    open_execution(page, eid)
    assert page.locator('#timeline li.t-waiting[data-step="1"]').count() == 1
    assert "waiting for event approved" in page.inner_text('#timeline li[data-step="1"]')
    # when: the answer is sent from the dialog (the event's name is filled in from what it waits for)
    page.click('button[data-action="send"]')
    assert page.input_value("#act-event") == "approved"
    page.fill("#act-data", '{"approved": true, "approver": "ana"}')
    page.fill("#act-event-id", f"console-{eid[:8]}")
    confirm(page, "Send an event")
    page.wait_for_selector("#banner.ok")
    assert "delivered" in page.inner_text("#banner")
    # then: it resumes and completes, live, and the event is listed with the step that consumed it
    watch(page, lambda s: s[0] == "COMPLETED", timeout_s=30)
    events = page.inner_text("ul.events")
    assert f"console-{eid[:8]}" in events and "consumed by step 1" in events
    assert loom.execution(eid)["context"]["decision"] == "paid"



def test_a_compensated_saga_and_a_map_on_their_timelines(loom, page):
    # given: an order whose carrier refuses it after the charge (the refund compensates), woken early
    token, saga_id = loom.new_token("console-saga")
    loom.start("order_saga", {**ORDER, "order_id": "o-saga", "items": [{"sku": "undeliverable", "qty": 1}]}, token)
    loom.wait(saga_id, until=("SLEEPING",))
    loom.api.request("POST", f"/executions/{saga_id}/wake")
    ended = loom.wait(saga_id, until=("FAILED", "COMPENSATION_FAILED", "COMPLETED"))
    assert (ended["status"], ended["compensated"]) == ("FAILED", True), ended
    # then: its page shows the failure, the undo step and the compensation that ran
    open_execution(page, saga_id)
    text = page.inner_text("#execution")
    assert page.inner_text("#execution .head .mark.compensated").strip() == "compensated" and "undeliverable" in text
    assert not page.is_visible('button[data-action="redrive"]')   # the API refuses to redrive a compensated one
    assert "undo: refund_payment" in page.inner_text('#timeline li[data-step="1"]')
    assert page.locator('#timeline li[data-step="3"].t-failed').count() == 1
    undo = page.inner_text("ol.compensation")
    assert "refund_payment" in undo and "undoes step 1 charge_payment" in undo and "refunded_cents" in undo, undo
    # given: a map over 12 images, at most 10 at once, every 5th failing its first attempt
    token, map_id = loom.new_token("console-map")
    loom.start("batch_resize", {"count": 12, "flaky_every": 5}, token)
    open_execution(page, map_id)
    # then: followed live to the end, its branches listed on the map step
    watch(page, lambda s: s[0] == "COMPLETED", timeout_s=90)
    step = page.inner_text('#timeline li[data-step="1"]')
    assert "12 branches: 12 done" in step, step
