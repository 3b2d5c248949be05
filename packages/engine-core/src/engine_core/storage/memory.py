"""Moved to ``engine_core.adapters.memory``: this alias (the same module object) goes once nothing imports it."""

import sys

from ..adapters import memory as _moved

sys.modules[__name__] = _moved
