"""Loom without AWS: one process runs the worker loop, the sweeper loop and the control plane's HTTP API on
127.0.0.1, with the state and the step queue in one SQLite file (``engine_core.adapters.sqlite``).

    loom dev [MODULE ...]            # or: python -m loom_lite [MODULE ...]

``LiteRuntime`` is the same, in-process (tests, scripts); ``loom_lite.demo`` is ``make demo-lite``.
"""

from .config import LiteConfig
from .runtime import LiteRuntime

__all__ = ["LiteConfig", "LiteRuntime"]
