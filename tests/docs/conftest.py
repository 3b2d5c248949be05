"""The docs tests import their block finder (doc_blocks.py) by name; importlib mode does not add this directory."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
