"""The console's schedules page: reached from the navigation, each schedule with its next firing counting
down and its last firing linked to its execution; in headless Chromium and as markup."""

from __future__ import annotations

import datetime as dt
import json
import urllib.request

import pytest
from browser_support import chromium
from fake_control_plane import DOCUMENTS

from loom_cli.console import Console
from loom_cli.console.schedules_page import schedules_body
from loom_cli.sdk import LoomClient
from loom_cli.sdk.schedules import ScheduleList

DOCUMENT = json.loads((DOCUMENTS / "schedules.json").read_text())


def test_schedules_body_shows_each_schedule_its_countdown_outcome_error_and_problem():
    # when
    html = schedules_body(ScheduleList.model_validate(DOCUMENT), now=dt.datetime(2026, 11, 29, 13, 5, tzinfo=dt.timezone.utc))

    # then
    assert '<tr data-schedule="nightly-greeting">' in html
    assert "23 h 55 min left" in html
    assert '<span class="outcome o-started">started</span> <span class="hint">+1 repeated</span>' in html
    assert '<a href="/executions/0d5f7c1e-3a8b-5c2d-9e4f-6a7b8c9d0e1f">' in html
    assert "allow <span class=\"hint\">(disabled)</span>" in html
    assert "<b>unknown_workflow</b>: no workflow named &#x27;no_such_workflow&#x27;" in html
    assert "workflow &#x27;no_such_workflow&#x27; is not deployed in this control plane" in html


def test_schedules_body_without_schedules_says_where_they_come_from():
    assert "No schedules are deployed" in schedules_body(ScheduleList(schedules=[]))


@pytest.fixture
def console(control_plane):
    c = Console(LoomClient(control_plane.url), interval_s=0.1).start()
    yield c
    c.stop()


def test_schedules_page_is_served_with_the_navigation(console):
    with urllib.request.urlopen(console.url.rstrip("/") + "/schedules", timeout=10) as reply:
        html = reply.read().decode()
    assert reply.status == 200
    assert '<a href="/schedules">Schedules</a>' in html and "<h1>Schedules</h1>" in html


def test_schedules_page_in_chromium_is_linked_from_the_navigation_and_opens_the_execution(console, control_plane):
    # given
    eid = "0d5f7c1e-3a8b-5c2d-9e4f-6a7b8c9d0e1f"
    from fake_control_plane import execution_doc

    control_plane.add(execution_doc(eid, workflow="order_fulfillment", status="COMPLETED"))
    with chromium() as context:
        page = context.new_page()

        # when: from the executions list, through the navigation
        page.goto(console.url.rstrip("/") + "/")
        page.click('header nav a[href="/schedules"]')
        page.wait_for_selector("table.schedules")

        # then
        rows = page.locator("table.schedules tbody tr")
        assert rows.count() == 3
        nightly = page.inner_text('tr[data-schedule="nightly-greeting"]')
        assert "cron(0 13 * * ? *)" in nightly and "started" in nightly and "+1 repeated" in nightly
        assert "not deployed" in page.inner_text('tr[data-schedule="retired"]')
        page.click(f'tr[data-schedule="nightly-greeting"] a[href="/executions/{eid}"]')
        page.wait_for_url(f"**/executions/{eid}")
        page.wait_for_selector("#execution .badge.s-completed")
