"""Step values that come back exactly as they went in.

JSON alone drifts types across a crash: tuples come back as lists, int keys as strings, datetimes
as strings. Loom stores values as standard JSON with tagged objects (``{"$loom": tag, "v": ...}``)
for everything JSON cannot say, and refuses what it cannot restore, naming the path. The worker
encodes a step's result and hands the *decoded* copy on, so the next step sees the same value
whether or not the process crashed in between.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime as dt
import json
import math
import re
import sys
import uuid
from collections.abc import Callable
from decimal import Decimal
from typing import Any
from zoneinfo import ZoneInfo

from .errors import NonSerializableResultError

TAG = "$loom"
_MAX_DEPTH = 64
_SURROGATE = re.compile("[\ud800-\udfff]")
_SMALL_INT_BITS = 2000
"""Ints up to this many bits have at most 603 digits, under any int-to-str limit Python allows (>= 640)."""


def encode(value: Any, path: str = "result") -> str:
    """Encode ``value`` as compact standard JSON; raise NonSerializableResultError naming the path.

    Everything that cannot be stored fails here, as NonSerializableResultError: no UnicodeEncodeError,
    ValueError or RecursionError escapes, so the text returned is always valid UTF-8 JSON that
    :func:`decode` reads back.
    """
    try:
        tree = _enc(value, path, 0)
        return json.dumps(tree, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except RecursionError:
        raise NonSerializableResultError(path, f"nesting too deep to store (the limit is {_MAX_DEPTH} levels)") from None


def decode(text: str) -> Any:
    """Inverse of :func:`encode`. Raises ValueError on anything it did not write."""
    try:
        tree = json.loads(text)
    except RecursionError:
        raise ValueError(f"stored value is nested deeper than {_MAX_DEPTH} levels; Loom never writes that") from None
    try:
        return _dec(tree, 0)
    except RecursionError:
        raise ValueError(f"stored value is nested deeper than {_MAX_DEPTH} levels; Loom never writes that") from None
    except (TypeError, KeyError, IndexError, AttributeError) as exc:
        raise ValueError(f"malformed tagged value: {type(exc).__name__}: {exc}") from None


def canonical(value: Any, path: str = "input") -> str:
    """One text per value, whatever order its dicts were built in: for comparing values, never stored.

    Equal values in the codec's sense (same types all the way down) give the same text; values that
    :func:`encode` keeps apart (a tuple and a list; 1, 1.0 and True; 0.0 and -0.0; {1: x} and {"1": x})
    give different texts. Plain dicts are written with sorted keys; a dict with non-string keys and a
    set are written as their pairs or items sorted by their own canonical text. Raises
    NonSerializableResultError, naming the path, for anything :func:`encode` refuses.
    """
    try:
        return _canonical_text(_canon(_enc(value, path, 0)))
    except RecursionError:
        raise NonSerializableResultError(path, f"nesting too deep to store (the limit is {_MAX_DEPTH} levels)") from None


def roundtrip(value: Any, path: str = "result") -> tuple[str, Any]:
    """Encode and decode: the text to store and the value to hand on, identical in both paths. A value
    encoded without a single tag holds only exact JSON types (``_enc`` refuses subclasses), which decode
    to equal values of the same types: it is handed on as it is, without decoding the text again."""
    text = encode(value, path)
    if "$" not in text or TAG not in text:  # one character is found by memchr: most results hold no "$"
        return text, value
    return text, decode(text)


_SHARED = frozenset({str, int, float, bool, type(None), bytes, Decimal, uuid.UUID, dt.datetime, dt.date, dt.time,
                     dt.timedelta, frozenset})
"""The types :func:`decode` returns that cannot change (a frozenset holds only hashable, so unchanging, values)."""


def copy_value(value: Any) -> Any:
    """A fresh copy of a value :func:`decode` returned: equal to decoding its text again, with the same
    types all the way down and no mutable object shared with ``value`` (cheaper than decoding: no text
    is parsed). Used to hand a kept decoded value out more than once."""
    t = type(value)
    if t in _SHARED:
        return value
    if t is dict:
        return {k: v if type(v) in _SHARED else copy_value(v) for k, v in value.items()}  # keys are hashable
    if t is list:
        return [v if type(v) in _SHARED else copy_value(v) for v in value]
    if t is tuple:
        return tuple(copy_value(v) for v in value)
    if t is set:
        return set(value)  # members are hashable, so unchanging
    if t is bytearray:
        return bytearray(value)
    raise TypeError(f"copy_value: {t.__name__} is not a type decode() returns")


def copier(value: Any) -> Callable[[Any], Any] | None:
    """The cheapest function that does :func:`copy_value`'s work for ``value`` (None: ``value`` cannot change,
    hand it out as it is). Found once for a value handed out many times: a dict or list of unchanging
    members is copied by its own ``copy``, without walking it."""
    t = type(value)
    if t in _SHARED:
        return None
    if t is dict:  # the members' types checked in C (``map``), not by a generator per value
        return dict.copy if _SHARED.issuperset(map(type, value.values())) else copy_value
    if t is list:
        return list.copy if _SHARED.issuperset(map(type, value)) else copy_value
    if t is tuple and _SHARED.issuperset(map(type, value)):
        return None
    return copy_value


def to_plain(value: Any) -> Any:
    """A JSON-friendly view for humans and HTTP clients (lossy on purpose, never stored)."""
    if isinstance(value, dict):
        return {k if isinstance(k, str) else json.dumps(to_plain(k)): to_plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_plain(v) for v in value]
    if isinstance(value, (set, frozenset)):
        return sorted((to_plain(v) for v in value), key=lambda v: json.dumps(v, sort_keys=True, default=str))
    if isinstance(value, (dt.datetime, dt.date, dt.time)):
        return value.isoformat()
    if isinstance(value, dt.timedelta):
        return value.total_seconds()
    if isinstance(value, (bytes, bytearray)):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, (Decimal, uuid.UUID)):
        return str(value)
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


def _tag(name: str, v: Any) -> dict:
    return {TAG: name, "v": v}


def _enc(value: Any, path: str, depth: int) -> Any:  # noqa: C901 - one branch per type is the clearest form
    if depth > _MAX_DEPTH:
        raise NonSerializableResultError(path, f"nesting deeper than {_MAX_DEPTH} levels")
    t = type(value)
    if t is str:
        return _text(value, path, "string")
    if value is None or t is bool:
        return value
    if t is int:
        return value if value.bit_length() <= _SMALL_INT_BITS else _big_int(value, path)
    if t is float:
        if math.isfinite(value):
            return value
        return _tag("float", "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf"))
    if t is list:
        return [_enc(v, f"{path}[{i}]", depth + 1) for i, v in enumerate(value)]
    if t is tuple:
        return _tag("tuple", [_enc(v, f"{path}[{i}]", depth + 1) for i, v in enumerate(value)])
    if t is dict:
        if all(type(k) is str for k in value) and TAG not in value:
            return {_text(k, f"{path}.keys()", "key"): _enc(v, f"{path}[{k!r}]", depth + 1) for k, v in value.items()}
        return _tag(
            "dict",
            [[_enc(k, f"{path}.keys()", depth + 1), _enc(v, f"{path}[{k!r}]", depth + 1)] for k, v in value.items()],
        )
    if t is set or t is frozenset:
        items = [_enc(v, f"{path}{{...}}", depth + 1) for v in value]
        items.sort(key=lambda e: json.dumps(e, sort_keys=True))
        return _tag(t.__name__, items)
    if t is dt.datetime:
        return _tag("datetime", _datetime_payload(value, path))
    if t is dt.date:
        return _tag("date", value.isoformat())
    if t is dt.time:
        if value.tzinfo is not None:
            raise NonSerializableResultError(path, "time with tzinfo is ambiguous; use an aware datetime")
        return _tag("time", value.isoformat())
    if t is dt.timedelta:
        return _tag("timedelta", [value.days, value.seconds, value.microseconds])
    if t is Decimal:
        return _tag("decimal", str(value))
    if t is bytes:
        return _tag("bytes", base64.b64encode(value).decode("ascii"))
    if t is bytearray:
        return _tag("bytearray", base64.b64encode(bytes(value)).decode("ascii"))
    if t is uuid.UUID:
        return _tag("uuid", str(value))
    raise NonSerializableResultError(
        path,
        f"type {t.__module__}.{t.__qualname__} would not come back as itself after a crash; "
        "return plain data (dict, list, tuple, str, int, float, bool, None, datetime, date, "
        f"Decimal, bytes, set, UUID) instead{_plain_form(value)}",
    )


def _plain_form(value: Any) -> str:
    """How to turn a common structured value into plain data, for the refusal's message."""
    if hasattr(type(value), "model_dump") and hasattr(type(value), "model_fields"):
        return " (a pydantic model: return .model_dump(), or .model_dump(mode='json'))"
    if dataclasses.is_dataclass(value):
        return " (a dataclass: return dataclasses.asdict(...))"
    return ""


