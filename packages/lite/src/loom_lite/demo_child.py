"""``python -m loom_lite.demo_child ARMS [serve arguments]``: the runtime of ``make demo-lite``, with crash points
armed. ``ARMS`` is a JSON list of ``{"point", "action", "match"}``: at a point of ``engine_core.faults`` whose
report matches, ``kill`` SIGKILLs this process (no cleanup, as a crash) and ``raise`` raises inside the step
body (its own failure). Each arm fires once. Only the demo starts this module; ``loom dev`` has no crash
points.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from typing import Any

from engine_core import faults

from .cli import main


def hook_for(arms: list[dict[str, Any]]):
    def hook(point: str, info: dict[str, Any]) -> None:
        for arm in arms:
            if arm.get("fired") or arm["point"] != point:
                continue
            if all(info.get(k) == v for k, v in arm.get("match", {}).items()):
                arm["fired"] = True
                if arm["action"] == "kill":
                    os.kill(os.getpid(), signal.SIGKILL)
                raise RuntimeError(arm.get("message") or f"injected at {point}")
    return hook


if __name__ == "__main__":
    faults.install(hook_for(json.loads(sys.argv[1])))
    sys.exit(main(sys.argv[2:]))
