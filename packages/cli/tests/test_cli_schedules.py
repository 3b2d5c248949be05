"""``loom schedules`` and ``LoomClient.schedules()`` against the fake control plane serving the control
plane's ``GET /schedules`` document (documents/schedules.json)."""

from __future__ import annotations

import json

from fake_control_plane import DOCUMENTS

from loom_cli.main import main
from loom_cli.sdk import LoomClient, Schedule

DOCUMENT = json.loads((DOCUMENTS / "schedules.json").read_text())


def test_client_schedules_reads_every_field_of_the_document(control_plane):
    # when
    listing = LoomClient(control_plane.url).schedules()

    # then: typed, and the JSON the API sent comes back whole
    assert [s.name for s in listing.schedules] == ["nightly-greeting", "paris-morning", "retired"]
    nightly = listing.schedules[0]
    assert (nightly.last_firing.outcome, nightly.last_firing.duplicates, nightly.next_firing) == (
        "started", 1, "2026-11-30T13:00:00.000000Z")
    assert listing.schedules[2].last_firing.error.code == "unknown_workflow"
    assert listing.document() == DOCUMENT
    for s in listing.schedules:  # no field the model does not know (the document and the model agree)
        assert not s.model_extra and (s.last_firing is None or not s.last_firing.model_extra)


def test_loom_schedules_prints_a_table_with_next_and_last_firing_and_problems(control_plane, capsys):
    # when
    code = main(["--url", control_plane.url, "schedules"])

    # then
    out = capsys.readouterr().out
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split() == ["schedule", "workflow", "expression", "time", "zone", "overlap", "next", "firing",
                                "last", "firing", "outcome", "execution"]
    nightly = next(line for line in lines if line.startswith("nightly-greeting"))
    assert "cron(0 13 * * ? *)" in nightly and "2026-11-30 13:00:00Z" in nightly
    assert "started (+1 repeated)" in nightly and "0d5f7c1e-3a8b-5c2d-9e4f-6a7b8c9d0e1f" in nightly
    assert "allow (disabled)" in next(line for line in lines if line.startswith("paris-morning"))
    assert "failed: unknown_workflow" in next(line for line in lines if line.startswith("retired "))
    assert "retired: workflow 'no_such_workflow' is not deployed in this control plane" in out


def test_loom_schedules_json_prints_the_document_as_sent(control_plane, capsys):
    assert main(["--url", control_plane.url, "--json", "schedules"]) == 0
    assert json.loads(capsys.readouterr().out) == DOCUMENT


def test_loom_schedules_when_none_are_deployed_says_where_they_come_from(control_plane, capsys):
    # given
    control_plane.schedules = {"now": DOCUMENT["now"], "schedules": []}

    # when
    code = main(["--url", control_plane.url, "schedules"])

    # then
    assert code == 0
    assert capsys.readouterr().out.strip() == ("no schedules are deployed (a deployment declares them in Terraform: the "
                                                "schedules input of the loom module; `loom dev` runs none)")


def test_schedule_model_reads_an_older_or_newer_document():
    assert Schedule.model_validate({"name": "x", "surprise": 1}).document() == {"name": "x", "surprise": 1}
