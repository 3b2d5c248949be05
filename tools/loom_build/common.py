"""What every build step shares: the repository's layout, the error type, hashing and lock reading."""

from __future__ import annotations

import hashlib
import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
WHEEL_PACKAGES = ("engine-core", "workflows-examples")
EXAMPLES_PACKAGE = "workflows-examples"
FUNCTIONS = {"worker": "loom_worker", "sweeper": "loom_sweeper", "control-plane": "loom_control_plane"}
_PIN = re.compile(r"^(?P<name>[A-Za-z0-9_.-]+)==(?P<version>[^\s;\\]+)")
_HASH = re.compile(r"--hash=sha256:(?P<digest>[0-9a-f]{64})")


class BuildError(Exception):
    """A build input is missing or inconsistent; the message says how to fix it."""


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pin_match(line: str) -> re.Match[str] | None:
    """``name==version`` at the start of a requirements line."""
    return _PIN.match(line)


def hashes_in(line: str) -> list[str]:
    return [h.group("digest") for h in _HASH.finditer(line)]


def locked_pins(requirements: Path) -> dict[str, tuple[str, set[str]]]:
    """``{name: (version, {sha256, ...})}`` from a pip-compile'd requirements file."""
    pins: dict[str, tuple[str, set[str]]] = {}
    current = None
    for line in requirements.read_text().splitlines():
        match = _PIN.match(line)
        if match:
            current = normalize(match.group("name"))
            pins[current] = (match.group("version"), set())
        for digest in hashes_in(line):
            if current is not None:
                pins[current][1].add(digest)
    return pins


def dist_name(package: str, root: Path = ROOT) -> str:
    """The distribution name in ``packages/<package>/pyproject.toml`` (``loom-engine-core``)."""
    text = (root / "packages" / package / "pyproject.toml").read_text()
    match = re.search(r'^name\s*=\s*"([^"]+)"', text, re.MULTILINE)
    if not match:
        raise BuildError(f"packages/{package}/pyproject.toml has no project name")
    return match.group(1)


def wheel_file(package: str, version: str, root: Path = ROOT) -> str:
    """The file name of a local package's pure-Python wheel at ``version``."""
    return f"{dist_name(package, root).replace('-', '_')}-{version}-py3-none-any.whl"


def source_version(package: str, root: Path = ROOT, text: str | None = None) -> str:
    """The version in ``packages/<package>/pyproject.toml`` (or in ``text``, another commit's copy of it)."""
    text = text if text is not None else (root / "packages" / package / "pyproject.toml").read_text()
    match = re.search(r'^version\s*=\s*"([^"]+)"', text, re.MULTILINE)
    if not match:
        raise BuildError(f"packages/{package}/pyproject.toml has no version")
    return match.group(1)


def git(root: Path, *args: str, text: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=text)
