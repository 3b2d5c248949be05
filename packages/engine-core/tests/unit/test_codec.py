"""Step values survive a crash with their exact type and value, or fail at once naming the path."""

from __future__ import annotations

import datetime as dt
import json
import math
import sys
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


@pytest.mark.parametrize("value, path", [
    ({"a": ["ok", "bad\ud800"]}, "result['a'][1]"),
    ({"k\udc00": 1}, "result.keys()"),
    ({1: "x\udfff"}, "result[1]"),
    ({"t": ("\ud83d",)}, "result['t'][0]"),
    ({"s": frozenset({"\ud800"})}, "result['s']{...}"),
    ({"n": {("\udc80", 1): 2}}, "result['n'].keys()[0]"),
    ({"at": dt.datetime(2026, 1, 1, tzinfo=dt.timezone(dt.timedelta(hours=1), "\ud800"))}, "result['at']"),
])
def test_lone_surrogates_fail_at_encode_naming_the_path(value, path):
    # when / then: encode itself refuses, never a UnicodeEncodeError later in the size check
    with pytest.raises(NonSerializableResultError, match="surrogate") as info:
        codec.encode(value)
    assert info.value.path == path


def test_valid_non_ascii_text_and_astral_characters_still_roundtrip():
    value = {"caf\u00e9": "\U0001f600 \u4e2d\u6587", "k": ["\u00ff", "\ufffd"]}
    text, decoded = codec.roundtrip(value)
    assert decoded == value and text.encode("utf-8")


@pytest.mark.parametrize("value, path", [
    ({"n": 10**5000}, "result['n']"),
    ({"n": [-(10**5000)]}, "result['n'][0]"),
    ({10**5000: 1}, "result.keys()"),
])
def test_ints_past_the_str_conversion_limit_fail_naming_the_path(value, path):
    with pytest.raises(NonSerializableResultError, match="digits") as info:
        codec.encode(value)
    assert info.value.path == path


def test_big_ints_within_the_limit_roundtrip_exactly():
    limit = sys.get_int_max_str_digits() or 4300
    for n in (10 ** (limit - 1), -(10 ** (limit - 1)), 10 ** (limit - 1) * 9 + 123456789, 2**1000 + 1):
        assert len(str(abs(n))) <= limit
        _, decoded = codec.roundtrip({"n": n, n: (n,)})
        assert decoded == {"n": n, n: (n,)} and type(decoded["n"]) is int


def _nest(kind: str, depth: int):
    """``depth`` containers of one kind around a 0 (for dict_key: tuples inside one dict's key)."""
    if kind == "dict_key":
        return {_nest("tuple", depth - 1): "x"}
    wrap = {"list": lambda v: [v], "tuple": lambda v: (v,), "dict": lambda v: {"k": v},
            "int_dict": lambda v: {1: v}, "frozenset": lambda v: frozenset({v})}[kind]
    value: object = 0
    for _ in range(depth):
        value = wrap(value)
    return value


@pytest.mark.parametrize("kind", ["list", "tuple", "dict", "int_dict", "frozenset", "dict_key"])
def test_depth_limit_applies_to_every_container_kind(kind):
    # within the limit: stored, and comes back exactly
    ok = _nest(kind, codec._MAX_DEPTH)
    assert codec.roundtrip(ok)[1] == ok
    # past it: refused with the path, never a RecursionError
    for depth in (codec._MAX_DEPTH + 1, 5000):
        with pytest.raises(NonSerializableResultError, match="nesting"):
            codec.encode(_nest(kind, depth))


def test_self_referencing_containers_are_refused_not_a_recursion_error():
    loop: list = []
    loop.append(loop)
    cycle: dict = {}
    cycle["me"] = cycle
    for value in (loop, cycle, {"deep": [loop]}):
        with pytest.raises(NonSerializableResultError, match="nesting"):
            codec.encode(value)


def _stack_depth() -> int:
    frame, depth = sys._getframe(1), 0
    while frame is not None:
        frame, depth = frame.f_back, depth + 1
    return depth