def _text(value: str, path: str, what: str) -> str:
    # Python strings may hold lone surrogates (from "\\ud800" JSON escapes, surrogateescape decoding, ...);
    # UTF-8 cannot store them, and DynamoDB and the size check would fail later with another error.
    if not value.isascii():
        bad = _SURROGATE.search(value)
        if bad is not None:
            raise NonSerializableResultError(path, (
                f"{what} {_clip(value)} holds a lone surrogate U+{ord(bad.group()):04X} at index {bad.start()}, "
                "which is not valid Unicode text and cannot be stored as UTF-8; decode bytes with "
                "errors='replace' or pass them as bytes"))
    return value


def _clip(value: str, limit: int = 40) -> str:
    return repr(value) if len(value) <= limit else repr(value[:limit]) + "..."


def _big_int(value: int, path: str) -> int:
    # json.dumps (and json.loads) refuse ints past sys.get_int_max_str_digits() with a ValueError.
    try:
        str(value)
    except ValueError:
        limit = sys.get_int_max_str_digits()
        raise NonSerializableResultError(path, (
            f"integer of about {int(value.bit_length() * 0.30103)} digits is past Python's int-to-str limit of "
            f"{limit} digits (sys.get_int_max_str_digits()); store it as a string or bytes")) from None
    return value


