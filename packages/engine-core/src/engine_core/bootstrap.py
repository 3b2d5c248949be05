"""Moved to ``engine_core.adapters.bootstrap``: this alias (the same module object) goes once nothing imports it
(the control plane's ``routes.py`` still does)."""

import sys

from .adapters import bootstrap as _moved

sys.modules[__name__] = _moved
