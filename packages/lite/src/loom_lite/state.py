"""Where ``loom`` and ``LoomClient()`` find a running ``loom dev``: the per-user state file the local stack
uses too (``loom_cli.sdk.locate.state_file()``: ``$LOOM_STATE_FILE``, else ``$XDG_STATE_HOME`` or
``~/.local/state`` / ``loom/local.json``). The last one started wins; a clean stop removes its own record
(handing the file back to the one it replaced, if that one still runs) and leaves another's alone.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from loom_cli.sdk.locate import is_running, state_file

KIND = "lite"


PREVIOUS_KEPT = 4
"""How many records a newer one keeps under it (``previous``): a clean stop hands the file back to the newest
of them still running."""


def record(url: str, db: Path, pid: int | None = None) -> Path:
    """Write this runtime's record (atomically: a reader sees the old one or the new one), keeping the one it
    replaces under ``previous`` while that one's process runs."""
    path = state_file()
    body: dict[str, Any] = {"kind": KIND, "url": url, "db": str(Path(db).resolve()), "pids": {"runtime": pid or os.getpid()},
                            "started_at": time.time(), "cwd": os.getcwd()}
    under = _running(_read(path))
    if under is not None:
        body["previous"] = _trimmed(under, PREVIOUS_KEPT - 1)
    _write(path, body)
    return path


def forget(pid: int | None = None) -> None:
    """Remove the record if it is this process's (another `loom dev` or `make up` may have replaced it); the
    one it replaced, if its process still runs, is the record again (two `loom dev`, the second stopped: the
    first is found, not reported missing)."""
    path = state_file()
    found = _read(path)
    if found is None or not isinstance(found.get("pids"), dict) or found["pids"].get("runtime") != (pid or os.getpid()):
        return
    under = _running(found.get("previous"))
    if under is None:
        path.unlink(missing_ok=True)
    else:
        _write(path, under)


def _read(path: Path) -> dict[str, Any] | None:
    try:
        found = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return found if isinstance(found, dict) else None


def _write(path: Path, body: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(body, indent=2) + "\n")
    tmp.replace(path)


def _running(found: Any) -> dict[str, Any] | None:
    """The newest record in ``found``'s chain whose process runs on this host (None: none does)."""
    while isinstance(found, dict):
        pids = found.get("pids")
        if isinstance(pids, dict) and any(isinstance(p, int) and p > 0 and is_running(p) for p in pids.values()):
            return found
        found = found.get("previous")
    return None


def _trimmed(found: dict[str, Any], depth: int) -> dict[str, Any]:
    if depth <= 0:
        return {k: v for k, v in found.items() if k != "previous"}
    under = found.get("previous")
    return {**found, "previous": _trimmed(under, depth - 1)} if isinstance(under, dict) else found
