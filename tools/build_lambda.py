"""Build Loom's Lambda artifacts: reproducible wheels, a lock check, and one deterministic zip per function.

    python tools/build_lambda.py wheels  --out dist/wheels
    python tools/build_lambda.py check   --wheels dist/wheels worker sweeper control-plane
    python tools/build_lambda.py zip     worker --runtime lambda --wheels dist/wheels --out dist/lambda/worker.zip

A zip holds the function's own package (``packages/<fn>/src/*``) plus exactly what
``packages/<fn>/requirements.txt`` pins, installed with ``--require-hashes``. boto3/botocore are not
in it: the Lambda runtime provides them, and leaving them out keeps each zip near 5 MB instead of
near 25 MB. ``--runtime lambda`` installs wheels for Lambda's python3.12 on x86_64 Linux;
``--runtime local`` for the Python running this script (the local stack).

Same inputs give the same bytes: fixed timestamps, sorted entries, fixed permissions, no
``__pycache__``. Inputs are the locked wheels, the function's source, and this toolchain (pip,
zlib); a different pip or zlib version may change the bytes, never the contents.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WHEEL_PACKAGES = ("engine-core", "workflows-examples")
FUNCTIONS = {"worker": "loom_worker", "sweeper": "loom_sweeper", "control-plane": "loom_control_plane"}
LAMBDA_PYTHON = "3.12"
# Lambda's python3.12 runs on Amazon Linux 2023 (glibc 2.34): manylinux2014 and manylinux_2_28 wheels both load.
LAMBDA_PLATFORMS = ("manylinux2014_x86_64", "manylinux_2_28_x86_64")
ZIP_EPOCH = (1980, 1, 1, 0, 0, 0)
# Hatchling writes reproducible wheels; pin the timestamp it uses so an exported SOURCE_DATE_EPOCH
# in someone's shell cannot change the wheel's hash (and break the lock) behind their back.
WHEEL_SOURCE_DATE_EPOCH = "1580601600"
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


# -- wheels ----------------------------------------------------------------------------------------
def build_wheels(out: Path, packages: tuple[str, ...] = WHEEL_PACKAGES, root: Path = ROOT) -> list[Path]:
    """Build each of ``root/packages/<package>``'s wheels into ``out``.

    Wheels of other versions already in ``out`` are kept: a Lambda still locked on an earlier
    engine-core builds from that version's wheel (see :func:`provide_locked_wheels`).
    """
    out.mkdir(parents=True, exist_ok=True)
    built = []
    for package in packages:
        built.append(_build_wheel(root / "packages" / package, out, f"packages/{package}"))
    return built


def _build_wheel(source: Path, out: Path, label: str) -> Path:
    env = {**os.environ, "SOURCE_DATE_EPOCH": WHEEL_SOURCE_DATE_EPOCH}
    with tempfile.TemporaryDirectory(prefix="loom-wheel-") as tmp:
        done = subprocess.run([sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", tmp,
                               str(source)], env=env, capture_output=True, text=True)
        if done.returncode != 0:
            raise BuildError(f"building the {label} wheel failed:\n{done.stdout}{done.stderr}")
        (wheel,) = Path(tmp).glob("*.whl")
        target = out / wheel.name
        shutil.move(wheel, target)  # replaces only this version's wheel
    return target


def _source_version(package: str, root: Path = ROOT, text: str | None = None) -> str:
    text = text if text is not None else (root / "packages" / package / "pyproject.toml").read_text()
    match = re.search(r'^version\s*=\s*"([^"]+)"', text, re.MULTILINE)
    if not match:
        raise BuildError(f"packages/{package}/pyproject.toml has no version")
    return match.group(1)


def _git(root: Path, *args: str, text: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=text)


def wheel_from_history(package: str, version: str, hashes: set[str], out: Path, root: Path = ROOT,
                       max_builds: int = 25) -> Path:
    """Rebuild ``package``'s wheel at ``version`` from git: the tag ``<package>-v<version>`` if there is
    one, else the newest commits whose ``packages/<package>/pyproject.toml`` says ``version``. Returns
    the first wheel whose sha256 is one of ``hashes`` (the locks'); the build is byte-reproducible, so
    the same source gives the locked bytes."""
    name = _dist_name(package, root)
    rel = f"packages/{package}"
    candidates: list[str] = []
    tag = f"{package}-v{version}"
    if _git(root, "rev-parse", "-q", "--verify", f"refs/tags/{tag}^{{commit}}").returncode == 0:
        candidates.append(tag)
    log = _git(root, "log", "--format=%H", "-n", "200", "--", rel)
    if log.returncode != 0 and not candidates:
        raise BuildError(
            f"a Lambda lock pins {name}=={version}, but {out} has no such wheel and {root} is not a git "
            f"checkout to rebuild it from. Run `make build-wheels` in a git clone, or copy "
            f"{name.replace('-', '_')}-{version}-py3-none-any.whl into {out}")
    candidates += log.stdout.split()
    tried = 0
    found_version = False
    for commit in candidates:
        shown = _git(root, "show", f"{commit}:{rel}/pyproject.toml")
        if shown.returncode != 0 or _source_version(package, root, shown.stdout) != version:
            continue
        found_version = True
        if tried >= max_builds:
            break
        tried += 1
        with tempfile.TemporaryDirectory(prefix=f"loom-{package}-{version}-") as tmp:
            archive = _git(root, "archive", "--format=tar", commit, rel, text=False)
            if archive.returncode != 0:
                continue
            subprocess.run(["tar", "-x", "-C", tmp], input=archive.stdout, check=True)
            wheel = _build_wheel(Path(tmp) / rel, Path(tmp), f"{rel} at {commit[:12]}")
            if sha256_file(wheel) in hashes:
                target = out / wheel.name
                shutil.move(wheel, target)
                return target
    if not found_version:
        raise BuildError(
            f"a Lambda lock pins {name}=={version}, but no commit in this checkout's history (and no tag {tag}) "
            f"has {rel} at version {version}. Fetch the history (`git fetch --unshallow --tags`), or re-lock "
            f"that Lambda on the current version: `make lock-lambdas LAMBDAS=<fn>`")
    raise BuildError(
        f"a Lambda lock pins {name}=={version} with sha256 {', '.join(sorted(hashes))}, but no commit with {rel} "
        f"at version {version} builds those bytes (tried {tried}): the lock was made from uncommitted or "
        f"since-changed code. Re-lock that Lambda (`make lock-lambdas LAMBDAS=<fn>`), or tag the released "
        f"commit as {tag}")


def provide_locked_wheels(out: Path, root: Path = ROOT, functions: tuple[str, ...] | None = None) -> list[Path]:
    """Make sure ``out`` holds every local wheel version a Lambda lock pins, with a locked hash.

    The current source version is built by :func:`build_wheels`; an earlier version is kept if its
    wheel is already in ``out`` with a locked hash, and otherwise rebuilt from git history."""
    wanted: dict[tuple[str, str], set[str]] = {}
    for function in functions or tuple(FUNCTIONS):
        requirements = root / "packages" / function / "requirements.txt"
        if not requirements.exists():
            continue
        pins = locked_pins(requirements)
        for package in WHEEL_PACKAGES:
            name = _dist_name(package, root)
            if name in pins:
                version, hashes = pins[name]
                wanted.setdefault((package, version), set()).update(hashes)
    provided = []
    for (package, version), hashes in sorted(wanted.items()):
        if version == _source_version(package, root):
            continue  # built from the working tree; check_lock reports a mismatch with its fix
        wheel = out / f"{_dist_name(package, root).replace('-', '_')}-{version}-py3-none-any.whl"
        if wheel.exists() and sha256_file(wheel) in hashes:
            continue
        provided.append(wheel_from_history(package, version, hashes, out, root))
    return provided


def _dist_name(package: str, root: Path = ROOT) -> str:
    text = (root / "packages" / package / "pyproject.toml").read_text()
    match = re.search(r'^name\s*=\s*"([^"]+)"', text, re.MULTILINE)
    if not match:
        raise BuildError(f"packages/{package}/pyproject.toml has no project name")
    return match.group(1)


# -- lock check ------------------------------------------------------------------------------------
def locked_pins(requirements: Path) -> dict[str, tuple[str, set[str]]]:
    """``{name: (version, {sha256, ...})}`` from a pip-compile'd requirements file."""
    pins: dict[str, tuple[str, set[str]]] = {}
    current = None
    for line in requirements.read_text().splitlines():
        match = _PIN.match(line)
        if match:
            current = match.group("name").lower().replace("_", "-")
            pins[current] = (match.group("version"), set())
        for h in _HASH.finditer(line):
            if current is not None:
                pins[current][1].add(h.group("digest"))
    return pins


def check_lock(function: str, wheels: Path, root: Path = ROOT) -> None:
    """Fail unless every local wheel the function's lock pins is present with the locked hash."""
    requirements = root / "packages" / function / "requirements.txt"
    pins = locked_pins(requirements)
    rel = requirements.relative_to(root)
    for package in WHEEL_PACKAGES:
        name = _dist_name(package, root)
        if name not in pins:
            raise BuildError(f"{rel} does not pin {name}; add it to requirements.in and run "
                             f"`make lock-lambdas LAMBDAS={function}`")
        version, hashes = pins[name]
        wheel = wheels / f"{name.replace('-', '_')}-{version}-py3-none-any.whl"
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


# -- extra workflow packages -----------------------------------------------------------------------
# A platform team's own workflow packages, from outside this repository, built into every zip:
# wheels (locked here by sha256 on first use) and/or a hash-locked requirements file of theirs.
_WHEEL_FILE = re.compile(r"^(?P<name>[A-Za-z0-9_.]+)-(?P<version>[A-Za-z0-9_.!+]+)(-[0-9][^-]*)?-[^-]+-[^-]+-[^-]+\.whl$")
EXTRA_LOCK_HEADER = """\
# Extra workflow packages built into the Loom Lambda zips, locked by sha256 (tools/build_lambda.py).
# Written by `make build EXTRA_WHEELS=...`. A wheel with a name and version listed here but other
# bytes is refused; `make lock-extras EXTRA_WHEELS=...` rewrites this file on purpose.
"""


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


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


def lock_extra_wheels(paths: list[Path], lock: Path, relock: bool = False) -> dict[str, tuple[str, str]]:
    """Record each extra wheel's sha256 in ``lock`` (a pip requirements file with hashes) and return
    ``{name: (version, sha256)}``. Refuse a wheel whose name and version the lock already holds with
    other bytes, unless ``relock``."""
    wheels = collect_extra_wheels(paths)
    entries: dict[str, tuple[str, str]] = {}
    locked = locked_pins(lock) if lock.exists() and not relock else {}
    for wheel in wheels:
        name, version = _wheel_pin(wheel)
        digest = sha256_file(wheel)
        if name in locked and locked[name][0] == version and digest not in locked[name][1]:
            raise BuildError(
                f"{wheel} has sha256 {digest}, but {lock} locks {name}=={version} to "
                f"{', '.join(sorted(locked[name][1]))}: the wheel changed without a version bump, or was tampered "
                f"with. Bump your package's version and rebuild its wheel; if you replaced it on purpose, run "
                f"`make lock-extras EXTRA_WHEELS=...` (rewrites {lock})")
        entries[name] = (version, digest)
    text = EXTRA_LOCK_HEADER + "".join(
        f"{name}=={version} \\\n    --hash=sha256:{digest}\n" for name, (version, digest) in sorted(entries.items()))
    if not lock.exists() or lock.read_text() != text:
        lock.parent.mkdir(parents=True, exist_ok=True)
        lock.write_text(text)
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
        if not _PIN.match(entry) or not _HASH.search(entry):
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
        self.names: dict[str, str] = {}
        if wheels:
            lock = lock or ROOT / "dist" / "extra-workflows.lock"
            for name, (version, _) in lock_extra_wheels(wheels, lock, relock).items():
                self.names[name] = version
            self.find_links = sorted({w.resolve().parent for w in collect_extra_wheels(wheels)})
            self.requirement_files.append(lock)
        if requirements:
            for name, (version, _) in check_extra_requirements(requirements).items():
                self.names.setdefault(name, version)
            self.requirement_files.append(requirements)

    def __bool__(self) -> bool:
        return bool(self.requirement_files)

    def describe(self) -> str:
        return ", ".join(f"{n}=={v}" for n, v in sorted(self.names.items())) or "none"


# -- versions --------------------------------------------------------------------------------------
def set_version(package: str, version: str, lambdas: tuple[str, ...], root: Path = ROOT) -> list[Path]:
    """Move ``package`` to ``version`` everywhere it is written: its pyproject.toml, engine-core's
    ``__version__``, and the exact pins in the chosen Lambdas' requirements.in (and pyproject.toml, if
    one still pins it). Checks everything first, then writes. Re-locking is `make lock-lambdas`' job."""
    from packaging.requirements import Requirement
    from packaging.version import InvalidVersion, Version

    try:
        Version(version)
    except InvalidVersion:
        raise BuildError(f"VERSION={version!r} is not a version (PEP 440), e.g. VERSION=0.2.0") from None
    name = _dist_name(package, root)
    edits: dict[Path, str] = {}
    pyproject = root / "packages" / package / "pyproject.toml"
    edits[pyproject] = re.sub(r'^version\s*=\s*"[^"]*"', f'version = "{version}"', pyproject.read_text(),
                              count=1, flags=re.MULTILINE)
    if package == "engine-core":
        init = root / "packages" / package / "src" / "engine_core" / "__init__.py"
        text = init.read_text()
        if re.search(r'^__version__\s*=\s*"[^"]*"', text, re.MULTILINE):  # a literal; metadata needs no edit
            edits[init] = re.sub(r'^__version__\s*=\s*"[^"]*"', f'__version__ = "{version}"', text, count=1,
                                 flags=re.MULTILINE)
    for other in WHEEL_PACKAGES:
        if other == package:
            continue
        deps = re.search(r"^dependencies\s*=\s*\[(.*?)\]", (root / "packages" / other / "pyproject.toml").read_text(),
                         re.MULTILINE | re.DOTALL)
        for dep in re.findall(r'"([^"]+)"', deps.group(1) if deps else ""):
            req = Requirement(dep)
            if normalize(req.name) == name and not req.specifier.contains(version, prereleases=True):
                raise BuildError(
                    f"packages/{other} requires {dep}, which excludes {name} {version}, and every Lambda installs "
                    f"packages/{other}. Widen that range in packages/{other}/pyproject.toml, release it to the "
                    f"same Lambdas (`.venv/bin/python tools/build_lambda.py set-version {other} <its next version> "
                    f"--lambdas {' '.join(lambdas)}`; the Lambdas you do not move keep its old wheel), then run "
                    "this again")
    pin = re.compile(rf"^{re.escape(name)}==\S+", re.MULTILINE)
    for function in lambdas:
        requirements_in = root / "packages" / function / "requirements.in"
        text = requirements_in.read_text()
        if not pin.search(text):
            raise BuildError(f"packages/{function}/requirements.in has no `{name}==...` line to move")
        edits[requirements_in] = pin.sub(f"{name}=={version}", text, count=1)
        project = root / "packages" / function / "pyproject.toml"
        edits[project] = re.sub(rf'"{re.escape(name)}==[^"]*"', f'"{name}=={version}"', project.read_text())
    changed = []
    for path, text in edits.items():
        if path.read_text() != text:
            path.write_text(text)
            changed.append(path)
    return changed


# -- zips ------------------------------------------------------------------------------------------
def install_requirements(function: str, runtime: str, wheels: Path, target: Path,
                         extras: Extras | None = None) -> None:
    requirements = ROOT / "packages" / function / "requirements.txt"
    command = [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-compile",
               "--require-hashes", "--only-binary=:all:", "--find-links", str(wheels), "--target", str(target),
               "-r", str(requirements)]
    if extras:
        command += [flag for d in extras.find_links for flag in ("--find-links", str(d))]
        command += [flag for r in extras.requirement_files for flag in ("-r", str(r))]
    if runtime == "lambda":
        command += [flag for p in LAMBDA_PLATFORMS for flag in ("--platform", p)]
        command += ["--python-version", LAMBDA_PYTHON, "--implementation", "cp"]
    elif runtime != "local":
        raise BuildError(f"unknown runtime {runtime!r}: use lambda or local")
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode == 0:
        return
    output = (done.stdout + done.stderr).strip()
    hint = ""
    if extras:
        hint = ("\nThe extra workflow packages could not be installed beside packages/"
                f"{function}/requirements.txt ({extras.describe()}). Every package in a zip is pinned with a hash: "
                "list your packages' own dependencies (not Loom's) in a requirements file made with "
                "`pip-compile --generate-hashes` and pass it as EXTRA_REQUIREMENTS; shared dependencies must "
                f"agree with the Lambda's lock; for --runtime lambda every package needs a wheel for "
                f"CPython {LAMBDA_PYTHON} manylinux x86_64 (or pure Python)")
    raise BuildError(f"pip could not install the {function} zip's requirements:\n{output}{hint}")


def copy_source(function: str, target: Path) -> None:
    module = FUNCTIONS[function]
    shutil.copytree(ROOT / "packages" / function / "src" / module, target / module,
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))


