"""A platform team's own workflow packages, from outside this repository, built into every zip: wheels
(their sha256 recorded in a lock file on first use and checked on every later build) and/or a
hash-locked requirements file of theirs.

The lock (``EXTRA_LOCK``) is a record of every wheel version ever built, not only the last: going
back to an earlier version with other bytes under the same name and version is refused as well.
pip never reads it; each build installs a requirements file of the wheels passed this time.
"""

from __future__ import annotations

import re
from pathlib import Path

from .common import ROOT, BuildError, hashes_in, locked_pins, normalize, pin_match, sha256_file

_WHEEL_FILE = re.compile(r"^(?P<name>[A-Za-z0-9_.]+)-(?P<version>[A-Za-z0-9_.!+]+)(-[0-9][^-]*)?-[^-]+-[^-]+-[^-]+\.whl$")
DEFAULT_LOCK = ROOT / "dist" / "extra-workflows.lock"
LOCK_HEADER = """\
# Extra workflow packages built into the Loom Lambda zips, locked by sha256 (tools/build_lambda.py).
# Every version ever built is kept: a wheel with a name and version listed here but other bytes is
# refused. Written by `make build EXTRA_WHEELS=...`; `make lock-extras EXTRA_WHEELS=...` re-records
# the given wheels on purpose. Not a requirements file: each build installs only the wheels passed.
"""


def collect_extra_wheels(paths: list[Path]) -> list[Path]:
    """Wheel files from ``paths``: each a ``.whl`` file or a directory of them."""
    wheels: list[Path] = []
    for path in paths:
        if path.is_dir():
            found = sorted(path.glob("*.whl"))
            if not found:
                raise BuildError(f"EXTRA_WHEELS: {path} is a directory with no .whl files in it")
            wheels += found
        elif path.is_file() and path.suffix == ".whl":
            wheels.append(path)
        else:
            raise BuildError(f"EXTRA_WHEELS: {path} is neither a .whl file nor a directory of wheels "
                             "(build your workflow package with `python -m build --wheel`)")
    seen: dict[str, Path] = {}
    for wheel in wheels:
        match = _WHEEL_FILE.match(wheel.name)
        if not match:
            raise BuildError(f"EXTRA_WHEELS: {wheel} is not named like a wheel (name-version-py-abi-platform.whl)")
        name = normalize(match.group("name"))
        if name in seen and seen[name].resolve() != wheel.resolve():
            raise BuildError(f"EXTRA_WHEELS holds two wheels of {name}: {seen[name]} and {wheel}; pass one")
        seen[name] = wheel
    return sorted(seen.values(), key=lambda w: normalize(w.name))


def _wheel_pin(wheel: Path) -> tuple[str, str]:
    match = _WHEEL_FILE.match(wheel.name)
    return normalize(match.group("name")), match.group("version")


def read_extra_lock(lock: Path) -> dict[tuple[str, str], set[str]]:
    """``{(name, version): {sha256, ...}}``: every version the lock has recorded."""
    recorded: dict[tuple[str, str], set[str]] = {}
    if not lock.exists():
        return recorded
    current = None
    for line in lock.read_text().splitlines():
        match = pin_match(line)
        if match:
            current = (normalize(match.group("name")), match.group("version"))
            recorded.setdefault(current, set())
        for digest in hashes_in(line):
            if current is not None:
                recorded[current].add(digest)
    return recorded


def _write_lock(lock: Path, recorded: dict[tuple[str, str], set[str]]) -> None:
    text = LOCK_HEADER + "".join(
        f"{name}=={version}" + "".join(f" \\\n    --hash=sha256:{d}" for d in sorted(digests)) + "\n"
        for (name, version), digests in sorted(recorded.items()))
    if not lock.exists() or lock.read_text() != text:
        lock.parent.mkdir(parents=True, exist_ok=True)
        lock.write_text(text)