def _canonical_text(node: Any) -> str:
    return json.dumps(node, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def _canon(node: Any) -> Any:
    """An encoded tree with every order that does not matter fixed: tagged dict pairs and set items sorted."""
    if type(node) is list:
        return [_canon(v) for v in node]
    if type(node) is not dict:
        return node
    if TAG not in node:
        return {k: _canon(v) for k, v in node.items()}  # json.dumps(sort_keys=True) orders the keys
    tag, v = node[TAG], node["v"]
    if tag == "dict":
        return _tag(tag, sorted(([_canon(k), _canon(x)] for k, x in v), key=_canonical_text))
    if tag in ("set", "frozenset"):
        return _tag(tag, sorted((_canon(x) for x in v), key=_canonical_text))
    return _tag(tag, _canon(v))


def _datetime_payload(value: dt.datetime, path: str) -> dict:
    payload: dict[str, Any] = {"iso": value.isoformat()}
    tz = value.tzinfo
    if isinstance(tz, ZoneInfo) and tz.key is None:
        raise NonSerializableResultError(
            path, "a ZoneInfo read from a file (ZoneInfo.from_file) has no key to restore it by; use ZoneInfo(key)")
    if isinstance(tz, ZoneInfo):
        payload["zone"] = tz.key
    elif tz is not None and not isinstance(tz, dt.timezone):
        raise NonSerializableResultError(
            path, f"tzinfo {type(tz).__qualname__} cannot be restored; use zoneinfo.ZoneInfo or datetime.timezone"
        )
    elif isinstance(tz, dt.timezone) and tz is not dt.timezone.utc and tz.tzname(None) != _offset_name(tz):
        payload["name"] = _text(tz.tzname(None), path, "timezone name")
    if value.fold:
        payload["fold"] = 1
    return payload


def _offset_name(tz: dt.timezone) -> str:
    return dt.timezone(tz.utcoffset(None)).tzname(None)


def _dec(node: Any, depth: int) -> Any:  # noqa: C901 - one branch per tag, mirroring _enc
    if depth > _MAX_DEPTH:
        raise ValueError(f"stored value is nested deeper than {_MAX_DEPTH} levels; Loom never writes that")
    if isinstance(node, list):
        return [_dec(v, depth + 1) for v in node]
    if not isinstance(node, dict):
        return node
    if TAG not in node:
        return {k: _dec(v, depth + 1) for k, v in node.items()}
    tag, v = node[TAG], node.get("v")
    if tag == "tuple":
        return tuple(_dec(x, depth + 1) for x in _list(v))
    if tag == "dict":
        return {_hashable(_dec(k, depth + 1)): _dec(x, depth + 1) for k, x in _list(v)}
    if tag == "set":
        return {_hashable(_dec(x, depth + 1)) for x in _list(v)}
    if tag == "frozenset":
        return frozenset(_hashable(_dec(x, depth + 1)) for x in _list(v))
    if tag == "float":
        return {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}[v]
    if tag == "datetime":
        value = dt.datetime.fromisoformat(v["iso"])
        if "zone" in v:
            value = value.replace(tzinfo=ZoneInfo(v["zone"]))
        elif "name" in v:
            value = value.replace(tzinfo=dt.timezone(value.utcoffset(), v["name"]))
        return value.replace(fold=v.get("fold", 0))
    if tag == "date":
        return dt.date.fromisoformat(v)
    if tag == "time":
        return dt.time.fromisoformat(v)
    if tag == "timedelta":
        return dt.timedelta(days=v[0], seconds=v[1], microseconds=v[2])
    if tag == "decimal":
        return Decimal(v)
    if tag == "bytes":
        return base64.b64decode(v, validate=True)
    if tag == "bytearray":
        return bytearray(base64.b64decode(v, validate=True))
    if tag == "uuid":
        return uuid.UUID(v)
    raise ValueError(f"unknown value tag {tag!r}")


def _list(v: Any) -> list:
    if not isinstance(v, list):
        raise ValueError(f"malformed tagged value: expected a list, got {type(v).__name__}")
    return v


def _hashable(value: Any) -> Any:
    # Keys and set members were hashable when encoded; lists only appear here if data was tampered with.
    if isinstance(value, (list, dict)):
        raise ValueError("unhashable value where a key or set member was expected")
    return value
