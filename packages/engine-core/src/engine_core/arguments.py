"""The numbers a workflow's author passes to a sleep or a wait, checked where they are passed: a
TypeError naming the call and the value, instead of Python's own arithmetic or conversion error."""

from __future__ import annotations

from typing import Any


def number(call: str, what: str, value: Any) -> float:
    """``value`` as a float, or a TypeError saying ``call``'s ``what`` must be a number of seconds."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{call}: {what} must be a number (seconds, minutes, hours or days as named), got {value!r}")
    return float(value)


def sleep_seconds(call: str, seconds: Any, minutes: Any, hours: Any, days: Any) -> float:
    """A sleep's length in seconds from its parts, each checked by ``number``."""
    return (number(call, "seconds", seconds) + 60 * number(call, "minutes", minutes)
            + 3600 * number(call, "hours", hours) + 86400 * number(call, "days", days))
