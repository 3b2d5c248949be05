"""Loads the shared Lambda test harness that lives beside the event files in tests/events/."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

_NAME = "loom_lambda_harness"
if _NAME not in sys.modules:
    _path = Path(__file__).resolve().parents[3] / "tests" / "events" / "lambda_harness.py"
    _spec = importlib.util.spec_from_file_location(_NAME, _path)
    sys.modules[_NAME] = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(sys.modules[_NAME])

from loom_lambda_harness import clock, lambdas, logs, world  # noqa: E402,F401  (fixtures)
