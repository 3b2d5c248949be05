"""Moved to ``engine_core.adapters.dynamodb``: this alias (the same module object) goes once nothing imports it."""

import sys

from ..adapters import dynamodb as _moved

sys.modules[__name__] = _moved
