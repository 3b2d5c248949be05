"""Apply ``terraform/envs/local`` to the emulator, with a state file of the run's own.

Each run starts a fresh emulator, so each run applies into a fresh state file (``-state``), never the
working directory's: the interactive stack, the demo and the test session cannot trip over each other.
Provider plugins come from the local mirror through the CLI configuration that ``mk/terraform.mk``
generates (``TF_CLI_CONFIG_FILE``); nothing is downloaded.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import signal
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TextIO

Progress = Callable[[str], None]
_INTERESTING = re.compile(r"(: Creating\.\.\.$|: Creation complete|: Still creating|^Apply complete|^Error: |^Warning: )")
_QUIET = ("Warning: Deprecated flag: -state",)  # a per-run state file is the point here
# Warnings a newcomer sees on the local stack, and why they are expected there (the full text is in the log).
_EXPLAINED = {
    "Warning: Check block assertion failed": (
        "(expected here: the local stack sets lease_s=5, shorter than the queue's visibility timeout, so a "
        "lost step message is re-driven in seconds; on AWS leave lease_s unset and this check stays quiet)"),
    "Warning: Incomplete lock file information for providers": (
        "(expected here: the provider comes from the local mirror, which records one platform's checksum; "
        "`terraform providers lock` with every platform you deploy from completes it)"),
}
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


class TerraformError(Exception):
    pass


def _stop_group(proc: subprocess.Popen) -> None:
    """Interrupt terraform like Ctrl-C would, then kill it and its provider plugins (its process group)."""
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGINT)
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass
    except ProcessLookupError:
        return
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def _run(args: list[str], env: Mapping[str, str], log: TextIO, progress: Progress | None,
         timeout_s: float) -> None:
    log.write(f"$ {' '.join(args)}\n")
    log.flush()
    proc = subprocess.Popen(args, env=dict(env), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, text=True, start_new_session=True)
    tail: list[str] = []
    deadline = time.monotonic() + timeout_s
    assert proc.stdout is not None
    try:
        for line in proc.stdout:
            clean = _ANSI.sub("", line.rstrip("\n"))
            log.write(clean + "\n")
            tail = (tail + [clean])[-40:]
            if progress is not None and _INTERESTING.search(clean.strip()) and not clean.strip().startswith(_QUIET):
                progress(clean.strip())
                why = _EXPLAINED.get(clean.strip())
                if why:
                    progress(why)
            if time.monotonic() > deadline:
                _stop_group(proc)
                raise TerraformError(f"`{' '.join(args[:3])}` did not finish within {timeout_s:g} s; see {log.name}")
        code = proc.wait()
    except BaseException:
        _stop_group(proc)
        raise
    log.flush()
    if code != 0:
        detail = "\n".join(t for t in tail if t.strip())
        raise TerraformError(f"`{' '.join(args[:3])} ...` failed (exit {code}); full output in {log.name}. "
                             f"Last lines:\n{detail}")


_VARIABLE = re.compile(r'^\s*variable\s+"([A-Za-z0-9_-]+)"', re.M)


def declared_variables(env_dir: Path) -> set[str]:
    """Names of the input variables a Terraform configuration declares."""
    names: set[str] = set()
    for tf in env_dir.glob("*.tf"):
        names.update(_VARIABLE.findall(tf.read_text(encoding="utf-8")))
    return names


def cli_config(repo: Path, explicit: Path | None = None) -> Path:
    """The Terraform CLI configuration that installs providers from the local mirror only.

    ``mk/terraform.mk`` writes it (``make tf-config``) and exports ``TF_CLI_CONFIG_FILE`` for make's
    recipes; run outside make, the generated file under build/terraform is used.
    """
    candidates = [explicit] if explicit else []
    env = os.environ.get("TF_CLI_CONFIG_FILE")
    if env:
        candidates.append(Path(env))
    candidates.append(repo / "build" / "terraform" / "terraformrc")
    for c in candidates:
        if c is not None and c.is_file():
            return c.resolve()
    raise TerraformError("no Terraform CLI configuration for the provider mirror (looked at "
                         + ", ".join(str(c) for c in candidates if c is not None)
                         + "): run `make tf-config` (mk/terraform.mk), or use `make up` / `make demo`")


@contextlib.contextmanager
def _init_lock(env_dir: Path) -> Iterator[None]:
    fd = os.open(env_dir, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def apply(env_dir: Path, state_path: Path, variables: Mapping[str, str], log_path: Path,
          cli_config: Path | None = None, progress: Progress | None = None, timeout_s: float = 600.0,
          terraform: str = "terraform", refresh: bool = True) -> None:
    """``terraform init`` (if needed) then ``apply`` of ``env_dir`` into ``state_path``.

    ``refresh=False`` plans from the state alone (``-refresh=false``): for a redeploy to an emulator nothing
    else changes, so reading every resource back first would only cost time."""
    if not list(env_dir.glob("*.tf")):
        raise TerraformError(f"{env_dir} has no Terraform configuration; the local environment lives in "
                             "terraform/envs/local")
    missing = sorted(set(variables) - declared_variables(env_dir))
    if missing:
        raise TerraformError(f"{env_dir} does not declare the variable(s) {', '.join(missing)} the local runtime "
                             "sets; update terraform/envs/local (or the runtime's options) so they agree")
    env = {k: v for k, v in os.environ.items() if not k.startswith("TF_VAR_")}
    env.setdefault("TF_IN_AUTOMATION", "1")
    env["CHECKPOINT_DISABLE"] = "1"  # no version check over the network
    # Loading the AWS provider's schema is mostly Go's garbage collection: GOGC=400 spends ~30% less CPU per
    # command for ~130 MB more memory (mk/terraform.mk sets the same for `make`).
    env.setdefault("GOGC", "400")
    if cli_config is not None:
        if not cli_config.exists():
            raise TerraformError(f"Terraform CLI configuration {cli_config} does not exist; `make tf-config` "
                                 "(mk/terraform.mk) writes it")
        env["TF_CLI_CONFIG_FILE"] = str(cli_config)
    state_path.parent.mkdir(parents=True, exist_ok=True)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    # Each run initializes into a data directory of its own, beside its state, so stacks started at
    # the same time (parallel test workers, `make up` beside the tests) never share one.
    env["TF_DATA_DIR"] = str(state_path.parent / ".terraform")
    with open(log_path, "a", encoding="utf-8") as log:
        # Every time (a couple of seconds): a cached .terraform may point into a plugin cache that
        # `make clean` removed since.
        if progress:
            progress("terraform init (providers from the local mirror)")
        with _init_lock(env_dir):  # init writes env_dir/.terraform.lock.hcl: one writer at a time
            _run([terraform, f"-chdir={env_dir}", "init", "-input=false", "-no-color"], env, log, progress, timeout_s)
        args = [terraform, f"-chdir={env_dir}", "apply", "-auto-approve", "-input=false", "-no-color",
                f"-state={state_path}", "-lock=false"] + ([] if refresh else ["-refresh=false"])
        for name, value in variables.items():
            args.append(f"-var={name}={value}")
        _run(args, env, log, progress, timeout_s)

