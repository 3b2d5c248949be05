"""How many executions are live on each workflow version: what ``GET /workflows`` shows and what
``loom versions check`` refuses a deploy on.

A live execution, and only a live one, carries a due-index key (DESIGN.md "Guarantees: liveness"), so
the due partitions (``DUE#<shard>``, keys only) list exactly the live executions; one batched read of
their items then gives each one's workflow and pinned version. The cost follows the live executions, never
the table or its ended executions: per 1,000 live, about 2 Query pages of the keys-only index and 10
``BatchGetItem`` calls (0.5 read unit an item). Past ``cap`` executions it stops and says so
(``complete`` False): the counts are then lower bounds.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

LIVE_CAP = 10_000
"""At most this many live executions are read per count (``LOOM_LIVE_COUNT_CAP`` where a caller passes it)."""
_PAGE = 1_000
_BEYOND_ANY_TIMER = dt.timedelta(days=3660)  # past the longest sleep or wait (366 days) plus any lease


@dataclass
class LiveCounts:
    counts: dict[tuple[str, int], int] = field(default_factory=dict)
    """Live executions by (workflow, version)."""
    complete: bool = True
    """False when ``cap`` stopped the count: each number is then at least what it says."""
    read: int = 0
    """Live executions read."""

    def of(self, workflow: str, version: int) -> int:
        return self.counts.get((workflow, version), 0)

    def versions_of(self, workflow: str) -> dict[int, int]:
        return {v: n for (w, v), n in sorted(self.counts.items()) if w == workflow}


def live_counts(store: Any, shards: int, now: dt.datetime, cap: int = LIVE_CAP) -> LiveCounts:
    """Count the live executions on each (workflow, version) from the due index (see the module doc)."""
    ids: list[str] = []
    complete = True
    until = now + _BEYOND_ANY_TIMER
    for shard in range(shards):
        cursor = None
        while True:
            page = store.query_due(shard, until, min(_PAGE, cap - len(ids) + 1), cursor)
            ids.extend(ref.execution_id for ref in page.items)
            cursor = page.cursor
            if len(ids) > cap:
                ids, complete = ids[:cap], False
                break
            if cursor is None:
                break
        if not complete:
            break
    out = LiveCounts(complete=complete, read=len(ids))
    for workflow, version in store.load_versions(sorted(set(ids))).values():
        out.counts[(workflow, version)] = out.counts.get((workflow, version), 0) + 1
    return out





@dataclass(frozen=True)
class Dropped:
    """A (workflow, version) that live executions run on and a deploy would remove."""

    workflow: str
    version: int
    live: int
    workflow_gone: bool
    """The deploy drops the whole workflow (no version of it is left), not just this version."""

    def describe(self) -> str:
        what = f"workflow {self.workflow!r}" if self.workflow_gone else f"version {self.version} of workflow {self.workflow!r}"
        return (f"{what} is not in this build, but {self.live} live execution(s) run on version {self.version}: "
                "they would fail at their next delivery (workflow_version_missing)")


def dropped(counts: LiveCounts, deploying: dict[str, list[int]]) -> list[Dropped]:
    """What a deploy of ``deploying`` (workflow -> versions it registers) would remove from under live executions."""
    out = []
    for (workflow, version), n in sorted(counts.counts.items()):
        kept = deploying.get(workflow, [])
        if n and version not in kept:
            out.append(Dropped(workflow, version, n, workflow_gone=not kept))
    return out
__all__ = ["LIVE_CAP", "Dropped", "LiveCounts", "dropped", "live_counts"]