def lock_extra_wheels(paths: list[Path], lock: Path, relock: bool = False) -> dict[str, tuple[str, str]]:
    """Record each extra wheel's sha256 in ``lock`` and return ``{name: (version, sha256)}`` of the wheels
    passed. Refuse a wheel whose name and version the lock already holds with other bytes, unless
    ``relock`` (which replaces the hash of those versions only; every other recorded version stays)."""
    recorded = read_extra_lock(lock)
    entries: dict[str, tuple[str, str]] = {}
    for wheel in collect_extra_wheels(paths):
        name, version = _wheel_pin(wheel)
        digest = sha256_file(wheel)
        known = recorded.get((name, version))
        if known and digest not in known and not relock:
            raise BuildError(
                f"{wheel} has sha256 {digest}, but {lock} locks {name}=={version} to "
                f"{', '.join(sorted(known))}: the wheel changed without a version bump, or was tampered "
                f"with. Bump your package's version and rebuild its wheel; if you replaced it on purpose, run "
                f"`make lock-extras EXTRA_WHEELS=...` (re-records {name}=={version} in {lock})")
        entries[name] = (version, digest)
    for name, (version, digest) in entries.items():
        recorded[(name, version)] = {digest}
    _write_lock(lock, recorded)
    return entries


def check_extra_requirements(path: Path) -> dict[str, tuple[str, set[str]]]:
    """A team's requirements file must pin every requirement exactly, with hashes (pip-compile
    --generate-hashes). Returns its pins."""
    if not path.is_file():
        raise BuildError(f"EXTRA_REQUIREMENTS: {path} does not exist")
    logical, buf = [], ""
    for line in path.read_text().splitlines():
        line = line.split(" #", 1)[0].rstrip() if not line.lstrip().startswith("#") else ""
        if line.endswith("\\"):
            buf += line[:-1] + " "
            continue
        logical.append((buf + line).strip())
        buf = ""
    for entry in filter(None, logical + [buf.strip()]):
        if entry.startswith("-"):
            continue  # options (--find-links, --index-url, -r): pip checks them
        if not pin_match(entry) or not hashes_in(entry):
            raise BuildError(
                f"EXTRA_REQUIREMENTS: {path} has `{entry.split(' --hash')[0]}`, which is not pinned with a hash. The "
                "zips are hash-locked: generate the file with `pip-compile --generate-hashes` (pip-tools), or "
                "pass the wheels themselves as EXTRA_WHEELS")
    return locked_pins(path)


class Extras:
    """What `--extra-wheels/--extra-requirements` add to every zip."""

    def __init__(self, wheels: list[Path] | None = None, requirements: Path | None = None,
                 lock: Path | None = None, relock: bool = False) -> None:
        self.find_links: list[Path] = []
        self.requirement_files: list[Path] = []
        self.wheel_pins: dict[str, tuple[str, str]] = {}
        """``{name: (version, sha256)}`` of the wheels passed this time (what pip installs of them)."""
        self.names: dict[str, str] = {}
        if wheels:
            self.wheel_pins = lock_extra_wheels(wheels, lock or DEFAULT_LOCK, relock)
            self.names = {name: version for name, (version, _) in self.wheel_pins.items()}
            self.find_links = sorted({w.resolve().parent for w in collect_extra_wheels(wheels)})
        if requirements:
            for name, (version, _) in check_extra_requirements(requirements).items():
                self.names.setdefault(name, version)
            self.requirement_files.append(requirements)

    def __bool__(self) -> bool:
        return bool(self.wheel_pins or self.requirement_files)

    def wheel_requirements(self) -> str:
        """A requirements file for pip: the wheels passed this time, each pinned to its sha256."""
        return "".join(f"{name}=={version} --hash=sha256:{digest}\n"
                       for name, (version, digest) in sorted(self.wheel_pins.items()))

    def describe(self) -> str:
        return ", ".join(f"{n}=={v}" for n, v in sorted(self.names.items())) or "none"
