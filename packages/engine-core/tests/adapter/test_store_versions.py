"""What versions need of every store in ``STORES`` (the ``store`` fixture): the pinned version on the execution
item, the pinned steps beside the input, and the live executions' versions read in one batch."""

from __future__ import annotations

import datetime as dt

from engine_core.live import dropped, live_counts
from engine_core.model import Status
from engine_core.ports import Transition

from .test_store_contract import T0, new_execution


def test_store_pinned_version_and_steps_round_trip_and_only_load_state_reads_the_steps(store):
    # given: an execution started on version 3 with its steps pinned
    e = new_execution(1, workflow_version=3, pinned_steps="f" * 32 + " task#abc#a sleep#def#sleep_1s")
    store.create(e, '{"x":1}')
    # when: read by GetItem, by the state query, and after a commit
    by_get = store.load(e.execution_id)
    by_state = store.load_state(e.execution_id).execution
    moved = by_get.model_copy(update={"version": 2, "updated_at": T0 + dt.timedelta(seconds=1)})
    store.commit(Transition(0, 1, moved))
    # then: the version is on the execution item; the steps only come with the input
    assert by_get.workflow_version == 3 and by_get.pinned_steps is None
    assert by_state.workflow_version == 3 and by_state.pinned_steps == e.pinned_steps
    assert store.load(e.execution_id).workflow_version == 3
    assert store.load_state(e.execution_id).execution.pinned_steps == e.pinned_steps


def test_store_live_counts_read_each_live_executions_version_and_leave_ended_ones_out(store):
    # given: two live on version 1, one live on version 2, one ended on version 2
    for n, version in ((1, 1), (2, 1), (3, 2), (4, 2)):
        store.create(new_execution(n, workflow_version=version), "{}")
    ended = store.load(new_execution(4).execution_id)
    done = ended.model_copy(update={"status": Status.COMPLETED, "version": 2, "next_wake_at": None, "timer": None,
                                    "index_at": None, "expires_at": T0 + dt.timedelta(days=30)})
    store.commit(Transition(0, 1, done))
    # when
    counts = live_counts(store, getattr(store, "shards", 1), T0)
    # then
    assert counts.counts == {("wf", 1): 2, ("wf", 2): 1} and counts.complete and counts.read == 3
    assert [d.describe() for d in dropped(counts, {"wf": [2]})] == [
        "version 1 of workflow 'wf' is not in this build, but 2 live execution(s) run on version 1: they would fail "
        "at their next delivery (workflow_version_missing)"]
    gone = dropped(counts, {})
    assert [(d.workflow, d.version, d.live, d.workflow_gone) for d in gone] == [("wf", 1, 2, True), ("wf", 2, 1, True)]
    # a workflow dropped altogether fails its executions as a missing version does (DESIGN.md, "A workflow removed")
    assert gone[0].describe() == ("workflow 'wf' is not in this build, but 2 live execution(s) run on version 1: they "
                                  "would fail at their next delivery (workflow_version_missing)")
    assert dropped(counts, {"wf": [1, 2]}) == []
    # a cap stops the count and says so
    capped = live_counts(store, getattr(store, "shards", 1), T0, cap=2)
    assert not capped.complete and capped.read == 2
