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
    """Build each of ``root/packages/<package>``'s wheels into ``out`` (replacing older builds of it)."""
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "SOURCE_DATE_EPOCH": WHEEL_SOURCE_DATE_EPOCH}
    built = []
    for package in packages:
        stem = _dist_name(package, root).replace("-", "_")
        for old in out.glob(f"{stem}-*.whl"):
            old.unlink()
        done = subprocess.run([sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(out),
                               str(root / "packages" / package)], env=env, capture_output=True, text=True)
        if done.returncode != 0:
            raise BuildError(f"building the packages/{package} wheel failed:\n{done.stdout}{done.stderr}")
        built.extend(sorted(out.glob(f"{stem}-*.whl")))
    return built


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


def check_lock(function: str, wheels: Path) -> None:
    """Fail unless every local wheel the function's lock pins is present with the locked hash."""
    requirements = ROOT / "packages" / function / "requirements.txt"
    pins = locked_pins(requirements)
    rel = requirements.relative_to(ROOT)
    for package in WHEEL_PACKAGES:
        name = _dist_name(package)
        if name not in pins:
            raise BuildError(f"{rel} does not pin {name}; add it to requirements.in and run `make lock-lambdas`")
        version, hashes = pins[name]
        wheel = wheels / f"{name.replace('-', '_')}-{version}-py3-none-any.whl"
        if not wheel.exists():
            present = ", ".join(p.name for p in sorted(wheels.glob(f"{name.replace('-', '_')}-*.whl"))) or "none"
            raise BuildError(
                f"{rel} pins {name}=={version} but {wheels} holds {present}. If packages/{package} changed "
                f"its version, update the pin in packages/{function}/requirements.in and run `make lock-lambdas`; "
                "otherwise run `make build-wheels`")
        actual = sha256_file(wheel)
        if actual not in hashes:
            raise BuildError(
                f"{wheel.name} was rebuilt from packages/{package} and its sha256 is {actual}, but {rel} "
                f"locks {name}=={version} to {', '.join(sorted(hashes))}: packages/{package} changed without "
                f"a version bump. Bump `version` in packages/{package}/pyproject.toml (and the {name} pins in "
                "packages/*/requirements.in and pyproject.toml), then run `make lock-lambdas` and commit the "
                "updated requirements.txt files")


# -- zips ------------------------------------------------------------------------------------------
def install_requirements(function: str, runtime: str, wheels: Path, target: Path) -> None:
    requirements = ROOT / "packages" / function / "requirements.txt"
    command = [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-compile",
               "--require-hashes", "--only-binary=:all:", "--find-links", str(wheels), "--target", str(target),
               "-r", str(requirements)]
    if runtime == "lambda":
        command += [flag for p in LAMBDA_PLATFORMS for flag in ("--platform", p)]
        command += ["--python-version", LAMBDA_PYTHON, "--implementation", "cp"]
    elif runtime != "local":
        raise BuildError(f"unknown runtime {runtime!r}: use lambda or local")
    subprocess.run(command, check=True)


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


def build_zip(function: str, runtime: str, wheels: Path, out: Path) -> str:
    """Build one function's zip; return its sha256."""
    if function not in FUNCTIONS:
        raise BuildError(f"unknown function {function!r}: one of {', '.join(FUNCTIONS)}")
    check_lock(function, wheels)
    with tempfile.TemporaryDirectory(prefix=f"loom-{function}-") as tmp:
        tree = Path(tmp) / "tree"
        install_requirements(function, runtime, wheels, tree)
        copy_source(function, tree)
        strip_non_reproducible(tree)
        write_zip(tree, out)
    return sha256_file(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    wheels_cmd = sub.add_parser("wheels", help="build the local packages' wheels")
    wheels_cmd.add_argument("--out", type=Path, default=ROOT / "dist" / "wheels")
    check_cmd = sub.add_parser("check", help="fail if a Lambda lock does not match the built wheels")
    check_cmd.add_argument("functions", nargs="+", choices=sorted(FUNCTIONS))
    check_cmd.add_argument("--wheels", type=Path, default=ROOT / "dist" / "wheels")
    zip_cmd = sub.add_parser("zip", help="build one function's deployment zip")
    zip_cmd.add_argument("function", choices=sorted(FUNCTIONS))
    zip_cmd.add_argument("--runtime", choices=("lambda", "local"), default="lambda")
    zip_cmd.add_argument("--wheels", type=Path, default=ROOT / "dist" / "wheels")
    zip_cmd.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    try:
        if args.command == "wheels":
            for wheel in build_wheels(args.out):
                print(f"{sha256_file(wheel)}  {wheel.relative_to(ROOT) if wheel.is_relative_to(ROOT) else wheel}")
        elif args.command == "check":
            for function in args.functions:
                check_lock(function, args.wheels)
        else:
            digest = build_zip(args.function, args.runtime, args.wheels, args.out)
            print(f"{digest}  {args.out}  ({args.out.stat().st_size / 1e6:.1f} MB)")
    except BuildError as exc:
        print(f"build failed: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
