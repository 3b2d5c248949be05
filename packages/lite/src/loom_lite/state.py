"""Where ``loom`` and ``LoomClient()`` find a running ``loom dev``: the per-user state file the local stack
uses too (``loom_cli.sdk.locate.state_file()``: ``$LOOM_STATE_FILE``, else ``$XDG_STATE_HOME`` or
``~/.local/state`` / ``loom/local.json``). The last one started wins; a clean stop removes its own record
and leaves another's alone.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from loom_cli.sdk.locate import state_file

KIND = "lite"


def record(url: str, db: Path, pid: int | None = None) -> Path:
    """Write this runtime's record (atomically: a reader sees the old one or the new one)."""
    path = state_file()
    body: dict[str, Any] = {"kind": KIND, "url": url, "db": str(Path(db).resolve()), "pids": {"runtime": pid or os.getpid()},
                            "started_at": time.time(), "cwd": os.getcwd()}
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(body, indent=2) + "\n")
    tmp.replace(path)
    return path


def forget(pid: int | None = None) -> None:
    """Remove the record if it is this process's (another `loom dev` or `make up` may have replaced it)."""
    path = state_file()
    try:
        mine = json.loads(path.read_text()).get("pids", {}).get("runtime") == (pid or os.getpid())
    except (OSError, ValueError, AttributeError):
        return
    if mine:
        path.unlink(missing_ok=True)
