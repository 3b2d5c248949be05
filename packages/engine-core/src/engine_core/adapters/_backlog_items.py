"""The queue's backlog mark (``backlog.BacklogMark``) as flat item attributes, for every store.

One item, ``QUEUE#backlog`` / ``#MARK``: the visible time of the newest message a worker received after a
wait of half a lease or more, and when. Times are epoch milliseconds (numbers), so the store's condition
compares them as numbers; ``expires_at`` lets the table's TTL remove a mark nobody refreshed for a day.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from ..backlog import BacklogMark
from ..errors import CorruptStateError
from ._items import TTL_ATTR, _epoch

BACKLOG_PK = "QUEUE#backlog"
BACKLOG_SK = "#MARK"
KEEP = dt.timedelta(days=1)


def _ms(t: dt.datetime) -> int:
    return int(t.timestamp() * 1000)


def _time(ms: Any) -> dt.datetime:
    return dt.datetime.fromtimestamp(int(ms) / 1000, tz=dt.timezone.utc)


def mark_to_attrs(mark: BacklogMark) -> dict[str, Any]:
    return {"visible_ms": _ms(mark.visible_at), "observed_ms": _ms(mark.observed_at),
            TTL_ATTR: _epoch(mark.observed_at + KEEP)}


def mark_from_attrs(attrs: dict[str, Any]) -> BacklogMark:
    try:
        return BacklogMark(visible_at=_time(attrs["visible_ms"]), observed_at=_time(attrs["observed_ms"]))
    except Exception as exc:  # noqa: BLE001 - any undecodable attribute
        raise CorruptStateError(BACKLOG_PK, f"{type(exc).__name__}: {exc}") from None


def mark_moves_forward(stored: dict[str, Any] | None, mark: BacklogMark) -> bool:
    """The condition every store applies: the mark only moves to a later visible time."""
    if stored is None or "visible_ms" not in stored:
        return True
    return int(stored["visible_ms"]) < _ms(mark.visible_at)


__all__ = ["BACKLOG_PK", "BACKLOG_SK", "mark_from_attrs", "mark_moves_forward", "mark_to_attrs"]