def strip_non_reproducible(tree: Path) -> None:
    """Drop what differs between identical installs or is rebuilt at run time anyway."""
    for path in sorted(tree.rglob("*"), reverse=True):
        if path.is_dir() and path.name == "__pycache__":
            shutil.rmtree(path)
        elif path.is_file() and (path.suffix == ".pyc" or path.name == "direct_url.json"):
            path.unlink()
    bin_dir = tree / "bin"
    if bin_dir.exists():
        shutil.rmtree(bin_dir)  # console scripts with this machine's interpreter path; Lambda never runs them


def write_zip(tree: Path, out: Path) -> None:
    """Zip ``tree`` deterministically: sorted paths, fixed time and modes, no directory entries."""
    files = sorted(p for p in tree.rglob("*") if p.is_file())
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_name(out.name + ".partial")
    with zipfile.ZipFile(partial, "w") as zf:
        for path in files:
            info = zipfile.ZipInfo(path.relative_to(tree).as_posix(), date_time=ZIP_EPOCH)
            mode = 0o755 if path.stat().st_mode & stat.S_IXUSR else 0o644
            info.external_attr = (stat.S_IFREG | mode) << 16
            info.create_system = 3  # Unix, so the modes above are honoured
            info.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(info, path.read_bytes(), compresslevel=9)
    partial.replace(out)


