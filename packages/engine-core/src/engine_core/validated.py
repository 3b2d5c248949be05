"""A validated pydantic model as an execution's context holds it (a typed input, an event's data).

Its values where the codec keeps them as themselves (datetimes, tuples, sets, Decimals, ...), else as JSON
has them: an enum's value, a URL's text, anything else pydantic can serialise. An aware datetime whose
timezone is pydantic's own fixed offset keeps that offset as a ``datetime.timezone``. So a start or an event
that fits its model is always stored, instead of failing on a value the model itself produced.
"""

from __future__ import annotations

import datetime as dt
from typing import Any
from zoneinfo import ZoneInfo

from . import codec
from .errors import NonSerializableResultError


def storable(model: Any) -> dict[str, Any]:
    """``model``'s fields as the context will hold them (see the module's docstring)."""
    return _merge(model.model_dump(), model.model_dump(mode="json"))


def _merge(value: Any, as_json: Any) -> Any:
    if type(value) is dict and isinstance(as_json, dict) and len(value) == len(as_json):
        return {k: _merge(v, j) for (k, v), j in zip(value.items(), as_json.values())}
    if type(value) in (list, tuple) and isinstance(as_json, list) and len(value) == len(as_json):
        merged = [_merge(v, j) for v, j in zip(value, as_json)]
        return merged if type(value) is list else tuple(merged)
    if isinstance(value, dt.datetime) and value.tzinfo is not None \
            and not isinstance(value.tzinfo, (dt.timezone, ZoneInfo)) and value.utcoffset() is not None:
        value = value.replace(tzinfo=dt.timezone(value.utcoffset()))
    try:
        codec.encode(value)
    except NonSerializableResultError:
        return as_json
    return value


def field_problems(exc: Any) -> list[dict[str, Any]]:
    """A pydantic ValidationError as a list of {field, problem, type}: what a 400 lists."""
    return [{"field": ".".join(str(p) for p in e["loc"]) or "(input)", "problem": e["msg"], "type": e["type"]}
            for e in exc.errors(include_url=False, include_input=False)]


def rebuild_problems(model: Any, validated: Any, stored: dict[str, Any]) -> list[dict[str, str]]:
    """What a code-first function taking ``model`` would get otherwise than the start validated: each delivery
    builds its argument again from ``stored`` (``storable(validated)``), so a field whose stored value does not
    validate back to itself (a validator that changes a value each time it runs, a ``Json`` field, a secret
    stored masked) is named, as {field, problem, type}. Empty when the rebuild gives ``validated`` back."""
    from pydantic import ValidationError

    try:
        again = model.model_validate(stored, by_name=True)
    except ValidationError as exc:
        return [{**p, "type": "not_rebuildable",
                 "problem": f"its validated value does not validate again ({p['problem']})"} for p in field_problems(exc)]
    return [{"field": name, "type": "not_rebuildable",
             "problem": f"its validated value {_short(getattr(validated, name))} validates again to "
                        f"{_short(getattr(again, name))}"}
            for name in type(validated).model_fields if getattr(again, name) != getattr(validated, name)]


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def secret_paths(model: Any) -> list[str]:
    """The fields of ``model`` (dotted paths) holding a pydantic secret: the stored input would keep its mask
    (``'**********'``), never the secret."""
    import pydantic

    secrets = tuple(t for t in (pydantic.SecretStr, pydantic.SecretBytes, getattr(pydantic, "Secret", None)) if t)
    found: list[str] = []

    def walk(value: Any, path: str) -> None:
        if isinstance(value, secrets):
            found.append(path or "(input)")
        elif isinstance(value, dict):
            for k, v in value.items():
                walk(v, f"{path}.{k}" if path else str(k))
        elif isinstance(value, (list, tuple, set, frozenset)):
            for i, v in enumerate(value):
                walk(v, f"{path}.{i}")

    walk(model.model_dump(), "")
    return found
