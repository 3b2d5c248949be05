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
