"""Runs and TTLs in the composition simulation.

A token re-used after its execution expired starts a new *run* under the same id (``Execution.run``, its
``created_at``), and every item a run writes names it. The checks look at each run on its own: its commits
(the execution item as stored names its run), its writes (each record, branch, join and event names its
run), its bodies (the run of the claim they ran under), and what the store held of it: ``RunView``, read
from the store while the run is current, and kept (``RunBook.archive``) just before TTL deletes anything
of it or a newer run replaces its execution item.

DynamoDB's TTL deletes an expired item some time after it expired, item by item, in no order:
``reap`` deletes all expired items (``MemoryStore.reap_expired``) or only some of them (only ``#META``,
everything but ``#META``, or each one at random), so every order of deletions happens.
"""

from __future__ import annotations

import copy
import datetime as dt
import random
from dataclasses import dataclass, field
from typing import Any

from engine_core.adapters._items import (
    RUN_ATTR,
    TTL_ATTR,
    branch_from_attrs,
    branch_sort_key,
    execution_from_attrs,
    join_from_attrs,
)
from engine_core.adapters.memory import MemoryStore
from engine_core.model import Branch, EventRecord, Execution, Join, StepRecord


def epoch(when: dt.datetime) -> int:
    """The TTL attribute's unit (what the stores write, and what TTL compares with)."""
    return int(when.timestamp())


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


# -- TTLs ------------------------------------------------------------------------------------------------------
def describe_item(kind: str, attrs: dict[str, Any]) -> str:
    if kind == "STEP":
        return f"STEP {attrs.get('name')} ({attrs.get('kind') or 'task'}, {attrs.get('status')})"
    if kind == "EVT":
        return f"EVT {attrs.get('name')}#{attrs.get('event_id')}"
    if kind == "OP":
        return f"OP {attrs.get('op')} v{attrs.get('version')}"
    if kind == "JOIN":
        return f"JOIN generation {attrs.get('generation')}"
    if kind == "BRANCH":
        return f"BRANCH {attrs.get('status')} g{attrs.get('generation')}"
    return kind


def expired_items(store: MemoryStore, eid: str, now: dt.datetime) -> list[str]:
    """Items of the current (live) run of ``eid`` that TTL may delete now: an expiry at or before now, or
    none at all. An older run's leftovers are not the live run's; they expire on their own."""
    meta = store.metas.get(eid)
    if meta is None:
        return []
    run, bound, out = meta.get("created_at"), epoch(now), []
    for kind, items in store.item_kinds(eid).items():
        for attrs in items:
            ttl = attrs.get(TTL_ATTR)
            if kind == "#META":
                if isinstance(ttl, int) and ttl <= bound:
                    out.append(f"#META (expires_at {ttl})")
                continue
            if attrs.get(RUN_ATTR) != run:
                continue
            if not isinstance(ttl, int):
                out.append(f"{describe_item(kind, attrs)} without expires_at")
            elif ttl <= bound:
                out.append(f"{describe_item(kind, attrs)} (expires_at {ttl}, {bound - ttl} s ago)")
    return out


REAP_MODES = ("all", "all", "meta", "items", "some")
"""``all``: every expired item (``MemoryStore.reap_expired``); ``meta``: only expired ``#META`` items;
``items``: every expired item but ``#META``; ``some``: each expired item with probability 1/2."""


def doomed(store: MemoryStore, now: dt.datetime) -> list[str]:
    """Executions with at least one item TTL may delete now."""
    bound = epoch(now)
    out = set()
    for eid, attrs in store.metas.items():
        if isinstance(attrs.get(TTL_ATTR), int) and attrs[TTL_ATTR] <= bound:
            out.add(eid)
    for eid in set(store.starts) | set(store.steps) | set(store.ops) | set(store.events) | set(store.joins) | \
            {e for e, _ in store.branch_items}:
        for items in store.item_kinds(eid).values():
            if any(isinstance(a.get(TTL_ATTR), int) and a[TTL_ATTR] <= bound for a in items):
                out.add(eid)
                break
    return sorted(out)


def reap(store: MemoryStore, now: dt.datetime, mode: str, rng: random.Random) -> int:
    """Delete expired items the way ``mode`` says (see ``REAP_MODES``); returns how many."""
    if mode == "all":
        return store.reap_expired(now)
    bound = epoch(now)

    def pick(kind: str, attrs: dict[str, Any]) -> bool:
        if not (isinstance(attrs.get(TTL_ATTR), int) and attrs[TTL_ATTR] <= bound):
            return False
        if mode == "meta":
            return kind == "#META"
        if mode == "items":
            return kind != "#META"
        return rng.random() < 0.5

    deleted = 0
    for eid in sorted(store.metas):
        if pick("#META", store.metas[eid]):
            del store.metas[eid]  # the #INPUT item is another item, with its own TTL
            deleted += 1
    for eid in sorted(store.starts):
        if pick("#INPUT", store.starts[eid]):
            del store.starts[eid]
            store.inputs.pop(eid, None)
            deleted += 1
    for kind, table in (("STEP", store.steps), ("OP", store.ops), ("EVT", store.events), ("JOIN", store.joins),
                        ("BRANCH", store.branch_items)):
        for owner in sorted(table, key=str):
            items = table[owner]
            for key in sorted(items, key=str):
                if pick(kind, items[key]):
                    del items[key]
                    deleted += 1
    return deleted


__all__ = ["REAP_MODES", "RunBook", "RunInfo", "RunView", "doomed", "epoch", "expired_items", "reap", "view_of"]
