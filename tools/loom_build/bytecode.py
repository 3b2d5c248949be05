"""Bytecode compiled ahead into a zip, for the interpreter that will run it.

Lambda's code directory is read-only, so a zip without ``__pycache__`` compiles every module it imports
on every cold start (a few hundred milliseconds here). A zip carries bytecode for one interpreter only:
a ``.cpython-312.pyc`` is ignored by 3.11 and the reverse, so the Lambda zips are compiled by a
CPython 3.12 (Lambda's python3.12) and the local zips by the Python running the build.

The files are PEP 552 *unchecked-hash* pycs: they hold no source timestamp (the zip's entries are all
dated 1980, and Lambda's unpacking may not keep them), Python loads them without reading the source
back, and the same source compiled by the same interpreter gives the same bytes, so the zips stay
byte-reproducible. Tracebacks name ``/var/task/<module path>``, where Lambda unpacks the zip (Python
rewrites that to the real path wherever the zip is unpacked).

Finding a 3.12: ``LAMBDA_PYTHON`` (``make build LAMBDA_PYTHON=/path/to/python3.12``), else
``python3.12`` on ``PATH``, else the newest 3.12 that pyenv manages. With none, the Lambda zips are
built without bytecode and the build says so (they work; each cold start then compiles).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from .common import BuildError

LAMBDA_TASK_ROOT = "/var/task"
"""Where Lambda unpacks a function's zip: the directory recorded in the bytecode's file names."""
_PROBE = "import sys, platform; print(platform.python_implementation(), '%d.%d' % sys.version_info[:2], sys.executable)"


def describe(python: str | Path) -> tuple[str, str, str] | None:
    """``(implementation, "X.Y", executable)`` of an interpreter, or None if it does not run."""
    try:
        done = subprocess.run([str(python), "-I", "-c", _PROBE], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    parts = done.stdout.split(maxsplit=2)
    if done.returncode != 0 or len(parts) != 3:
        return None
    return parts[0], parts[1], parts[2].strip()


def _pyenv_candidates(version: str) -> list[Path]:
    pyenv = shutil.which("pyenv")
    if pyenv is None:
        return []
    done = subprocess.run([pyenv, "root"], capture_output=True, text=True)
    if done.returncode != 0:
        return []
    found = []
    for path in Path(done.stdout.strip(), "versions").glob(f"{version}.*/bin/python{version}"):
        match = re.search(rf"/{re.escape(version)}\.(\d+)/bin/", path.as_posix())
        if match:
            found.append((int(match.group(1)), path))
    return [p for _, p in sorted(found, reverse=True)]


def find_python(version: str, explicit: str | None = None, path: str | None = None) -> Path | None:
    """A CPython ``version`` ("3.12") interpreter: ``explicit`` if given (refused if it is not one), else
    ``python<version>`` on ``path`` (default ``PATH``), else pyenv's newest; None when there is none."""
    if explicit:
        found = describe(explicit)
        if found is None or found[:2] != ("CPython", version):
            what = "does not run" if found is None else f"is {found[0]} {found[1]}"
            raise BuildError(f"LAMBDA_PYTHON={explicit} {what}: the Lambda zips' bytecode must come from CPython "
                             f"{version} (Lambda's python{version}). Point LAMBDA_PYTHON at a python{version}, or "
                             "leave it empty to let the build look for one")
        return Path(found[2])
    candidates: list[Path] = []
    on_path = shutil.which(f"python{version}", path=path)
    if on_path:
        candidates.append(Path(on_path))
    candidates += _pyenv_candidates(version)
    for candidate in candidates:
        found = describe(candidate)
        if found is not None and found[:2] == ("CPython", version):
            return Path(found[2])
    return None


def missing_note(version: str) -> str:
    return (f"note: no CPython {version} found (LAMBDA_PYTHON, python{version} on PATH, pyenv): the Lambda zips are "
            f"built without bytecode, so each cold start compiles the modules it imports. Install python{version} "
            f"or pass LAMBDA_PYTHON=/path/to/python{version} to ship them compiled")


def compile_tree(tree: Path, python: str | Path) -> int:
    """Compile every ``.py`` under ``tree`` with ``python`` (unchecked-hash pycs, file names under
    /var/task); return how many pycs were written. A module that does not compile fails the build."""
    tree = tree.resolve()
    command = [str(python), "-I", "-m", "compileall", "-q", "-j", "0", "--invalidation-mode", "unchecked-hash",
               "-s", str(tree), "-p", LAMBDA_TASK_ROOT, str(tree)]
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    done = subprocess.run(command, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        raise BuildError(f"compiling the zip's modules with {python} failed (exit {done.returncode}):\n"
                         f"{(done.stdout + done.stderr).strip()[-4000:]}")
    return sum(1 for _ in tree.rglob("*.pyc"))


def interpreter_for(runtime: str, lambda_python: Path | None) -> Path | None:
    """Which interpreter compiles a zip of ``runtime``: this one for local zips, ``lambda_python`` for Lambda."""
    return Path(sys.executable) if runtime == "local" else lambda_python
