"""The "runtime-provided" libraries: what the Lambda Python runtime puts on ``sys.path`` besides the zip.

The zips leave boto3 out because Lambda provides it. Locally, the same pinned versions the dev
environment installed (requirements-dev.txt) are copied file by file, from each distribution's own
record, into one directory. No network, no pip: the copy is exact and repeatable. Like Lambda's runtime,
which ships its boto3 compiled, the copy is then compiled for this interpreter: the functions run with
``-B`` (nothing written at run time), so without bytecode every cold start would compile botocore again.
"""

from __future__ import annotations

import compileall
import json
import os
import shutil
import sys
from importlib import metadata
from pathlib import Path

PROVIDED = ("boto3", "botocore", "s3transfer", "jmespath", "python-dateutil", "six", "urllib3")
"""boto3 and its dependency closure, as the python3.11+ Lambda runtimes ship them."""


class RuntimeLibsError(Exception):
    pass


def _versions() -> dict[str, str]:
    versions = {"(bytecode)": sys.implementation.cache_tag}  # a copy without this Python's bytecode is redone
    for name in PROVIDED:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            raise RuntimeLibsError(
                f"{name} is not installed in this Python ({name} is part of what Lambda provides); "
                "run `make venv` to create the dev environment from requirements-dev.txt") from None
    return versions


def ensure(target: str | Path) -> Path:
    """Fill ``target`` with the provided libraries unless it already holds these exact versions."""
    target = Path(target)
    stamp = target / ".loom-runtime-libs.json"
    versions = _versions()
    if stamp.exists():
        try:
            if json.loads(stamp.read_text()) == versions:
                return target
        except ValueError:
            pass
    staging = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    for name in PROVIDED:
        dist = metadata.distribution(name)
        for file in dist.files or []:
            src = Path(dist.locate_file(file)).resolve()
            parts = Path(file).parts
            if ".." in parts or "__pycache__" in parts or parts[0].endswith(".data") or not src.is_file():
                continue  # scripts and caches are not importable code
            dst = staging / file
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst)
    compileall.compile_dir(staging, quiet=1, workers=0)
    (staging / stamp.name).write_text(json.dumps(versions, sort_keys=True))
    shutil.rmtree(target, ignore_errors=True)
    try:
        staging.rename(target)
    except OSError:  # another process finished the same copy first
        shutil.rmtree(staging, ignore_errors=True)
    return target
