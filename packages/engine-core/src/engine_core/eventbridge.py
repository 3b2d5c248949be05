"""Moved to ``engine_core.adapters.eventbridge``: this alias (the same module object) goes once nothing imports it."""

import sys

from .adapters import eventbridge as _moved

sys.modules[__name__] = _moved
