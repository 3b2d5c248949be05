"""The command line's argument types: durations and times, limits, ports, JSON objects from text or files."""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import re
from pathlib import Path
from typing import Any

from .sdk import LIVE_STATUSES, PAGE_MAX, STATUSES, LoomError
from .sdk.client import INVALID_ARGUMENT
from .sdk.stream import is_interval

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
_DURATION = re.compile(r"\A(?:(\d+)w)?(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?\Z")


def since(text: str) -> str:
    """A duration back from now (2h, 30m, 1d12h) or an ISO-8601 time, as the ISO-8601 UTC time to send."""
    match = _DURATION.fullmatch(text.strip().lower())
    when = _EPOCH
    try:
        if match and any(match.groups()):
            w, d, h, m, s = (int(g or 0) for g in match.groups())
            when = dt.datetime.now(dt.timezone.utc) - dt.timedelta(weeks=w, days=d, hours=h, minutes=m, seconds=s)
        else:
            try:
                when = dt.datetime.fromisoformat(text)
            except ValueError:
                raise argparse.ArgumentTypeError(f"{text!r} is neither a duration (90s, 30m, 2h, 1d, 1h30m) nor an "
                                                 "ISO-8601 time (2026-03-01T12:00:00Z)") from None
            if when.tzinfo is None:
                when = when.replace(tzinfo=dt.timezone.utc)
        when = when.astimezone(dt.timezone.utc)
    except OverflowError:  # further back than the calendar goes, or an offset past either of its ends
        when = dt.datetime.max.replace(tzinfo=dt.timezone.utc) if when.year > 1970 else _EPOCH
    if when.year > 9998:
        raise argparse.ArgumentTypeError(f"{text!r} is after the times Loom lists (up to 9998)")
    when = max(when, _EPOCH)  # nothing started before 1970: since then is since ever
    return when.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def port(text: str) -> int:
    if not (text.isdigit() and 0 <= int(text) <= 65535):
        raise argparse.ArgumentTypeError(f"must be a port number from 0 to 65535, got {text!r}")
    return int(text)


def positive(text: str) -> int:
    if not (text.isdigit() and int(text) >= 1):
        raise argparse.ArgumentTypeError(f"must be a whole number of at least 1, got {text!r}")
    return int(text)


def lambda_memory(text: str) -> int:
    """A Lambda function's memory in MB: 128 to 10,240, as Lambda takes it."""
    if not (text.isdigit() and 128 <= int(text) <= 10240):
        raise argparse.ArgumentTypeError(f"must be a Lambda function's memory in MB, 128 to 10240 (Terraform's "
                                         f"worker_memory_mb), got {text!r}")
    return int(text)


def seconds(text: str) -> float:
    """A length of time in seconds, more than 0 (0 or less would poll without pause)."""
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not is_interval(value):
        raise argparse.ArgumentTypeError(f"must be a number of seconds above 0 (0.5, 2), got {text!r}")
    return value


def status(text: str) -> str:
    """A status to list by (any case): one of the execution statuses, or LIVE (any of the live ones)."""
    word = text.strip().upper()
    if word not in (*STATUSES, "LIVE"):
        raise argparse.ArgumentTypeError(f"{text!r} is not a status: {', '.join(STATUSES)}, or LIVE (any of "
                                         f"{', '.join(LIVE_STATUSES)})")
    return word


def limit(text: str) -> int:
    if not (text.isdigit() and 1 <= int(text) <= PAGE_MAX):
        raise argparse.ArgumentTypeError(f"must be a whole number from 1 to {PAGE_MAX}, got {text!r}")
    return int(text)


def json_object(text: str, source: str) -> dict[str, Any]:
    """``text`` as a JSON object, or the file ``@path`` names; a usage error (exit 2) says what is wrong."""
    if text.startswith("@"):
        path = Path(text[1:])
        try:
            text, source = path.read_text(encoding="utf-8-sig"), str(path)  # a byte-order mark is no JSON
        except OSError as exc:
            raise LoomError(INVALID_ARGUMENT, f"cannot read {path}: {exc.strerror}") from None
        except UnicodeDecodeError as exc:
            raise LoomError(INVALID_ARGUMENT, f"{path} is not UTF-8 text ({exc.reason} at byte {exc.start}); JSON "
                                              "is sent as UTF-8: save the file as UTF-8") from None
    try:
        value = json.loads(text, parse_constant=not_json_constant, parse_float=_finite)
    except ValueError as exc:
        raise LoomError(INVALID_ARGUMENT, f"{source} is not valid JSON: {exc}") from None
    if not isinstance(value, dict):
        raise LoomError(INVALID_ARGUMENT, f"{source} must be a JSON object, got {type(value).__name__}")
    return value


JSON_ARGUMENTS = (("input", "--input"), ("data", "--data"))
"""The commands' JSON object arguments (attribute, option)."""


def read_json_arguments(args: argparse.Namespace) -> None:
    """Each JSON object argument the command has, read (an ``@file`` too) into the object it names, before the
    command looks for its control plane: a malformed one is told first, wherever Loom runs."""
    for name, option in JSON_ARGUMENTS:
        text = getattr(args, name, None)
        if isinstance(text, str):
            setattr(args, name, json_object(text, option))


def not_json_constant(name: str) -> Any:
    """NaN, Infinity and -Infinity: Python reads them, JSON has no such numbers (the API refuses them)."""
    raise ValueError(f"{name} is not a JSON number (JSON has no NaN or Infinity: send null or a string)")


def _finite(text: str) -> float:
    """A JSON number as a float; one past a 64-bit float's range (1e400) would become Infinity."""
    value = float(text)
    if math.isinf(value):
        raise ValueError(f"{text} is too large for a 64-bit float (the most is about 1.8e308): send it as a string")
    return value
