"""One deterministic zip per function: its own package plus exactly what its lock pins, installed with
``pip --require-hashes`` for Lambda's python3.12 on x86_64 or arm64 (``runtime="lambda"``) or for the
Python running this (``runtime="local"``, the local stack).

Same inputs give the same bytes: fixed timestamps, sorted entries, fixed permissions, and bytecode
compiled ahead by the interpreter that will run the zip (:mod:`.bytecode`: unchecked-hash pycs, no
timestamps). Inputs are the locked wheels, the function's source, and this toolchain (pip, zlib, the
compiling interpreter's minor version); a different one may change the bytes, never what the zip runs.
"""

from __future__ import annotations

import shutil
import stat
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from . import bytecode, wheelhouse
from .common import FUNCTIONS, ROOT, BuildError, locked_pins, sha256_file
from .extras import Extras
from .locks import check_lock, examples_name, requirements_without

LAMBDA_PYTHON = "3.12"
# Lambda's python3.12 runs on Amazon Linux 2023 (glibc 2.34): manylinux2014 and manylinux_2_28 wheels both load.
ARCH_PLATFORMS = {
    "x86_64": ("manylinux2014_x86_64", "manylinux_2_28_x86_64"),
    "arm64": ("manylinux2014_aarch64", "manylinux_2_28_aarch64"),
}
ZIP_EPOCH = (1980, 1, 1, 0, 0, 0)


def lambda_platforms(arch: str) -> tuple[str, ...]:
    try:
        return ARCH_PLATFORMS[arch]
    except KeyError:
        raise BuildError(f"unknown architecture {arch!r}: Lambda runs {' or '.join(ARCH_PLATFORMS)} "
                         "(ARCH=x86_64, the default, or ARCH=arm64)") from None


def function_requirements(function: str, target_dir: Path, examples: bool = True, root: Path = ROOT) -> Path:
    """The requirements file the zip installs: the function's lock, or (``examples=False``) the lock
    without the example workflows, written into ``target_dir``."""
    lock = root / "packages" / function / "requirements.txt"
    if examples:
        return lock
    text, _ = requirements_without(lock.read_text(), {examples_name(root)})
    path = target_dir / f"{function}-requirements.txt"
    path.write_text(text)
    return path


def install_requirements(function: str, runtime: str, wheels: Path, target: Path, extras: Extras | None = None,
                         arch: str = "x86_64", examples: bool = True) -> None:
    work = target.parent
    requirements = function_requirements(function, work, examples)
    # --no-warn-conflicts: pip would check every distribution of the environment running it (the dev venv,
    # not the zip) for conflicts, some 40% of an install's CPU, to print a warning about another environment.
    command = [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-compile",
               "--no-warn-conflicts", "--require-hashes", "--only-binary=:all:", "--find-links", str(wheels), "--target", str(target),
               "-r", str(requirements)]
    if extras:
        command += [flag for d in extras.find_links for flag in ("--find-links", str(d))]
        if extras.wheel_pins:
            pinned = work / "extra-wheels.txt"
            pinned.write_text(extras.wheel_requirements())
            command += ["-r", str(pinned)]
        command += [flag for r in extras.requirement_files for flag in ("-r", str(r))]
    if runtime == "lambda":
        platform_args = [flag for p in lambda_platforms(arch) for flag in ("--platform", p)]
        platform_args += ["--python-version", LAMBDA_PYTHON, "--implementation", "cp"]
        version = LAMBDA_PYTHON
    elif runtime == "local":
        platform_args, version = [], "%d.%d" % sys.version_info[:2]
    else:
        raise BuildError(f"unknown runtime {runtime!r}: use lambda or local")
    # The lock's third-party wheels come from the local wheelhouse (filled once from the index); only an
    # extra requirements file of the team's own may still need the index.
    house = wheelhouse.ensure(ROOT / "packages" / function / "requirements.txt",
                              wheelhouse.root() / wheelhouse.target_name(runtime, arch, version), wheels, platform_args)
    command += [*platform_args, "--find-links", str(house)]
    if not (extras and extras.requirement_files):
        command.append("--no-index")
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
                f"CPython {LAMBDA_PYTHON} manylinux {arch} (or pure Python)")
    raise BuildError(f"pip could not install the {function} zip's requirements:\n{output}{hint}")


def copy_source(function: str, target: Path, root: Path = ROOT) -> None:
    module = FUNCTIONS[function]
    shutil.copytree(root / "packages" / function / "src" / module, target / module,
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
            # zlib's default level: level 9 takes three times the CPU for a zip 0.7% smaller (bytecode and
            # shared libraries gain next to nothing from it), and every build and build test pays it.
            zf.writestr(info, path.read_bytes(), compresslevel=6)
    partial.replace(out)


def check_extras(function: str, extras: Extras, root: Path = ROOT) -> None:
    """Extra wheels add workflow packages; they may not replace what the Lambda's lock pins."""
    pins = locked_pins(root / "packages" / function / "requirements.txt")
    for name, version in sorted(extras.names.items()):
        if name in pins and pins[name][0] != version:
            raise BuildError(
                f"the extra workflow packages pin {name}=={version}, but packages/{function}/requirements.txt "
                f"pins {name}=={pins[name][0]}: a zip holds one version. Lock your requirements against the "
                f"Lambda's (`pip-compile --generate-hashes -c packages/{function}/requirements.txt ...`) or drop "
                f"{name} from them")


def compiler_for(runtime: str, bytecode_with: str | Path | None = "auto") -> Path | None:
    """The interpreter that compiles a ``runtime`` zip's bytecode, or None for a zip of sources only.

    ``bytecode_with``: "auto" (this Python for a local zip; for a Lambda zip, a CPython 3.12 if one is
    found, else None with a note on stderr), None (no bytecode), or the path of a python3.12 for a
    Lambda zip (refused if it is not one)."""
    if bytecode_with is None:
        return None
    if runtime == "local":
        return Path(sys.executable)
    if runtime != "lambda":
        raise BuildError(f"unknown runtime {runtime!r}: use lambda or local")
    found = bytecode.find_python(LAMBDA_PYTHON, None if bytecode_with == "auto" else str(bytecode_with))
    if found is None:
        print(bytecode.missing_note(LAMBDA_PYTHON), file=sys.stderr)
    return found


def build_zip(function: str, runtime: str, wheels: Path, out: Path, extras: Extras | None = None,
              arch: str = "x86_64", examples: bool = True, bytecode_with: str | Path | None = "auto") -> str:
    """Build one function's zip (with ``extras``' workflow packages, without the example workflows when
    ``examples`` is false, with bytecode as :func:`compiler_for` says); return its sha256."""
    if function not in FUNCTIONS:
        raise BuildError(f"unknown function {function!r}: one of {', '.join(FUNCTIONS)}")
    if runtime == "lambda":
        lambda_platforms(arch)  # an unknown architecture fails before anything is built
    check_lock(function, wheels, examples=examples)
    if extras:
        check_extras(function, extras)
    compiler = compiler_for(runtime, bytecode_with)
    with tempfile.TemporaryDirectory(prefix=f"loom-{function}-") as tmp:
        tree = Path(tmp) / "tree"
        install_requirements(function, runtime, wheels, tree, extras, arch, examples)
        copy_source(function, tree)
        strip_non_reproducible(tree)
        if compiler is not None:
            bytecode.compile_tree(tree, compiler)
        write_zip(tree, out)
    return sha256_file(out)
