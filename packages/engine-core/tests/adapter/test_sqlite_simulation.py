"""The deterministic simulation and the composition simulation (``tests/simulation``), on the SQLite store.

The simulations drive the real engine and sweeper through every fault they know (duplicated, lost and late
messages, crashes and pauses after any store call, stale index reads, takeovers past a lease) and check
their invariants from what really happened. Here the store under them is a SQLite file instead of the
memory store: the checkers read its items through the same views the memory store offers (``metas``,
``steps``, ``inputs``, ``joins``), each answered by a query of the file.

``LOOM_SQLITE_SIM_SEEDS`` / ``LOOM_SQLITE_COMPOSITION_SEEDS`` choose how many seeds (the memory store runs
1,000 and 300 in ``tests/simulation``; each SQLite seed writes a file, so fewer run here by default).
The file uses ``synchronous=NORMAL``: the simulations crash the engine, not the machine.
"""

from __future__ import annotations

import itertools
import os
from collections import Counter
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from engine_core.adapters._items import event_from_attrs
from engine_core.adapters.sqlite import SqliteStore
from engine_core.adapters.sqlite_db import attrs_of, decoded

SIMULATION = str(Path(__file__).resolve().parents[1] / "simulation")
if SIMULATION not in sys.path:
    sys.path.insert(0, SIMULATION)

SEEDS = int(os.environ.get("LOOM_SQLITE_SIM_SEEDS", "40"))
COMPOSITION_SEEDS = int(os.environ.get("LOOM_SQLITE_COMPOSITION_SEEDS", "20"))


class _Rows(Mapping):
    """A read-only mapping answered by a query of the file each time it is read."""

    def __init__(self, load):
        self._load = load

    def _all(self) -> dict[Any, Any]:
        return self._load()

    def __getitem__(self, key: Any) -> Any:
        return self._all()[key]

    def __iter__(self) -> Iterator[Any]:
        return iter(self._all())

    def __len__(self) -> int:
        return len(self._all())

    def get(self, key: Any, default: Any = None) -> Any:
        return self._all().get(key, default)


class InspectableSqliteStore(SqliteStore):
    """The SQLite store with the memory store's read-only views, for the simulations' checkers."""

    _files = itertools.count()
    directory: str | None = None
    """Where each simulation's file goes (the ``_files_in_a_temporary_directory`` fixture sets and removes it)."""

    def __init__(self, shards: int = 1):
        assert self.directory is not None, "InspectableSqliteStore.directory is not set"
        super().__init__(os.path.join(self.directory, f"sim-{next(self._files)}.db"), shards=shards,
                         synchronous="NORMAL")
        self.metas = _Rows(lambda: self._partitions("#META"))
        self.inputs = _Rows(lambda: {eid: attrs.get("input", "") for eid, attrs in self._partitions("#INPUT").items()})
        self.steps = _Rows(lambda: self._by_sort_key("STEP#"))
        self.joins = _Rows(lambda: {eid: {int(sk[5:]): attrs for sk, attrs in items.items()}
                                    for eid, items in self._by_sort_key("JOIN#").items()})
        self.events = _Rows(lambda: self._by_sort_key("EVT#", partitions=("", "#E")))
        self.ops = _Rows(lambda: self._by_sort_key("OP#", partitions=("", "#O")))
        self.starts = _Rows(lambda: self._partitions("#INPUT"))
        self.branch_items = _Rows(self._branch_partitions)

    def _rows(self, sql: str, args: tuple) -> list[tuple[str, str, str]]:
        with self.db.read() as conn:
            return conn.execute(sql, args).fetchall()

    def _partitions(self, sk: str) -> dict[str, dict[str, Any]]:
        rows = self._rows("SELECT pk, sk, attrs FROM items WHERE sk = ?", (sk,))
        return {pk.removeprefix("EXEC#"): attrs_of(raw) for pk, _, raw in rows if pk.count("#") == 1}

    def _branch_partitions(self) -> dict[tuple[str, int], dict[int, dict[str, Any]]]:
        """(execution id, step) -> branch -> attributes: the fan-out partitions ``EXEC#<id>#S<nnn>``."""
        out: dict[tuple[str, int], dict[int, dict[str, Any]]] = {}
        for pk, sk, raw in self._rows("SELECT pk, sk, attrs FROM items WHERE sk >= 'B#' AND sk < 'B$'", ()):
            eid, _, suffix = pk.removeprefix("EXEC#").partition("#S")
            if suffix.isdigit():
                out.setdefault((eid, int(suffix)), {})[int(sk[2:])] = attrs_of(raw)
        return out

    def _by_sort_key(self, prefix: str, partitions: tuple[str, ...] = ("",)) -> dict[str, dict[str, dict[str, Any]]]:
        """execution id -> sort key -> attributes, of the items under ``prefix`` in the execution's partition (and
        the other ``partitions`` of it, by suffix)."""
        out: dict[str, dict[str, dict[str, Any]]] = {}
        for pk, sk, raw in self._rows("SELECT pk, sk, attrs FROM items WHERE sk >= ? AND sk < ? ORDER BY sk",
                                      (prefix, prefix[:-1] + "$")):
            eid, _, suffix = pk.removeprefix("EXEC#").partition("#")
            if ("#" + suffix if suffix else "") in partitions:
                out.setdefault(eid, {})[sk] = attrs_of(raw)
        return out

    def item_kinds(self, execution_id: str) -> dict[str, list[dict[str, Any]]]:
        """``MemoryStore.item_kinds``: every item of the execution's partitions, by kind."""
        pk = f"EXEC#{execution_id}"
        kinds = (("#META", "#META"), ("#INPUT", "#INPUT"), ("STEP#", "STEP"), ("OP#", "OP"), ("EVT#", "EVT"),
                 ("JOIN#", "JOIN"), ("B#", "BRANCH"))
        out: dict[str, list[dict[str, Any]]] = {}
        for _, sk, raw in self._rows("SELECT pk, sk, attrs FROM items WHERE pk = ? OR pk LIKE ? ORDER BY pk, sk",
                                     (pk, pk + "#%")):
            kind = next((name for prefix, name in kinds if sk.startswith(prefix)), None)
            if kind is not None:
                out.setdefault(kind, []).append(attrs_of(raw))
        return out

    def _branch(self, execution_id: str, step_index: int, branch: int) -> Any:
        return self.get_branch(execution_id, step_index, branch)

    def _records(self, execution_id: str) -> list[Any]:
        return self.history(execution_id)

    def _events(self, execution_id: str) -> list[Any]:
        rows = self._rows("SELECT pk, sk, attrs FROM items WHERE pk IN (?, ?) AND sk >= 'EVT#' AND sk < 'EVT$' "
                          "ORDER BY sk", (f"EXEC#{execution_id}", f"EXEC#{execution_id}#E"))
        return [decoded(sk, raw, event_from_attrs) for _, sk, raw in rows]