def check_extras(function: str, extras: Extras) -> None:
    """Extra wheels add workflow packages; they may not replace what the Lambda's lock pins."""
    pins = locked_pins(ROOT / "packages" / function / "requirements.txt")
    for name, version in sorted(extras.names.items()):
        if name in pins and pins[name][0] != version:
            raise BuildError(
                f"the extra workflow packages pin {name}=={version}, but packages/{function}/requirements.txt "
                f"pins {name}=={pins[name][0]}: a zip holds one version. Lock your requirements against the "
                f"Lambda's (`pip-compile --generate-hashes -c packages/{function}/requirements.txt ...`) or drop "
                f"{name} from them")


def build_zip(function: str, runtime: str, wheels: Path, out: Path, extras: Extras | None = None) -> str:
    """Build one function's zip (with ``extras``' workflow packages); return its sha256."""
    if function not in FUNCTIONS:
        raise BuildError(f"unknown function {function!r}: one of {', '.join(FUNCTIONS)}")
    check_lock(function, wheels)
    if extras:
        check_extras(function, extras)
    with tempfile.TemporaryDirectory(prefix=f"loom-{function}-") as tmp:
        tree = Path(tmp) / "tree"
        install_requirements(function, runtime, wheels, tree, extras)
        copy_source(function, tree)
        strip_non_reproducible(tree)
        write_zip(tree, out)
    return sha256_file(out)