@pytest.mark.parametrize("kind", ["list", "int_dict"])
def test_encode_never_leaks_recursion_error_even_on_a_nearly_full_stack(kind):
    # given: a value at the depth limit, encoded with only a little stack left (a deep caller)
    value = _nest(kind, codec._MAX_DEPTH)
    outcomes = set()

    def at_depth(n):
        if n:
            return at_depth(n - 1)
        try:
            codec.encode(value)
            outcomes.add("stored")
        except NonSerializableResultError:
            outcomes.add("refused")
        except RecursionError:
            outcomes.add("leaked RecursionError")

    room = sys.getrecursionlimit() - _stack_depth()
    # when: from plenty of room down to almost none
    for left in range(400, 10, -3):
        at_depth(room - left)
    # then: stored when it fits, refused as non-serializable when it does not, never a RecursionError
    assert outcomes <= {"stored", "refused"}, outcomes
    assert "stored" in outcomes


DEEP_TEXTS = {
    "closed_lists": "[" * 100000 + "]" * 100000,
    "unclosed_lists": "[" * 100000,
    "objects": '{"a":' * 100000 + "1" + "}" * 100000,
    "tagged_tuples": '{"$loom":"tuple","v":' * 900 + "[]" + "}" * 900,
    "lists_just_under_json_limit": "[" * 900 + "]" * 900,
}


@pytest.mark.parametrize("name", sorted(DEEP_TEXTS))
def test_decode_of_deeply_nested_text_raises_value_error_not_recursion_error(name):
    with pytest.raises(ValueError):
        codec.decode(DEEP_TEXTS[name])


@pytest.mark.parametrize("text", [
    '{"$loom": "tuple", "v": 5}',
    '{"$loom": "dict", "v": [[1]]}',
    '{"$loom": "datetime", "v": "x"}',
    '{"$loom": "timedelta", "v": [1]}',
    '{"$loom": "float", "v": "big"}',
    '{"$loom": "bytes", "v": "***"}',
    '{"$loom": "set", "v": [[1]]}',
    '{"$loom": "uuid", "v": 7}',
    '{"$loom": "date", "v": null}',
    '{"$loom": "datetime", "v": {"iso": "2026-01-01T00:00:00", "zone": null}}',
    "1" + "0" * 5000,
], ids=lambda t: t[:40])
def test_decode_of_tampered_text_raises_value_error(text):
    with pytest.raises(ValueError):
        codec.decode(text)


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


# -- canonical text: the same value gives the same text, whatever order its dicts were built in ------------------


def _reordered(value):
    """The same value with every dict's insertion order reversed, all the way down."""
    if type(value) is dict:
        return {k: _reordered(v) for k, v in reversed(list(value.items()))}
    if type(value) is list:
        return [_reordered(v) for v in value]
    if type(value) is tuple:
        return tuple(_reordered(v) for v in value)
    return value


SAME_VALUES = {
    "flat": ({"a": 1, "b": 2}, {"b": 2, "a": 1}),
    "nested": ({"x": {"a": 1, "b": [{"c": 1, "d": 2}]}, "y": 0}, {"y": 0, "x": {"b": [{"d": 2, "c": 1}], "a": 1}}),
    "int_keys": ({1: "a", 2: "b"}, {2: "b", 1: "a"}),
    "mixed_keys": ({1: "a", "1": "b", None: "c", (1, 2): "d"}, {(1, 2): "d", None: "c", "1": "b", 1: "a"}),
    "tag_key": ({"$loom": "x", "a": 1}, {"a": 1, "$loom": "x"}),
    "dict_in_tagged_dict": ({1: {"a": 1, "b": 2}}, {1: {"b": 2, "a": 1}}),
    "dict_in_tuple": (({"a": 1, "b": 2},), ({"b": 2, "a": 1},)),
    "sets": ({"s": {3, 1, 2}, "f": frozenset({"b", "a"})}, {"f": frozenset({"a", "b"}), "s": {2, 3, 1}}),
    "set_of_tuples": ({(2, "b"), (1, "a")}, {(1, "a"), (2, "b")}),
    "datetimes": ({"at": dt.datetime(2026, 1, 1, tzinfo=ZoneInfo("Europe/Paris")), "d": dt.date(2026, 1, 2)},
                  {"d": dt.date(2026, 1, 2), "at": dt.datetime(2026, 1, 1, tzinfo=ZoneInfo("Europe/Paris"))}),
}


