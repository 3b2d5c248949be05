"""Step values survive a crash with their exact type and value, or fail at once naming the path."""

from __future__ import annotations

import datetime as dt
import json
import math
import uuid
from decimal import Decimal
from zoneinfo import ZoneInfo

import pytest

from engine_core import NonSerializableResultError, codec

CASES = {
    "tuple": (1, (2, 3), []),
    "int_keyed_dict": {1: "a", 2: {3: "b"}},
    "mixed_keys": {1: "a", "1": "b", (1, 2): "c", None: "d"},
    "aware_utc": dt.datetime(2026, 1, 2, 3, 4, 5, 6, tzinfo=dt.timezone.utc),
    "aware_offset": dt.datetime(2026, 1, 2, 3, 4, tzinfo=dt.timezone(dt.timedelta(hours=-5, minutes=-30))),
    "aware_zoneinfo": dt.datetime(2026, 7, 1, 9, 0, tzinfo=ZoneInfo("Europe/Paris")),
    "naive": dt.datetime(2026, 1, 2, 3, 4, 5),
    "date": dt.date(2026, 2, 28),
    "time": dt.time(23, 59, 59, 999999),
    "timedelta": dt.timedelta(days=-1, seconds=5, microseconds=7),
    "decimal": Decimal("12345678901234567890.000000000000000000001"),
    "decimal_exponent": Decimal("1.20E+5"),
    "bytes": b"\x00\xffbinary",
    "bytearray": bytearray(b"abc"),
    "set": {3, 1, 2},
    "frozenset": frozenset({"a", ("b", 1)}),
    "big_int": 10**50 + 7,
    "negative_big_int": -(10**39),
    "neg_zero": -0.0,
    "float": 0.1 + 0.2,
    "uuid": uuid.UUID("12345678-1234-5678-1234-567812345678"),
    "user_dict_with_tag_key": {"$loom": "tuple", "v": [1]},
    "nested": {"items": [{"sku": "a", "qty": (1, 2)}], "at": {dt.date(2026, 1, 1): {1, 2}}},
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_roundtrip_keeps_exact_type_and_value(name):
    # given
    value = CASES[name]
    # when
    text, decoded = codec.roundtrip(value)
    # then: equal, same types all the way down, and plain standard JSON on disk
    assert decoded == value
    assert _types(decoded) == _types(value)
    json.loads(text)
    assert codec.decode(text) == decoded


def test_roundtrip_keeps_negative_zero_sign():
    _, decoded = codec.roundtrip({"z": -0.0})
    assert math.copysign(1.0, decoded["z"]) == -1.0


def test_roundtrip_keeps_zoneinfo_and_fold():
    value = dt.datetime(2026, 10, 25, 2, 30, fold=1, tzinfo=ZoneInfo("Europe/Paris"))
    _, decoded = codec.roundtrip(value)
    assert decoded.tzinfo == ZoneInfo("Europe/Paris") and decoded.fold == 1 and decoded.utcoffset() == value.utcoffset()


@pytest.mark.parametrize("value, tag", [(math.nan, "nan"), (math.inf, "inf"), (-math.inf, "-inf")])
def test_non_finite_floats_are_never_stored_as_nonstandard_json(value, tag):
    text, decoded = codec.roundtrip({"x": value})
    assert "NaN" not in text and "Infinity" not in text
    json.loads(text, parse_constant=lambda c: pytest.fail(f"non-standard constant {c}"))
    assert (math.isnan(decoded["x"]) if tag == "nan" else decoded["x"] == value)


class Custom:
    pass


class MyDict(dict):
    pass


@pytest.mark.parametrize("value, path", [
    ({"a": [1, {"b": Custom()}]}, "result['a'][1]['b']"),
    ({"obj": object()}, "result['obj']"),
    ({"sub": MyDict(x=1)}, "result['sub']"),
    ({"f": lambda: 1}, "result['f']"),
    ({"t": dt.time(1, tzinfo=dt.timezone.utc)}, "result['t']"),
])
def test_unstorable_values_fail_naming_the_path(value, path):
    with pytest.raises(NonSerializableResultError) as info:
        codec.encode(value)
    assert info.value.path == path
    assert path in str(info.value)


def test_too_deep_nesting_is_refused():
    value: list = []
    for _ in range(100):
        value = [value]
    with pytest.raises(NonSerializableResultError, match="nesting"):
        codec.encode(value)


def test_decode_rejects_unknown_tags():
    with pytest.raises(ValueError, match="unknown value tag"):
        codec.decode('{"$loom": "pickle", "v": "x"}')


def test_to_plain_gives_json_for_humans():
    plain = codec.to_plain({"t": (1, 2), 1: dt.date(2026, 1, 1), "b": b"a", "d": Decimal("1.5"), "s": {2, 1}})
    assert json.loads(json.dumps(plain)) == {"t": [1, 2], "1": "2026-01-01", "b": "YQ==", "d": "1.5", "s": [1, 2]}


def _types(value):
    if isinstance(value, dict):
        return ("dict", sorted((repr(_types(k)), repr(_types(v))) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, [_types(v) for v in value])
    if isinstance(value, (set, frozenset)):
        return (type(value).__name__, sorted(repr(_types(v)) for v in value))
    if isinstance(value, dt.datetime):
        return ("datetime", type(value.tzinfo).__name__, value.utcoffset())
    return type(value).__name__
