"""HTML primitives the console's pages share: escaping, times, status badges, error and JSON blocks."""

from __future__ import annotations

import datetime as dt
import html
import json
from typing import Any

from ..readings import parse_ts
from ..sdk.models import ENDED_STATUSES, LIVE_STATUSES, STATUSES

LIVE = LIVE_STATUSES
ENDED = ENDED_STATUSES
LIST_STATUSES = STATUSES
RESULT_INLINE_MAX = 160
"""A result whose JSON is longer than this is collapsed (a ``<details>``) in the timeline."""


def esc(value: Any) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def span(seconds: float) -> str:
    """A duration for people: ``850 ms``, ``12 s``, ``3 min 20 s``, ``2 h 05 min``."""
    if seconds < 1:
        return f"{max(0, round(seconds * 1000))} ms"
    s = int(round(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    if s < 86400:
        return f"{s // 3600} h {s % 3600 // 60:02d} min"
    return f"{s // 86400} d {s % 86400 // 3600} h"


def relative(text: str | None, now: dt.datetime | None = None) -> str:
    when = parse_ts(text)
    if when is None:
        return "-"
    delta = ((now or dt.datetime.now(dt.timezone.utc)) - when).total_seconds()
    if abs(delta) < 1:
        return "just now"
    return f"{span(delta)} ago" if delta > 0 else f"in {span(-delta)}"


def time_tag(text: str | None, mode: str = "rel", now: dt.datetime | None = None) -> str:
    """``mode`` rel: "3 min ago"; left: "12 s left" (a countdown, for sleeps, backoffs and timeouts)."""
    if not text:
        return "-"
    if mode == "left":
        when = parse_ts(text)
        left = (when - (now or dt.datetime.now(dt.timezone.utc))).total_seconds() if when else 0
        shown = f"{span(left)} left" if left > 0 else "due now"
    else:
        shown = relative(text, now)
    return f'<time datetime="{esc(text)}" data-{mode} title="{esc(text)}">{esc(shown)}</time>'


def badge(status: str | None) -> str:
    s = status or "UNKNOWN"
    return f'<span class="badge s-{esc(s.lower())}">{esc(s)}</span>'


def error_block(err: Any, cls: str = "error") -> str:
    """An error (the SDK's ``ErrorInfo``, or an error document's dict) in full."""
    if not err:
        return ""
    code, message = (err.get("code"), err.get("message")) if isinstance(err, dict) else (err.code, err.message)
    return f'<pre class="{cls}"><b>{esc(code)}</b>: {esc(message)}</pre>'


def json_block(value: Any, label: str = "result") -> str:
    if value is None:
        return ""
    text = json.dumps(value, indent=2, sort_keys=True, default=str)
    if len(text) <= RESULT_INLINE_MAX:
        return f'<code class="result" title="{esc(label)}">{esc(json.dumps(value, sort_keys=True, default=str))}</code>'
    return f'<details class="result"><summary>{esc(label)} ({len(text):,} characters)</summary><pre>{esc(text)}</pre></details>'


