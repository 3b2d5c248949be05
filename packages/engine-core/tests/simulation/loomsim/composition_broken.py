"""Deliberately broken stores and engines: the composition checker must catch each within a few seeds."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from engine_core import versions
from engine_core.adapters import _items as items
from engine_core.adapters.memory import MemoryStore
from engine_core.kinds import KINDS, KindTable
from engine_core.kinds import wait
from engine_core.kinds.task import TaskKind
from engine_core.kinds.wait import WaitKind
from engine_core.protocol import CancelPlan


def broken_store_class(kind: str):
    event_sort_key, event_to_attrs, branch_to_attrs = items.event_sort_key, items.event_to_attrs, items.branch_to_attrs
    if kind == "put_event_ignores_duplicates":
        class Broken(MemoryStore):
            def put_event(self, execution_id, record, legacy=False):
                self._count("put_event")
                # no attribute_not_exists: a repeated send is written (and reported new) again
                self.events.setdefault(execution_id, {})[event_sort_key(record.name, record.event_id)] = \
                    event_to_attrs(record)
                return True
    elif kind == "complete_branch_counts_twice":
        class Broken(MemoryStore):
            def complete_branch(self, execution_id, branch, expected_version):
                super().complete_branch(execution_id, branch, expected_version)
                join = self.joins[execution_id][branch.step_index]
                join["done"] = join.get("done", 0) + 1  # an ADD that went through twice
    elif kind == "branch_claim_not_counted":
        class Broken(MemoryStore):
            def update_branch(self, execution_id, branch, expected_version):
                old = self.branch_items.get((execution_id, branch.step_index), {}).get(branch.branch, {})
                super().update_branch(execution_id, branch, expected_version)
                if branch.status.value == "RUNNING":
                    # the claim's write forgets its counter (an update expression that lost its ADD)
                    self.branch_items[(execution_id, branch.step_index)][branch.branch]["attempt"] = old.get("attempt", 0)
    elif kind == "branch_claim_ignores_version":
        class Broken(MemoryStore):
            def update_branch(self, execution_id, branch, expected_version):
                self._count("update_branch")
                # no condition: two deliveries of one branch both claim it
                self.branch_items.setdefault((execution_id, branch.step_index), {})[branch.branch] = \
                    branch_to_attrs(branch)
    elif kind == "compensation_record_lost":
        class Broken(MemoryStore):
            def put_step(self, execution_id, record):
                if record.kind == "compensation" and record.status.value == "SUCCEEDED":
                    self._count("put_step")
                    return  # acknowledged, never stored
                super().put_step(execution_id, record)
    elif kind == "older_run_item_wins":
        class Broken(MemoryStore):
            def put_event(self, execution_id, record, legacy=False):
                self._count("put_event")
                stored = self.events.setdefault(execution_id, {})
                key = event_sort_key(record.name, record.event_id)
                if key in stored:
                    return False  # no ``#run < :run``: an older run's event keeps the id against the new run
                stored[key] = event_to_attrs(record)
                return True
    elif kind == "ttl_restamp_dropped":
        class Broken(MemoryStore):
            def stamp_items(self, execution_id, expires_at):
                self._count("stamp_items")
                return 0  # acknowledged, nothing re-stamped: items keep the TTL they were written with
    else:
        raise ValueError(kind)
    Broken.__name__ = f"MemoryStore[{kind}]"
    return Broken


class _UndoesWhileItRuns(TaskKind):
    """A cancel of a claimed compensable task ends it at once and undoes it: no request, no waiting for
    the attempt whose body still runs (the defect issue 19 fixed)."""

    def on_cancel(self, view):
        step = view.step
        if step is not None and step.compensate is not None and view.execution.is_claimed:
            return CancelPlan(now=True, undo_current=True)
        return super().on_cancel(view)


class _MisfitEndsTheWait(WaitKind):
    """An event that woke a wait but does not fit its model ends the wait period as a timeout, before the
    period's timeout, instead of letting the period go on to it."""

    def run(self, op):
        e = op.execution
        if e.attempt > 0 and not e.wait_woken and wait._fitting(op) is None:
            return wait._timed_out(op)
        return super().run(op)


def broken_kinds(kind: str) -> KindTable:
    """The engine's kind table with one guarantee removed."""
    if kind == "cancel_undoes_a_running_step":
        return KindTable({**KINDS.kinds, "task": _UndoesWhileItRuns()})
    if kind == "misfit_ends_the_wait":
        return KindTable({**KINDS.kinds, "event": _MisfitEndsTheWait()})
    raise ValueError(kind)


BROKEN_KINDS = ("put_event_ignores_duplicates", "complete_branch_counts_twice", "branch_claim_not_counted",
                "branch_claim_ignores_version", "compensation_record_lost", "older_run_item_wins",
                "ttl_restamp_dropped")
BROKEN_ENGINES = ("cancel_undoes_a_running_step", "misfit_ends_the_wait")


@contextlib.contextmanager
def retuned_sleep_ahead_goes_on() -> Iterator[None]:
    """While inside: a same-version redeploy's retuned sleep counts as unchanged even where the run has not begun
    it (the contract keeps only a sleep it has begun: one ahead of it is a step it still has to run, changed)."""
    real = versions.step_change

    def step_change(pin, step, digest):
        return None if pin.kind == step.kind.kind == "sleep" else real(pin, step, digest)

    versions.step_change = step_change
    try:
        yield
    finally:
        versions.step_change = real
