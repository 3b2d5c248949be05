"""A release: the tag checked against the version it names, then the wheels and the three Lambda zips
built twice from scratch, compared byte for byte, and written with their SHA256SUMS.

Tags: ``loom-vX.Y.Z`` releases the modules and the Lambdas (the version in ``terraform/modules/VERSION``);
``engine-core-vX.Y.Z`` releases the library (``packages/engine-core``), whose wheel also goes to
``<out>/engine-core/`` for a package index. Both attach the same artifacts.
"""

from __future__ import annotations

import re
import shutil
import tempfile
from pathlib import Path

from .common import FUNCTIONS, ROOT, BuildError, sha256_file, source_version, wheel_file
from .wheels import build_wheels, provide_locked_wheels
from .zips import build_zip

TAG = re.compile(r"^(?P<what>loom|engine-core)-v(?P<version>\d+\.\d+\.\d+(?:(?:a|b|rc|\.post|\.dev)\d+)?)$")
VERSION_FILE = Path("terraform/modules/VERSION")


def loom_version(root: Path = ROOT) -> str:
    return (root / VERSION_FILE).read_text().strip()


def check_tag(tag: str, root: Path = ROOT) -> tuple[str, str]:
    """``(what, version)`` of a release tag whose version is the one the checkout holds; else why not."""
    if not tag:
        raise BuildError("RELEASE_TAG is empty: name the tag to release, e.g. "
                         f"`make release RELEASE_TAG=loom-v{loom_version(root)}` (CI passes the pushed tag)")
    match = TAG.match(tag)
    if not match:
        raise BuildError(f"{tag!r} is not a release tag: loom-vX.Y.Z releases the modules and the Lambdas "
                         f"({VERSION_FILE}), engine-core-vX.Y.Z the library (packages/engine-core)")
    what, version = match.group("what"), match.group("version")
    if what == "loom":
        current, where, fix = loom_version(root), str(VERSION_FILE), f"edit {VERSION_FILE} and commit"
    else:
        current, where = source_version("engine-core", root), "packages/engine-core/pyproject.toml"
        fix = f"`make bump-engine-core VERSION={version}` and commit"
    if version != current:
        raise BuildError(f"tag {tag} names {what} {version}, but this commit's {where} says {current}: tag the "
                         f"commit that holds {version}, or release {version} first ({fix})")
    return what, version


def _build(out: Path, root: Path) -> dict[str, Path]:
    """One build from scratch into ``out``: {artifact name: path}."""
    wheels = out / "wheels"
    built = {w.name: w for w in build_wheels(wheels, root=root)}
    provide_locked_wheels(wheels, root)  # earlier versions a Lambda still pins: inputs, not artifacts
    for function in FUNCTIONS:
        archive = out / f"{function}.zip"
        build_zip(function, "lambda", wheels, archive)
        built[archive.name] = archive
    return built


def build_release(tag: str, out: Path, root: Path = ROOT) -> list[Path]:
    """Check ``tag``, build twice, compare, and write the artifacts and SHA256SUMS into a fresh ``out``."""
    what, version = check_tag(tag, root)
    with tempfile.TemporaryDirectory(prefix="loom-release-") as tmp:
        first, second = _build(Path(tmp) / "1", root), _build(Path(tmp) / "2", root)
        differing = sorted(n for n in first if n not in second or sha256_file(first[n]) != sha256_file(second[n]))
        if differing:
            raise BuildError(f"two builds of {tag} from the same commit differ in {', '.join(differing)}: the build is "
                             "not reproducible here (a different pip, zlib or build backend between the two runs?); "
                             "nothing was released")
        if out.exists():
            shutil.rmtree(out)
        out.mkdir(parents=True)
        written = [Path(shutil.copyfile(path, out / name)) for name, path in sorted(first.items())]
    sums = "".join(f"{sha256_file(p)}  {p.name}\n" for p in sorted(written))
    (out / "SHA256SUMS").write_text(sums)
    if what == "engine-core":
        index = out / "engine-core"
        index.mkdir()
        shutil.copyfile(out / wheel_file("engine-core", version, root), index / wheel_file("engine-core", version, root))
    return written