@pytest.mark.parametrize("name", sorted(SAME_VALUES))
def test_canonical_does_not_depend_on_dict_key_order(name):
    first, second = SAME_VALUES[name]
    assert first == second
    assert codec.canonical(first) == codec.canonical(second)
    assert codec.canonical(first) == codec.canonical(_reordered(first))


@pytest.mark.parametrize("name", sorted(CASES))
def test_canonical_is_stable_across_a_roundtrip_and_reordering(name):
    value = CASES[name]
    text = codec.canonical(value)
    json.loads(text)
    assert codec.canonical(codec.roundtrip(value)[1]) == text
    assert codec.canonical(_reordered(value)) == text


DIFFERENT_VALUES = [
    ("tuple vs list", (1, 2), [1, 2]),
    ("int vs float", {"n": 1}, {"n": 1.0}),
    ("int vs bool", {"n": 1}, {"n": True}),
    ("float vs bool", {"n": 1.0}, {"n": True}),
    ("int vs str", {"n": 1}, {"n": "1"}),
    ("int key vs str key", {1: "a"}, {"1": "a"}),
    ("int key vs float key", {1: "a"}, {1.0: "a"}),
    ("zero vs negative zero", {"z": 0.0}, {"z": -0.0}),
    ("set vs frozenset", {1, 2}, frozenset({1, 2})),
    ("set vs list", {"s": {1, 2}}, {"s": [1, 2]}),
    ("decimal precision", Decimal("1.0"), Decimal("1.00")),
    ("bytes vs bytearray", b"a", bytearray(b"a")),
    ("list order", [1, 2], [2, 1]),
    ("tuple order", (1, 2), (2, 1)),
    ("none vs missing", {"a": None}, {}),
    ("nested value", {"a": {"b": 1}}, {"a": {"b": 2}}),
    ("key vs value", {"a": "b"}, {"b": "a"}),
    ("tagged dict pairs", {1: "a", 2: "b"}, {1: "b", 2: "a"}),
    ("user dict shaped like a tag", {"$loom": "tuple", "v": [1]}, (1,)),
    ("timezones", dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc),
     dt.datetime(2026, 1, 1, 1, tzinfo=dt.timezone(dt.timedelta(hours=1)))),
]


@pytest.mark.parametrize(("first", "second"), [r[1:] for r in DIFFERENT_VALUES], ids=[r[0] for r in DIFFERENT_VALUES])
def test_canonical_tells_different_values_apart(first, second):
    assert codec.canonical(first) != codec.canonical(second)


def test_canonical_of_randomly_ordered_dicts_is_one_text():
    import random

    rng = random.Random(7)
    keys = ["a", "b", "c", "d", 1, 2, (3, 4), None, "é", "\U0001f600"]

    def build(depth):
        if depth == 0:
            return rng.choice([0, 1.5, "x", None, True, (1, "y"), Decimal("2.50")])
        items = [(k, build(depth - 1)) for k in rng.sample(keys, rng.randint(1, 5))]
        return dict(items) if rng.random() < 0.8 else [v for _, v in items]

    def shuffled(value):
        if type(value) is dict:
            items = list(value.items())
            rng.shuffle(items)
            return {k: shuffled(v) for k, v in items}
        if type(value) is list:
            return [shuffled(v) for v in value]
        return value

    for _ in range(200):
        value = build(3)
        assert codec.canonical(shuffled(value)) == codec.canonical(value)


@pytest.mark.parametrize("value", [{"a": object()}, {"s": "\ud800"}, {"n": 10**5000}, _nest("list", 80)],
                         ids=["object", "surrogate", "huge_int", "too_deep"])
def test_canonical_refuses_what_encode_refuses(value):
    with pytest.raises(NonSerializableResultError):
        codec.canonical(value)


