"""TTL expiry in the simulations: which items of a live execution TTL may delete now (none may), and
deleting expired items the way DynamoDB's TTL does, some time after they expired, item by item, in no
order: ``reap`` deletes all expired items (``MemoryStore.reap_expired``) or only some of them (only
``#META``, everything but ``#META``, or each one at random), so every order of deletions happens."""

from __future__ import annotations

import datetime as dt
import random
from collections.abc import Callable
from typing import Any

from engine_core.adapters._items import RUN_ATTR, TTL_ATTR
from engine_core.adapters.memory import MemoryStore


def epoch(when: dt.datetime) -> int:
    """The TTL attribute's unit (what the stores write, and what TTL compares with)."""
    return int(when.timestamp())


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


def expired_items(store: MemoryStore, eid: str, now: dt.datetime,
                  spared: Callable[[str, dict[str, Any]], bool] = lambda kind, attrs: False) -> list[str]:
    """Items of the current (live) run of ``eid`` that TTL may delete now: an expiry at or before now, or
    none at all, unless ``spared(kind, attrs)``. An older run's leftovers are not the live run's; they expire
    on their own."""
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
            if attrs.get(RUN_ATTR) != run or spared(kind, attrs):
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
    store._step_keys.clear()  # the store's sorted history keys, as its own expiry clears them
    return deleted


__all__ = ["REAP_MODES", "doomed", "epoch", "expired_items", "reap"]
