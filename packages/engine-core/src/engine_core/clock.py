"""One injectable notion of now, and the fixed-width timestamp format the due index sorts by."""

from __future__ import annotations

import datetime as dt
import functools
import time
from typing import Protocol

UTC = dt.timezone.utc
_FMT = "%Y-%m-%dT%H:%M:%S.%fZ"


class Clock(Protocol):
    def now(self) -> dt.datetime:
        """The current time, timezone-aware UTC."""
        ...


class SystemClock:
    def now(self) -> dt.datetime:
        return dt.datetime.now(UTC)


class ManualClock:
    """A clock tests move by hand: a two-hour sleep passes in one call.

    Example:
        >>> clock = ManualClock()
        >>> clock.advance(hours=2)
    """

    def __init__(self, start: dt.datetime | None = None):
        self._now = start or dt.datetime(2026, 1, 1, tzinfo=UTC)

    def now(self) -> dt.datetime:
        return self._now

    def advance(self, seconds: float | dt.timedelta = 0, *, minutes: float = 0, hours: float = 0) -> dt.datetime:
        """Move the clock forward by ``seconds`` (a number, or a ``timedelta``) plus ``minutes`` and ``hours``."""
        by = seconds if isinstance(seconds, dt.timedelta) else dt.timedelta(seconds=seconds)
        by += dt.timedelta(minutes=minutes, hours=hours)
        if by < dt.timedelta(0):
            raise ValueError(f"a ManualClock only moves forward: advance({by}) would move it back; use set() for that")
        self._now += by
        return self._now

    def set(self, when: dt.datetime) -> None:
        self._now = when


@functools.lru_cache(maxsize=1024)
def format_ts(when: dt.datetime) -> str:
    """Fixed-width UTC ISO-8601 with microseconds, so string order is time order (GSI1SK relies on it).

    Cached: an execution's item is written at every step with most of its timestamps unchanged (equal
    datetimes are the same instant, so they format alike whatever their zone)."""
    if when.tzinfo is None:
        raise ValueError("timestamps must be timezone-aware")
    text = when.astimezone(UTC).isoformat(timespec="microseconds")  # ...+00:00; faster than strftime
    return text[:-6] + "Z" if when.year >= 1000 else when.astimezone(UTC).strftime(_FMT)


def parse_ts(text: str) -> dt.datetime:
    """Inverse of :func:`format_ts` (strict about the shape: 27 characters ending in ``Z``)."""
    if len(text) != 27 or text[-1] != "Z" or text[10] != "T":
        raise ValueError(f"timestamp {text!r} is not in the form 2026-03-01T12:00:00.000000Z")
    return dt.datetime.fromisoformat(text[:-1]).replace(tzinfo=UTC)


def monotonic_ms() -> float:
    return time.monotonic() * 1000.0