def test_copy_value_equals_a_second_decode_and_shares_nothing_mutable():
    # given: a value of every type the codec keeps, nested
    value = {"list": [1, [2, {"x": bytearray(b"ab")}]], "tuple": (1, [2], {3}), "set": {1, "a"},
             "frozen": frozenset({(1, 2)}), "when": dt.datetime(2026, 3, 1, tzinfo=dt.timezone.utc),
             "day": dt.date(2026, 3, 1), "dec": Decimal("1.5"), "id": uuid.UUID(int=7), "bytes": b"z",
             ("k", 1): None, 5: 1.5, "nan": math.inf, "td": dt.timedelta(seconds=3), "t": dt.time(1, 2)}
    text = codec.encode(value)
    decoded = codec.decode(text)

    # when
    copy = codec.copy_value(decoded)

    # then: equal, the same types all the way down, and no list, dict, set or bytearray shared
    assert copy == codec.decode(text) and codec.canonical(copy) == codec.canonical(decoded)
    assert not set(_mutables(copy, [])) & set(_mutables(decoded, []))
    with pytest.raises(TypeError):
        codec.copy_value(object())


def _mutables(v, out):
    """The ids of every list, dict, set and bytearray in ``v``."""
    if isinstance(v, (list, dict, set, bytearray)):
        out.append(id(v))
    if isinstance(v, dict):
        for x in v.values():
            _mutables(x, out)
    elif isinstance(v, (list, tuple, set)):
        for x in v:
            _mutables(x, out)
    return out


@pytest.mark.parametrize(("value", "cheapest"), [
    ("text", None), (7, None), (None, None), ((1, "a", b"z"), None), (frozenset({1}), None),
    ({"payload": "x" * 100, "n": 1, "at": dt.date(2026, 3, 1)}, dict.copy), ({}, dict.copy),
    ([1, "a", Decimal("2")], list.copy),
    ({"nested": {"a": 1}}, codec.copy_value), ([[1]], codec.copy_value), ((1, [2]), codec.copy_value),
    ({1, 2}, codec.copy_value), (bytearray(b"ab"), codec.copy_value), ({"b": bytearray(b"a")}, codec.copy_value),
], ids=lambda v: getattr(v, "__qualname__", None) or repr(v))
def test_copier_is_the_cheapest_copy_that_equals_a_second_decode(value, cheapest):
    # given: a value as decode() returns it
    text = codec.encode(value)
    decoded = codec.decode(text)

    # when
    copy_with = codec.copier(decoded)
    copy = decoded if copy_with is None else copy_with(decoded)

    # then: the cheap copy where every member is unchanging, and in every case what copy_value hands out
    assert copy_with is cheapest
    assert copy == codec.decode(text) and codec.canonical(copy) == codec.canonical(decoded)
    assert not set(_mutables(copy, [])) & set(_mutables(decoded, []))


def test_a_pydantic_model_or_a_dataclass_is_refused_with_the_call_that_makes_it_plain_data():
    import dataclasses

    from pydantic import BaseModel

    class Order(BaseModel):
        id: int

    @dataclasses.dataclass
    class Line:
        sku: str

    with pytest.raises(NonSerializableResultError, match=r"\['order'\].*\.model_dump\(\)"):
        codec.encode({"order": Order(id=1)}, "step result")
    with pytest.raises(NonSerializableResultError, match=r"\[0\].*dataclasses\.asdict"):
        codec.encode([Line("a")], "step result")
    with pytest.raises(NonSerializableResultError) as other:
        codec.encode(object(), "step result")
    assert "model_dump" not in str(other.value) and "asdict" not in str(other.value)


def test_a_zoneinfo_read_from_a_file_is_refused_naming_the_path_instead_of_stored_unreadable():
    import io

    with open(_tzfile("Europe/Paris"), "rb") as f:
        zone = ZoneInfo.from_file(io.BytesIO(f.read()))  # no key: nothing could restore it by name
    value = {"at": dt.datetime(2026, 5, 1, 9, tzinfo=zone)}
    with pytest.raises(NonSerializableResultError, match=r"result\['at'\].*ZoneInfo\.from_file.*ZoneInfo\(key\)"):
        codec.encode(value)


def _tzfile(key: str) -> str:
    import zoneinfo

    for root in zoneinfo.TZPATH:
        path = f"{root}/{key}"
        try:
            open(path, "rb").close()
            return path
        except OSError:
            continue
    from importlib.resources import files

    return str(files("tzdata") / "zoneinfo" / key)  # the package zoneinfo falls back to