def _add_extras_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--extra-wheels", type=Path, action="append", default=[], metavar="PATH",
                        help="a workflow wheel, or a directory of wheels, to build into the zip (repeatable)")
    parser.add_argument("--extra-requirements", type=Path, default=None, metavar="FILE",
                        help="a hash-locked requirements file (pip-compile --generate-hashes) of extra packages")
    parser.add_argument("--extra-lock", type=Path, default=ROOT / "dist" / "extra-workflows.lock", metavar="FILE",
                        help="where the extra wheels' sha256 are recorded and checked (default dist/extra-workflows.lock)")


def _extras(args: argparse.Namespace, relock: bool = False) -> Extras:
    return Extras(args.extra_wheels, args.extra_requirements, args.extra_lock, relock=relock)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    wheels_cmd = sub.add_parser("wheels", help="build the local packages' wheels, and the earlier versions the "
                                               "Lambda locks still pin (kept, or rebuilt from git history)")
    wheels_cmd.add_argument("--out", type=Path, default=ROOT / "dist" / "wheels")
    check_cmd = sub.add_parser("check", help="fail if a Lambda lock does not match the built wheels, or the "
                                             "extra workflow packages are not locked")
    check_cmd.add_argument("functions", nargs="+", choices=sorted(FUNCTIONS))
    check_cmd.add_argument("--wheels", type=Path, default=ROOT / "dist" / "wheels")
    _add_extras_args(check_cmd)
    extras_cmd = sub.add_parser("lock-extras", help="(re)write the extra wheels' sha256 lock")
    _add_extras_args(extras_cmd)
    zip_cmd = sub.add_parser("zip", help="build one function's deployment zip")
    zip_cmd.add_argument("function", choices=sorted(FUNCTIONS))
    zip_cmd.add_argument("--runtime", choices=("lambda", "local"), default="lambda")
    zip_cmd.add_argument("--wheels", type=Path, default=ROOT / "dist" / "wheels")
    zip_cmd.add_argument("--out", type=Path, required=True)
    _add_extras_args(zip_cmd)
    bump_cmd = sub.add_parser("set-version", help="move a local package's version and the Lambdas' pins of it")
    bump_cmd.add_argument("package", choices=WHEEL_PACKAGES)
    bump_cmd.add_argument("version")
    bump_cmd.add_argument("--lambdas", nargs="+", choices=sorted(FUNCTIONS), default=sorted(FUNCTIONS))
    args = parser.parse_args(argv)
    try:
        if args.command == "wheels":
            for wheel in build_wheels(args.out) + provide_locked_wheels(args.out):
                print(f"{sha256_file(wheel)}  {wheel.relative_to(ROOT) if wheel.is_relative_to(ROOT) else wheel}")
        elif args.command == "check":
            extras = _extras(args)
            for function in args.functions:
                check_lock(function, args.wheels)
                if extras:
                    check_extras(function, extras)
            if extras:
                print(f"extra workflow packages: {extras.describe()}")
            elif args.extra_lock.exists():
                print(f"note: no EXTRA_WHEELS/EXTRA_REQUIREMENTS, so the zips hold only Loom's own packages "
                      f"({args.extra_lock} is from an earlier build with extras)")
        elif args.command == "lock-extras":
            if not args.extra_wheels:
                raise BuildError("lock-extras needs EXTRA_WHEELS=<wheel or directory>")
            extras = _extras(args, relock=True)
            print(f"{args.extra_lock}: {extras.describe()}")
        elif args.command == "set-version":
            for path in set_version(args.package, args.version, tuple(args.lambdas)):
                print(f"updated {path.relative_to(ROOT)}")
        else:
            digest = build_zip(args.function, args.runtime, args.wheels, args.out, _extras(args))
            print(f"{digest}  {args.out}  ({args.out.stat().st_size / 1e6:.1f} MB)")
    except BuildError as exc:
        print(f"build failed: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
