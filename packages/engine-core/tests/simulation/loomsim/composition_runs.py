"""Runs in the composition simulation.

A token re-used after its execution expired starts a new *run* under the same id (``Execution.run``, its
``created_at``), and every item a run writes names it. The checks look at each run on its own: its commits
(the execution item as stored names its run), its writes (each record, branch, join and event names its
run), its bodies (the run of the claim they ran under), and what the store held of it: ``RunView``, read
from the store while the run is current, and kept (``RunBook.archive``) just before TTL deletes anything
of it or a newer run replaces its execution item.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

from engine_core.adapters._items import (
    RUN_ATTR,
    branch_from_attrs,
    branch_sort_key,
    execution_from_attrs,
    join_from_attrs,
)
from engine_core.adapters.memory import MemoryStore
from engine_core.model import Branch, EventRecord, Execution, Join, StepRecord


@dataclass
class RunView:
    """What the store holds of one run of an execution id (or held, just before TTL deleted part of it or
    a newer run replaced its execution item): its items only, never another run's."""

    execution_id: str
    run: str
    final: Execution
    input_blob: str | None
    records: list[StepRecord]
    events: list[EventRecord]
    joins: dict[int, Join]
    branches: dict[int, list[Branch]]

    def branches_of(self, index: int) -> list[Branch]:
        return self.branches.get(index, [])

    def merged(self, newer: RunView) -> RunView:
        """This view with what ``newer`` (a later read of the same run) holds: TTL may have deleted some
        items since, and late writers may have written others."""
        def by(key, old: list, new: list) -> list:
            out = {key(x): x for x in old}
            out.update({key(x): x for x in new})
            return [out[k] for k in sorted(out)]

        indexes = set(self.branches) | set(newer.branches)
        return RunView(
            self.execution_id, self.run, newer.final, newer.input_blob or self.input_blob,
            by(lambda r: (r.step_index, r.kind or "task", r.name), self.records, newer.records),
            by(lambda e: (e.name, e.event_id), self.events, newer.events),
            {**self.joins, **newer.joins},
            {i: by(lambda b: b.branch, self.branches_of(i), newer.branches_of(i)) for i in indexes})


def view_of(store: MemoryStore, eid: str) -> RunView | None:
    """The current run of ``eid`` as the store holds it now; None once its ``#META`` is gone."""
    attrs = store.metas.get(eid)
    if attrs is None:
        return None
    final = execution_from_attrs(eid, copy.deepcopy(attrs))
    run = final.run
    records = [r for r in store._records(eid) if isinstance(r, StepRecord) and r.run == run]
    events = [ev for ev in store._events(eid) if isinstance(ev, EventRecord) and ev.run == run]
    joins = {}
    for index, item in store.joins.get(eid, {}).items():
        if item.get(RUN_ATTR) == run:
            joins[index] = join_from_attrs(dict(item))
    branches: dict[int, list[Branch]] = {}
    for (owner, index), items in store.branch_items.items():
        if owner != eid:
            continue
        mine = [branch_from_attrs(branch_sort_key(b), dict(a)) for b, a in sorted(items.items())
                if a.get(RUN_ATTR) == run]
        branches[index] = [b for b in mine if isinstance(b, Branch)]
    start = store.starts.get(eid, {})
    blob = store.inputs.get(eid) if start.get(RUN_ATTR) == run else None
    return RunView(eid, run, final, blob, records, events, joins, branches)


@dataclass
class RunInfo:
    execution_id: str
    run: str
    workflow: str
    fingerprint: str
    incarnation: int
    """Which start of its token this is (0: the first; the input carries it as ``inc``)."""


@dataclass
class RunBook:
    """Every run the simulation saw created, and what the store held of those no longer current."""

    runs: dict[str, list[RunInfo]] = field(default_factory=dict)
    archived: dict[tuple[str, str], RunView] = field(default_factory=dict)

    def started(self, info: RunInfo) -> None:
        self.runs.setdefault(info.execution_id, []).append(info)

    def info(self, eid: str, run: str | None) -> RunInfo | None:
        return next((i for i in self.runs.get(eid, ()) if i.run == run), None)

    def archive(self, store: MemoryStore, eid: str) -> None:
        """Keep what the store holds of the current run of ``eid`` (called before TTL deletes any of its
        items and before a new run replaces it; later calls add what is new, and keep what TTL deleted)."""
        view = view_of(store, eid)
        if view is not None:
            kept = self.archived.get((eid, view.run))
            self.archived[(eid, view.run)] = view if kept is None else kept.merged(view)

    def views(self, store: MemoryStore) -> list[tuple[RunInfo, RunView | None]]:
        """Every run, oldest first per id, with what the store holds (or held) of it."""
        out = []
        for eid in sorted(self.runs):
            current = view_of(store, eid)
            for info in self.runs[eid]:
                kept = self.archived.get((eid, info.run))
                if current is not None and current.run == info.run:
                    out.append((info, current if kept is None else kept.merged(current)))
                else:
                    out.append((info, kept))
        return out


__all__ = ["RunBook", "RunInfo", "RunView", "view_of"]
