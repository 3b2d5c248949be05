"""Apply ``terraform/envs/local`` to the emulator, with a state file of the run's own.

Each run starts a fresh emulator, so each run applies into a fresh state file (``-state``), never the
working directory's: the interactive stack, the demo and the test session cannot trip over each other.
Provider plugins come from the local mirror through the CLI configuration that ``mk/terraform.mk``
generates (``TF_CLI_CONFIG_FILE``); nothing is downloaded.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TextIO

Progress = Callable[[str], None]
_INTERESTING = re.compile(r"(Creating\.\.\.|Creation complete|Still creating|Apply complete|Error|error|Warning:)")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


class TerraformError(Exception):
    pass


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
            if progress is not None and _INTERESTING.search(clean):
                progress(clean.strip())
            if time.monotonic() > deadline:
                proc.kill()
                raise TerraformError(f"`{' '.join(args[:3])}` did not finish within {timeout_s:g} s; see {log.name}")
        code = proc.wait()
    except BaseException:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        raise
    log.flush()
    if code != 0:
        detail = "\n".join(t for t in tail if t.strip())
        raise TerraformError(f"`{' '.join(args[:3])} ...` failed (exit {code}); full output in {log.name}. "
                             f"Last lines:\n{detail}")


def apply(env_dir: Path, state_path: Path, variables: Mapping[str, str], log_path: Path,
          cli_config: Path | None = None, progress: Progress | None = None, timeout_s: float = 600.0,
          terraform: str = "terraform") -> None:
    """``terraform init`` (if needed) then ``apply`` of ``env_dir`` into ``state_path``."""
    if not (env_dir / "main.tf").exists() and not list(env_dir.glob("*.tf")):
        raise TerraformError(f"{env_dir} has no Terraform configuration; the local environment lives in "
                             "terraform/envs/local")
    env = {k: v for k, v in os.environ.items() if not k.startswith("TF_VAR_")}
    env.setdefault("TF_IN_AUTOMATION", "1")
    env["CHECKPOINT_DISABLE"] = "1"  # no version check over the network
    if cli_config is not None:
        if not cli_config.exists():
            raise TerraformError(f"Terraform CLI configuration {cli_config} does not exist; `make tf-init-local` "
                                 "(mk/terraform.mk) writes it")
        env["TF_CLI_CONFIG_FILE"] = str(cli_config)
    state_path.parent.mkdir(parents=True, exist_ok=True)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "a", encoding="utf-8") as log:
        if not (env_dir / ".terraform").is_dir():
            if progress:
                progress("terraform init (providers from the local mirror)")
            _run([terraform, f"-chdir={env_dir}", "init", "-input=false", "-no-color"], env, log, progress, timeout_s)
        args = [terraform, f"-chdir={env_dir}", "apply", "-auto-approve", "-input=false", "-no-color",
                f"-state={state_path}", "-lock=false"]
        for name, value in variables.items():
            args.append(f"-var={name}={value}")
        _run(args, env, log, progress, timeout_s)


def echo_progress(stream: TextIO = sys.stderr) -> Progress:
    started = time.monotonic()

    def progress(line: str) -> None:
        stream.write(f"  [{time.monotonic() - started:5.1f}s] {line}\n")
        stream.flush()

    return progress
