"""A local wheelhouse of the third-party wheels the Lambda locks pin, per target interpreter and platform.

Every zip build installs its lock with pip. Fetched from the package index each time, that is most of a
zip's build time (the index's answers are not cached here); fetched once into
``build/wheelhouse/<target>/`` and installed from there with ``--no-index``, a zip builds in seconds.
Nothing changes in what goes into a zip: pip still installs with ``--require-hashes`` against the
same lock, and a wheel is only ever taken from the wheelhouse when its sha256 is one the lock names.

The wheelhouse is filled (``pip download``, hash-checked) whenever a lock pins a wheel it lacks, so a
re-lock or a new platform fetches only what is new. ``LOOM_WHEELHOUSE`` moves it (a clone of this
repository used by the tests shares the working tree's).
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from .common import ROOT, WHEEL_PACKAGES, BuildError, dist_name, locked_pins, normalize, sha256_file


def root() -> Path:
    return Path(os.environ.get("LOOM_WHEELHOUSE") or ROOT / "build" / "wheelhouse")


def target_name(runtime: str, arch: str, python_version: str) -> str:
    """``lambda-cp312-x86_64`` or ``local-cp311``: one directory per interpreter and platform."""
    tag = "cp" + python_version.replace(".", "")
    return f"lambda-{tag}-{arch}" if runtime == "lambda" else f"local-{tag}-{sys.platform}"


def _local_names(root_dir: Path = ROOT) -> set[str]:
    """The repository's own packages: they come from the wheel directory, never from the wheelhouse."""
    return {normalize(dist_name(p, root_dir)) for p in WHEEL_PACKAGES}


def missing(requirements: Path, house: Path) -> list[str]:
    """``name==version`` of every third-party pin of ``requirements`` with no wheel of a locked hash in ``house``."""
    have = {sha256_file(w) for w in house.glob("*.whl")} if house.is_dir() else set()
    local = _local_names()
    return [f"{name}=={version}" for name, (version, hashes) in sorted(locked_pins(requirements).items())
            if name not in local and not (hashes & have)]


@contextmanager
def _locked(house: Path) -> Iterator[None]:
    """One filler at a time per wheelhouse (parallel builds and test workers share it)."""
    house.mkdir(parents=True, exist_ok=True)
    with open(house / ".lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def ensure(requirements: Path, house: Path, wheels: Path, platform_args: list[str]) -> Path:
    """Fill ``house`` with every wheel ``requirements`` pins that it lacks (from the package index, hash-checked)."""
    if not missing(requirements, house):
        return house
    with _locked(house):
        wanted = missing(requirements, house)
        if not wanted:
            return house
        local = _local_names()
        # pip download --require-hashes wants every pin of the file; the local packages come from ``wheels``.
        command = [sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check", "--no-deps",
                   "--require-hashes", "--only-binary=:all:", "--find-links", str(wheels), "--dest", str(house),
                   "-r", str(requirements), *platform_args]
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            raise BuildError(f"pip could not fetch the wheels {requirements} pins ({', '.join(wanted)}) into the "
                             f"wheelhouse {house}:\n{(done.stdout + done.stderr).strip()[-4000:]}")
        for wheel in house.glob("*.whl"):  # the local packages' wheels live in the wheel directory only
            if normalize(wheel.name.split("-", 1)[0]) in local:
                wheel.unlink()
        still = missing(requirements, house)
        if still:
            raise BuildError(f"the wheelhouse {house} still lacks {', '.join(still)} after pip download: the index "
                             f"holds no wheel with the hash {requirements} pins for this platform")
    return house
