"""A Lambda's lock (``packages/<fn>/requirements.txt``, pip-compile'd with hashes) against the built
wheels, and the same lock without the example workflows (``make build EXAMPLES=0``).

Leaving the examples out needs no second lock: the zip installs the function's one lock minus the
``loom-workflows-examples`` entry and whatever only it brought in (pip-compile's ``# via`` notes say
so). Every remaining line keeps its pin and hashes, so the zip stays hash-locked and reproducible.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from .common import (
    EXAMPLES_PACKAGE,
    ROOT,
    WHEEL_PACKAGES,
    BuildError,
    dist_name,
    locked_pins,
    normalize,
    pin_match,
    sha256_file,
    wheel_file,
)

_VIA_ONE = re.compile(r"^\s*#\s+via\s+(?P<parent>\S.*)$")
_VIA_MANY = re.compile(r"^\s*#\s+via\s*$")
_VIA_ITEM = re.compile(r"^\s*#\s{2,}(?P<parent>\S.*)$")


def check_lock(function: str, wheels: Path, root: Path = ROOT, examples: bool = True) -> None:
    """Fail unless every local wheel the function's lock pins is present with the locked hash.

    ``examples=False`` (a build without the example workflows) does not need the examples' wheel."""
    requirements = root / "packages" / function / "requirements.txt"
    pins = locked_pins(requirements)
    rel = requirements.relative_to(root)
    for package in WHEEL_PACKAGES:
        if package == EXAMPLES_PACKAGE and not examples:
            continue
        name = dist_name(package, root)
        if name not in pins:
            raise BuildError(f"{rel} does not pin {name}; add it to requirements.in and run "
                             f"`make lock-lambdas LAMBDAS={function}`")
        version, hashes = pins[name]
        wheel = wheels / wheel_file(package, version, root)
        if not wheel.exists():
            present = ", ".join(p.name for p in sorted(wheels.glob(f"{name.replace('-', '_')}-*.whl"))) or "none"
            raise BuildError(
                f"{rel} pins {name}=={version} but {wheels} holds {present}. Run `make build-wheels`: it builds "
                f"packages/{package} and rebuilds the versions the Lambdas still pin from git history. To move "
                f"{function} to packages/{package}'s current version instead, run `make lock-lambdas LAMBDAS={function}`")
        actual = sha256_file(wheel)
        if actual not in hashes:
            raise BuildError(
                f"{wheel.name} was rebuilt from packages/{package} and its sha256 is {actual}, but {rel} "
                f"locks {name}=={version} to {', '.join(sorted(hashes))}: packages/{package} changed without "
                f"a version bump. To release it, bump `version` in packages/{package}/pyproject.toml with "
                f"`make bump-engine-core VERSION=<next>` (moves every pin and re-locks; add LAMBDAS=<fn> to move "
                f"only some Lambdas). While developing an unreleased version, re-lock instead: `make lock-lambdas`. "
                "Commit the updated requirements.txt files")


@dataclass
class _Entry:
    name: str
    lines: list[str] = field(default_factory=list)
    parents: set[str] = field(default_factory=set)

    @property
    def direct(self) -> bool:
        return any(p.startswith("-r ") or p.startswith("-c ") for p in self.parents)


def _entries(text: str) -> tuple[list[str], list[_Entry]]:
    """The lock's header lines and one entry per pinned package, with the packages pip-compile says
    required it (``# via``)."""
    header: list[str] = []
    entries: list[_Entry] = []
    listing = False
    for line in text.splitlines():
        match = pin_match(line)
        if match:
            entries.append(_Entry(normalize(match.group("name")), [line]))
            listing = False
            continue
        if not entries:
            header.append(line)
            continue
        entry = entries[-1]
        entry.lines.append(line)
        if (one := _VIA_ONE.match(line)) is not None:
            entry.parents.add(one.group("parent").strip())
            listing = False
        elif _VIA_MANY.match(line):
            listing = True
        elif listing and (item := _VIA_ITEM.match(line)) is not None:
            entry.parents.add(item.group("parent").strip())
        else:
            listing = False
    return header, entries


def requirements_without(text: str, names: set[str]) -> tuple[str, list[str]]:
    """A pip-compile'd lock without the packages ``names`` and those only they required. Returns the
    new text and the names left out, in lock order."""
    header, entries = _entries(text)
    dropped = {normalize(n) for n in names}
    missing = dropped - {e.name for e in entries}
    if missing:
        raise BuildError(f"the lock pins no {', '.join(sorted(missing))} to leave out")
    changed = True
    while changed:
        changed = False
        for entry in entries:
            if entry.name in dropped or entry.direct or not entry.parents:
                continue
            if {normalize(p) for p in entry.parents} <= dropped:
                dropped.add(entry.name)
                changed = True
    kept = [line for e in entries if e.name not in dropped for line in e.lines]
    note = [f"# Built without: {', '.join(e.name for e in entries if e.name in dropped)} (tools/build_lambda.py)."]
    return "\n".join(header + note + kept) + "\n", [e.name for e in entries if e.name in dropped]


def examples_name(root: Path = ROOT) -> str:
    return dist_name(EXAMPLES_PACKAGE, root)
