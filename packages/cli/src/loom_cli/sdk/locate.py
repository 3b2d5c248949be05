"""Where the control plane is: an explicit URL, ``$LOOM_URL``, a Terraform environment's outputs, or the
local stack that ``make up`` recorded in a per-user state file, found the same way from any directory.

The state file is ``$LOOM_STATE_FILE`` if set, else ``$XDG_STATE_HOME/loom/local.json``, else
``~/.local/state/loom/local.json``. ``make up`` (``python -m loom_local up``) writes it with the stack's
URL, queues, endpoint and process ids; ``make down`` removes it. Several checkouts share it: the last
``make up`` wins; point ``LOOM_STATE_FILE`` at another file to keep stacks apart (the tests always do).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

from .errors import CONFIGURATION, UNREACHABLE, LoomError

URL_ENV = "LOOM_URL"
STATE_ENV = "LOOM_STATE_FILE"


def state_file() -> Path:
    """The per-user file recording the local stack (``make up`` writes it, ``make down`` removes it)."""
    explicit = os.environ.get(STATE_ENV)
    if explicit:
        return Path(explicit).expanduser()
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "loom" / "local.json"


def local_stack() -> dict[str, Any] | None:
    """What ``make up`` recorded (url, queue_url, dlq_url, endpoint, region, pids, repo), or None."""
    path = state_file()
    if not path.exists():
        return None
    try:
        state = json.loads(path.read_text())
        if not isinstance(state, dict) or not isinstance(state.get("url"), str):
            raise ValueError("it has no url")
    except (OSError, ValueError) as exc:
        raise LoomError(CONFIGURATION, f"{path} is unreadable ({exc}); run `make down && make up` again, or delete "
                                       "it") from None
    return state


def resolve_url(url: str | None = None, env_dir: str | Path | None = None) -> str:
    """``url``, then ``env_dir``'s ``terraform output function_url``, then ``$LOOM_URL``, then the local stack:
    what a command names wins over what its environment holds (an ambient ``$LOOM_URL`` never sends a command
    that names an environment to another deployment)."""
    if url:
        return url
    if env_dir:
        return terraform_output(Path(env_dir), "function_url")
    if os.environ.get(URL_ENV):
        return os.environ[URL_ENV]
    state = local_stack()
    if state is not None:
        return _alive(state)["url"]
    raise LoomError(CONFIGURATION, f"no control plane URL: pass --url, set {URL_ENV}, pass --env-dir "
                                   f"terraform/envs/<env>, or start Loom on this machine: `loom dev <workflows>` (one "
                                   f"process on SQLite, no AWS) or `make up` (the local AWS stack); each records "
                                   f"itself in {state_file()}")


def _alive(state: dict[str, Any]) -> dict[str, Any]:
    """The record to use: the newest whose process runs. A ``loom dev`` started beside another keeps the older
    one's record under ``previous``; killed (a clean stop hands the file back itself), the older one, still
    serving, is used. When none runs, that is said, not left to a refused connection."""
    found: Any = state
    while isinstance(found, dict):
        if _lite_alive(found):
            return found
        found = found.get("previous")
    pid = _lite_pid(state)
    raise LoomError(UNREACHABLE, f"the `loom dev` recorded in {state_file()} (pid {pid}, on "
                                 f"{state.get('db', 'its file')}) is not running any more: start it again "
                                 f"(`loom dev <workflows>`; what it had in hand resumes), or pass --url")


def _lite_pid(record: dict[str, Any]) -> int | None:
    pids = record.get("pids")
    pid = pids.get("runtime") if isinstance(pids, dict) else None
    return pid if record.get("kind") == "lite" and isinstance(pid, int) and pid > 0 else None


def _lite_alive(record: dict[str, Any]) -> bool:
    """Whether the record's process serves (any record other than a ``loom dev``'s counts as serving)."""
    pid = _lite_pid(record)
    return isinstance(record.get("url"), str) and (pid is None or _same_process(pid, record.get("started_at")))


def process_on_this_host(pid: int) -> tuple[str, str] | None:
    """(state, start time) of a process on this host from ``/proc``, None when there is none; ("?", "") where
    ``/proc`` cannot say (any process ``kill(pid, 0)`` finds counts then, another user's too)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        return fields[0].decode(), fields[19].decode()  # state, starttime (clock ticks since boot)
    except FileNotFoundError:
        return None
    except (OSError, IndexError, ValueError):
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except OSError:
        pass  # another user's process: it is there
    return "?", ""


def is_running(pid: int) -> bool:
    """A process on this host with that pid, not a zombie (killed, not yet reaped)."""
    found = process_on_this_host(pid)
    return found is not None and found[0] not in ("Z", "X")


def _same_process(pid: int, recorded_at: Any) -> bool:
    """Whether ``pid`` is still the process that wrote the record: running (not a zombie) and not started
    after the record was written (a reused pid). True where ``/proc`` cannot say."""
    found = process_on_this_host(pid)
    if found is None or found[0] in ("Z", "X"):
        return False
    if not found[1] or not isinstance(recorded_at, (int, float)):
        return True
    try:
        with open("/proc/stat", "rb") as f:
            boot = next(float(line.split()[1]) for line in f if line.startswith(b"btime "))
    except (OSError, IndexError, ValueError, StopIteration):
        return True
    return boot + int(found[1]) / os.sysconf("SC_CLK_TCK") <= recorded_at + 2  # btime is whole seconds


def terraform_outputs(env_dir: Path) -> dict[str, Any]:
    """``terraform output -json`` of an applied environment directory."""
    if not env_dir.is_dir():
        raise LoomError(CONFIGURATION, f"--env-dir {env_dir} is not a directory")
    try:
        out = subprocess.run(["terraform", f"-chdir={env_dir}", "output", "-json", "-no-color"],
                             capture_output=True, text=True, timeout=60)
    except FileNotFoundError:
        raise LoomError(CONFIGURATION, "--env-dir needs the terraform CLI on PATH") from None
    if out.returncode != 0:
        raise LoomError(CONFIGURATION, f"`terraform output` failed in {env_dir}: {out.stderr.strip()}; has this "
                                       "environment been applied?")
    try:
        return json.loads(out.stdout or "{}")
    except ValueError:
        raise LoomError(CONFIGURATION, f"`terraform output -json` in {env_dir} printed something that is not "
                                       "JSON") from None


def terraform_output(env_dir: Path, name: str) -> str:
    value = (terraform_outputs(env_dir).get(name) or {}).get("value")
    if not isinstance(value, str) or not value:
        raise LoomError(CONFIGURATION, f"{env_dir} has no `{name}` output; has this environment been applied?")
    return value
