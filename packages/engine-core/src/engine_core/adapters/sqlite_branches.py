"""The SQLite store's items of parallel and map steps (used by ``SqliteStore``, in ``sqlite.py``; kept apart to
keep that module small). The same items and conditions as ``_dynamo_branches.py`` and the memory store:

=========  ========================  ===============  =========================================
item       pk                        sk               attributes
=========  ========================  ===============  =========================================
join       ``EXEC#<id>``             ``JOIN#<nnn>``   total, done, generation, max_concurrency
branch     ``EXEC#<id>#S<nnn>``      ``B#<bbbbb>``    status, version, generation, attempt, ...
=========  ========================  ===============  =========================================

The join sits in the execution's partition, so a delivery's one query reads it; a step's branches are a
partition of their own, read only by a branch's own delivery, the reconcile and the fan-in.
"""

from __future__ import annotations

from typing import Any

from ..errors import BranchConflictError
from ..model import Branch, CorruptRecord, Join
from ._items import (
    BRANCH_PREFIX,
    branch_from_attrs,
    branch_partition_suffix,
    branch_sort_key,
    branch_to_attrs,
    join_from_attrs,
    join_sort_key,
    join_to_attrs,
    older_run,
    same_run,
)
from .sqlite_db import decoded, dumps, exec_pk, get_raw, put_item, readable


def _branch_pk(execution_id: str, step_index: int) -> str:
    return exec_pk(execution_id) + branch_partition_suffix(step_index)


def decode_join(raw: Any) -> Join | None:
    """The join of a stored row; None when unreadable (the fan-out then begins a new generation)."""
    attrs = readable(raw)
    if attrs is None:
        return None
    try:
        return join_from_attrs(attrs)
    except Exception:  # noqa: BLE001 - any malformed attribute: as unreadable
        return None


def _decode_branch(sk: str, raw: Any) -> Branch | CorruptRecord:
    return decoded(sk, raw, branch_from_attrs)


def _conflict(execution_id: str, branch: Branch, expected: int | None, raw: Any) -> BranchConflictError:
    current = None if raw is None else _decode_branch(branch_sort_key(branch.branch), raw)
    return BranchConflictError(execution_id, branch.step_index, branch.branch, expected,
                               current if isinstance(current, Branch) else None)


def put_join(store: Any, execution_id: str, join: Join) -> bool:
    # A join of the same generation is never replaced: it may already count completions. Nor is a newer
    # generation's: a delivery that read an older execution version must not turn the fan-out back. An
    # older run's (a token re-used after expiry) is; an unreadable one is (its fan-out begins again).
    with store.db.write() as conn:
        stored = readable(get_raw(conn, exec_pk(execution_id), join_sort_key(join.step_index)))
        if stored is not None and not older_run(stored, join.run, "started_at"):
            generation = stored.get("generation")
            if not same_run(stored, join.run) or (isinstance(generation, int) and generation >= join.generation):
                return False
        put_item(conn, exec_pk(execution_id), join_sort_key(join.step_index), join_to_attrs(join))
    return True


def get_join(store: Any, execution_id: str, step_index: int) -> Join | None:
    with store.db.read() as conn:
        raw = get_raw(conn, exec_pk(execution_id), join_sort_key(step_index))
    return None if raw is None else decode_join(raw)


def create_branch(store: Any, execution_id: str, branch: Branch) -> None:
    pk, sk = _branch_pk(execution_id, branch.step_index), branch_sort_key(branch.branch)
    with store.db.write() as conn:
        raw = get_raw(conn, pk, sk)
        # An older run's branch (a token re-used after expiry) is replaced; this run's never is.
        if raw is not None and not older_run(readable(raw) or {}, branch.run, "updated_at"):
            raise _conflict(execution_id, branch, None, raw)
        put_item(conn, pk, sk, branch_to_attrs(branch))


def get_branch(store: Any, execution_id: str, step_index: int, branch: int) -> Branch | CorruptRecord | None:
    sk = branch_sort_key(branch)
    with store.db.read() as conn:
        raw = get_raw(conn, _branch_pk(execution_id, step_index), sk)
    return None if raw is None else _decode_branch(sk, raw)


def _check_version(conn: Any, execution_id: str, branch: Branch, expected_version: int) -> None:
    raw = get_raw(conn, _branch_pk(execution_id, branch.step_index), branch_sort_key(branch.branch))
    if raw is None or (readable(raw) or {}).get("version") != expected_version:
        raise _conflict(execution_id, branch, expected_version, raw)


def update_branch(store: Any, execution_id: str, branch: Branch, expected_version: int) -> None:
    # Every branch transition is valid only from the version its writer read.
    with store.db.write() as conn:
        _check_version(conn, execution_id, branch, expected_version)
        put_item(conn, _branch_pk(execution_id, branch.step_index), branch_sort_key(branch.branch), branch_to_attrs(branch))


def complete_branch(store: Any, execution_id: str, branch: Branch, expected_version: int) -> None:
    # Recorded once (the branch is still at the version its attempt claimed) and counted once (the same
    # transaction adds it to the join of its own generation and run; a redrive's new join refuses it).
    with store.db.write() as conn:
        _check_version(conn, execution_id, branch, expected_version)
        join_key = (exec_pk(execution_id), join_sort_key(branch.step_index))
        raw = get_raw(conn, *join_key)
        join = readable(raw)
        if join is None or join.get("generation") != branch.generation or not same_run(join, branch.run):
            raise _conflict(execution_id, branch, expected_version,
                            get_raw(conn, _branch_pk(execution_id, branch.step_index), branch_sort_key(branch.branch)))
        done = join.get("done", 0)
        join["done"] = (done if isinstance(done, int) else 0) + 1
        put_item(conn, _branch_pk(execution_id, branch.step_index), branch_sort_key(branch.branch), branch_to_attrs(branch))
        conn.execute("UPDATE items SET attrs = ? WHERE pk = ? AND sk = ?", (dumps(join), *join_key))


def branches(store: Any, execution_id: str, step_index: int) -> list[Branch | CorruptRecord]:
    with store.db.read() as conn:
        rows = conn.execute("SELECT sk, attrs FROM items WHERE pk = ? ORDER BY sk",
                            (_branch_pk(execution_id, step_index),)).fetchall()
    return [_decode_branch(sk, raw) for sk, raw in rows]


def branches_page(store: Any, execution_id: str, step_index: int, limit: int, after: int | None) -> Any:
    return store._page(_branch_pk(execution_id, step_index), BRANCH_PREFIX, limit,
                       None if after is None else branch_sort_key(after), branch_from_attrs)
