"""The local packages' wheels: built reproducibly from the working tree, and the earlier versions a
Lambda's lock still pins rebuilt from git history (the procedure that lets Lambdas pin different
engine-core versions)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from .common import (
    FUNCTIONS,
    ROOT,
    WHEEL_PACKAGES,
    BuildError,
    dist_name,
    git,
    locked_pins,
    sha256_file,
    source_version,
    wheel_file,
)

# Hatchling writes reproducible wheels; pin the timestamp it uses so an exported SOURCE_DATE_EPOCH
# in someone's shell cannot change the wheel's hash (and break the lock) behind their back.
WHEEL_SOURCE_DATE_EPOCH = "1580601600"
# How far back `git log` looks for the commits of an earlier version, and how many of them it builds.
HISTORY_DEPTH = 200
MAX_HISTORY_BUILDS = 25


def build_wheels(out: Path, packages: tuple[str, ...] = WHEEL_PACKAGES, root: Path = ROOT) -> list[Path]:
    """Build each of ``root/packages/<package>``'s wheels into ``out``.

    Wheels of other versions already in ``out`` are kept: a Lambda still locked on an earlier
    engine-core builds from that version's wheel (see :func:`provide_locked_wheels`).
    """
    out.mkdir(parents=True, exist_ok=True)
    return [build_wheel(root / "packages" / package, out, f"packages/{package}") for package in packages]


def build_wheel(source: Path, out: Path, label: str) -> Path:
    env = {**os.environ, "SOURCE_DATE_EPOCH": WHEEL_SOURCE_DATE_EPOCH}
    with tempfile.TemporaryDirectory(prefix="loom-wheel-") as tmp:
        done = subprocess.run([sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", tmp,
                               str(source)], env=env, capture_output=True, text=True)
        if done.returncode != 0:
            raise BuildError(f"building the {label} wheel failed:\n{done.stdout}{done.stderr}")
        (wheel,) = Path(tmp).glob("*.whl")
        out.mkdir(parents=True, exist_ok=True)
        target = out / wheel.name
        shutil.move(wheel, target)  # replaces only this version's wheel
    return target


def _candidate_commits(package: str, version: str, root: Path) -> list[str]:
    name = dist_name(package, root)
    rel = f"packages/{package}"
    tag = f"{package}-v{version}"
    candidates: list[str] = []
    if git(root, "rev-parse", "-q", "--verify", f"refs/tags/{tag}^{{commit}}").returncode == 0:
        candidates.append(tag)
    log = git(root, "log", "--format=%H", "-n", str(HISTORY_DEPTH), "--", rel)
    if log.returncode != 0 and not candidates:
        raise BuildError(
            f"a Lambda lock pins {name}=={version}, but there is no such wheel and {root} is not a git checkout to "
            f"rebuild it from. Run `make build-wheels` in a git clone, or copy {wheel_file(package, version, root)} "
            "into the wheel directory")
    return candidates + log.stdout.split()


def wheel_from_history(package: str, version: str, hashes: set[str], out: Path, root: Path = ROOT,
                       max_builds: int = MAX_HISTORY_BUILDS) -> Path:
    """Rebuild ``package``'s wheel at ``version`` from git: the tag ``<package>-v<version>`` if there is
    one, else the newest commits whose ``packages/<package>/pyproject.toml`` says ``version``. Returns
    the first wheel whose sha256 is one of ``hashes`` (the locks'); the build is byte-reproducible, so
    the same source gives the locked bytes."""
    name, rel, tag = dist_name(package, root), f"packages/{package}", f"{package}-v{version}"
    tried = 0
    found_version = False
    for commit in _candidate_commits(package, version, root):
        shown = git(root, "show", f"{commit}:{rel}/pyproject.toml")
        if shown.returncode != 0 or source_version(package, root, shown.stdout) != version:
            continue
        found_version = True
        if tried >= max_builds:
            break
        tried += 1
        with tempfile.TemporaryDirectory(prefix=f"loom-{package}-{version}-") as tmp:
            archive = git(root, "archive", "--format=tar", commit, rel, text=False)
            if archive.returncode != 0:
                continue
            subprocess.run(["tar", "-x", "-C", tmp], input=archive.stdout, check=True)
            wheel = build_wheel(Path(tmp) / rel, Path(tmp), f"{rel} at {commit[:12]}")
            if sha256_file(wheel) in hashes:
                target = out / wheel.name
                out.mkdir(parents=True, exist_ok=True)
                shutil.move(wheel, target)
                return target
    shallow = git(root, "rev-parse", "--is-shallow-repository").stdout.strip() == "true"
    if not found_version:
        raise BuildError(
            f"a Lambda lock pins {name}=={version}, but no commit in this checkout's history (and no tag {tag}) "
            f"has {rel} at version {version}"
            + (" (this is a shallow clone: earlier versions are rebuilt from history, so check out with full "
               "depth, e.g. actions/checkout's fetch-depth: 0)" if shallow else "")
            + ". Fetch the history (`git fetch --unshallow --tags`), or re-lock that Lambda on the current version: "
            "`make lock-lambdas LAMBDAS=<fn>`")
    raise BuildError(
        f"a Lambda lock pins {name}=={version} with sha256 {', '.join(sorted(hashes))}, but no commit with {rel} "
        f"at version {version} builds those bytes (tried {tried}): the lock was made from uncommitted or "
        f"since-changed code. Re-lock that Lambda (`make lock-lambdas LAMBDAS=<fn>`), or tag the released "
        f"commit as {tag}")


def pinned_versions(root: Path = ROOT, functions: tuple[str, ...] | None = None) -> dict[tuple[str, str], set[str]]:
    """``{(package, version): {sha256, ...}}`` of every local wheel the Lambdas' locks pin."""
    wanted: dict[tuple[str, str], set[str]] = {}
    for function in functions or tuple(FUNCTIONS):
        requirements = root / "packages" / function / "requirements.txt"
        if not requirements.exists():
            continue
        pins = locked_pins(requirements)
        for package in WHEEL_PACKAGES:
            name = dist_name(package, root)
            if name in pins:
                version, hashes = pins[name]
                wanted.setdefault((package, version), set()).update(hashes)
    return wanted


def provide_locked_wheels(out: Path, root: Path = ROOT, functions: tuple[str, ...] | None = None) -> list[Path]:
    """Make sure ``out`` holds every local wheel version a Lambda lock pins, with a locked hash.

    The current source version is built by :func:`build_wheels`; an earlier version is kept if its
    wheel is already in ``out`` with a locked hash, and otherwise rebuilt from git history."""
    provided = []
    for (package, version), hashes in sorted(pinned_versions(root, functions).items()):
        if version == source_version(package, root):
            continue  # built from the working tree; check_lock reports a mismatch with its fix
        wheel = out / wheel_file(package, version, root)
        if wheel.exists() and sha256_file(wheel) in hashes:
            continue
        provided.append(wheel_from_history(package, version, hashes, out, root))
    return provided