@pytest.fixture(autouse=True)
def _files_in_a_temporary_directory(tmp_path):
    InspectableSqliteStore.directory = str(tmp_path)
    yield
    InspectableSqliteStore.directory = None


def test_sqlite_simulation_every_seed_holds_every_invariant():
    from loomsim.runner import run_seed

    # when
    results = [run_seed(seed, store_factory=InspectableSqliteStore) for seed in range(SEEDS)]
    # then: no violation, and the faults really happened (a run that injected nothing would prove nothing)
    failed = [r for r in results if not r.ok]
    assert not failed, "\n\n".join(run_seed(r.seed, tracing=True, store_factory=InspectableSqliteStore).report()
                                   for r in failed[:3])
    stats = sum((r.stats for r in results), start=Counter())
    crashes = sum(n for k, n in stats.items() if k.startswith("crash."))
    assert stats["result.completed"] >= SEEDS and crashes >= SEEDS, stats.most_common(30)
    assert stats["store.commit_conflicts"] and stats["store.put_superseded"] and stats["queue.duplicated"], \
        stats.most_common(30)


def test_sqlite_composition_simulation_every_seed_holds_every_invariant():
    from loomsim.composition_config import make_config
    from loomsim.composition_runner import run_seed

    # The TTL seeds delete items one at a time, in every order, from the memory store's tables (as DynamoDB's
    # TTL does); they run on the memory store in tests/simulation. SQLite's own expiry (``reap_expired``) is
    # in its store contract tests. Here: the first COMPOSITION_SEEDS seeds without the TTL theme.
    seeds = [seed for seed in range(4 * COMPOSITION_SEEDS) if not make_config(seed).ttl][:COMPOSITION_SEEDS]
    assert len(seeds) == COMPOSITION_SEEDS
    results = [run_seed(seed, store_factory=InspectableSqliteStore) for seed in seeds]
    failed = [r for r in results if not r.ok]
    assert not failed, "\n\n".join(run_seed(r.seed, tracing=True, store_factory=InspectableSqliteStore).report()
                                   for r in failed[:3])
    stats = sum((r.stats for r in results), start=Counter())
    crashes = sum(n for k, n in stats.items() if k.startswith("crash."))
    assert stats["bodies.branch"] and stats["event.delivered"] and stats["outcome.completed"], stats.most_common(30)
    assert crashes >= COMPOSITION_SEEDS, stats.most_common(30)


def test_sqlite_inspectable_store_views_read_what_the_store_wrote():
    # the views the checkers read must say what the file holds, or every check above would be vacuous
    from engine_core.model import StepRecord

    store = InspectableSqliteStore(shards=1)
    eid = "00000000-0000-4000-8000-000000000001"
    store.put_step(eid, StepRecord(step_index=0, name="a", status="SUCCEEDED", attempts=1, result_blob="{}", version=2))
    assert list(store.steps) == [eid] and list(store.steps[eid]) == ["STEP#000#a"]
    assert store.steps[eid]["STEP#000#a"]["written_version"] == 2 and dict(store.metas) == {}
    assert [r.name for r in store._records(eid)] == ["a"]
