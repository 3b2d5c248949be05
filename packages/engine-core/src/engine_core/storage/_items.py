"""Moved to ``engine_core.adapters._items``: this alias (the same module object) goes once nothing imports it."""

import sys

from ..adapters import _items as _moved

sys.modules[__name__] = _moved
