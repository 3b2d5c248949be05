"""Moved to ``engine_core.adapters.sqs``: this alias (the same module object) goes once nothing imports it."""

import sys

from .adapters import sqs as _moved

sys.modules[__name__] = _moved
