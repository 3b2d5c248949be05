"""Schedules end to end: terraform/envs/local deploys three EventBridge Scheduler schedules (conftest's
SCHEDULES), the local runtime reads them from the emulator and fires them at the deployed control plane on
its manual schedule clock, so three days of a daily schedule pass in seconds.

- a firing starts its execution with the schedule's input; a repeated delivery of it starts nothing new;
- ``skip``: the next day's firing starts nothing while the previous expense still waits for its approval,
  and the day after (approved by then) starts again; ``allow`` starts every day regardless;
- a schedule whose workflow is not deployed fails each firing, recorded and shown, nothing started;
- ``loom schedules`` shows each schedule with its next and last firing.
"""

from __future__ import annotations

import datetime as dt
import json

from loom_cli.main import main

from engine_core.schedules.fire import execution_id_for

DAY = dt.timedelta(days=1)


def fired(deliveries) -> dict[str, list[tuple[str, str | None]]]:
    """Each schedule's firings of these deliveries: (outcome, execution id) from the control plane's reply."""
    out: dict[str, list[tuple[str, str | None]]] = {}
    for d in deliveries:
        assert d.status == "ok", (d.schedule, d.status, d.error)
        out.setdefault(d.schedule, []).append((d.result["outcome"], d.result["execution_id"]))
    return out


def schedules_document(loom) -> dict[str, dict]:
    status, body = loom.api.request("GET", "/schedules")
    assert status == 200, body
    return {s["name"]: s for s in body["schedules"]}


def test_daily_schedules_fire_on_the_local_clock_once_per_firing_with_skip_and_allow(loom, capsys, schedule_clock_start):
    player = loom.stack.schedules
    assert player is not None and player.manual
    assert sorted(player.states) == ["e2e-allow", "e2e-retired", "e2e-skip"]

    # when: the first day passes: up to the last of the schedules' first firings. Not the clock's start plus a
    # day: a firing between the clock's start and the schedules' creation (while the stack booted) is one
    # Scheduler never makes, so the next comes a day later (a suite started a minute before 08:30 UTC missed
    # e2e-allow's first firing that way)
    first = max(t for t in (player.next_firing(name) for name in player.states) if t is not None)
    assert schedule_clock_start < first <= schedule_clock_start + DAY + dt.timedelta(hours=1)
    day1 = fired(player.advance_to(first))

    # then: both expense schedules started theirs; the retired one failed and started nothing
    (skip1, skip1_id), = day1["e2e-skip"]
    (allow1, allow1_id), = day1["e2e-allow"]
    (retired1, retired1_id), = day1["e2e-retired"]
    assert (skip1, allow1, retired1, retired1_id) == ("started", "started", "failed", None)
    t_skip1 = player.states["e2e-skip"].delivered[0].scheduled_at
    assert skip1_id == execution_id_for("e2e-skip", t_skip1)
    waiting = loom.wait(skip1_id, until=("WAITING",))
    assert waiting["waiting_for"]["event"] == "approved"
    assert loom.wait(allow1_id, until=("WAITING",))["context"]["expense_id"] == "scheduled-allow"
    assert loom.execution(skip1_id)["context"]["expense_id"] == "scheduled-skip"

    # when: Scheduler delivers the first firing again (at-least-once)
    again = player.deliver("e2e-skip", t_skip1)

    # then: nothing new started
    assert (again.result["outcome"], again.result["execution_id"]) == ("duplicate", skip1_id)
    doc = schedules_document(loom)
    assert doc["e2e-skip"]["last_firing"]["duplicates"] == 1

    # when: the second day; the first expense still waits for its approval
    day2 = fired(player.advance_to(first + DAY))

    # then: skip starts nothing, allow starts another
    assert day2["e2e-skip"] == [("skipped", skip1_id)]
    (allow2, allow2_id), = day2["e2e-allow"]
    assert allow2 == "started" and allow2_id != allow1_id
    assert loom.wait(allow2_id, until=("WAITING",))["status"] == "WAITING"
    assert loom.execution(allow1_id)["status"] == "WAITING"

    # when: the first expense is approved and completes; the third day fires
    status, _ = loom.api.request("POST", f"/executions/{skip1_id}/events/approved",
                                 {"data": {"approved": True, "approver": "ana"}, "event_id": "sched-1"})
    assert status == 202
    assert loom.wait(skip1_id)["status"] == "COMPLETED"
    day3 = fired(player.advance_to(first + 2 * DAY))

    # then: skip starts again, with the third firing's own execution
    (skip3, skip3_id), = day3["e2e-skip"]
    t_skip3 = player.states["e2e-skip"].delivered[-1].scheduled_at
    assert (skip3, skip3_id) == ("started", execution_id_for("e2e-skip", t_skip3))
    assert t_skip3 == t_skip1 + 2 * DAY

    # and `loom schedules` shows each schedule with its next and last firing
    capsys.readouterr()
    assert main(["--url", loom.url, "--json", "schedules"]) == 0
    shown = {s["name"]: s for s in json.loads(capsys.readouterr().out)["schedules"]}
    assert (shown["e2e-skip"]["last_firing"]["outcome"], shown["e2e-skip"]["last_firing"]["execution_id"]) == (
        "started", skip3_id)
    assert shown["e2e-retired"]["last_firing"]["error"]["code"] == "unknown_workflow"
    assert "workflow 'retired_report' is not deployed" in shown["e2e-retired"]["problem"]
    assert shown["e2e-allow"]["timezone"] == "Europe/Paris" and shown["e2e-allow"]["next_firing"].endswith(":30:00.000000Z")
    assert main(["--url", loom.url, "schedules"]) == 0
    table = capsys.readouterr().out
    assert "e2e-skip" in table and "started" in table and "skip" in table

    # the schedules' executions were started by their schedule, one per firing
    started_by = {eid: loom.execution(eid).get("started_by") for eid in (skip1_id, allow1_id, allow2_id, skip3_id)}
    assert started_by == {skip1_id: "schedule:e2e-skip", allow1_id: "schedule:e2e-allow",
                          allow2_id: "schedule:e2e-allow", skip3_id: "schedule:e2e-skip"}
