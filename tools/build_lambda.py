"""Build Loom's Lambda artifacts: reproducible wheels, a lock check, and one deterministic zip per function.

    python tools/build_lambda.py wheels  --out dist/wheels
    python tools/build_lambda.py check   --wheels dist/wheels worker sweeper control-plane
    python tools/build_lambda.py zip     worker --runtime lambda --arch x86_64 --wheels dist/wheels --out dist/lambda/worker.zip

A zip holds the function's own package (``packages/<fn>/src/*``) plus exactly what
``packages/<fn>/requirements.txt`` pins, installed with ``--require-hashes``. boto3/botocore are not
in it: the Lambda runtime provides them, and leaving them out keeps each zip near 5 MB instead of
near 25 MB. ``--runtime lambda`` installs wheels for Lambda's python3.12 on Linux, for ``--arch``
x86_64 (the default) or arm64; ``--runtime local`` for the Python running this script (the local
stack). ``--examples 0`` leaves Loom's example workflows out of the zip (``make build EXAMPLES=0``).
Every module comes with bytecode compiled ahead for the interpreter that runs the zip: a CPython 3.12
for Lambda zips (``--lambda-python``, else one found on PATH or through pyenv), this Python for local
ones (``tools/loom_build/bytecode.py``; ``--bytecode 0`` ships sources only).

The work is done by the modules of ``tools/loom_build/`` (one job each); this file is their command
line, and re-exports what the tests and ``make`` use.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

_TOOLS = str(Path(__file__).resolve().parent)
if _TOOLS not in sys.path:  # loaded by path (tests, make): the package beside this file
    sys.path.insert(0, _TOOLS)

from loom_build.bytecode import find_python  # noqa: E402
from loom_build.common import (  # noqa: E402
    FUNCTIONS,
    ROOT,
    WHEEL_PACKAGES,
    BuildError,
    dist_name,
    locked_pins,
    sha256_file,
    source_version,
)
from loom_build.extras import DEFAULT_LOCK, Extras, check_extra_requirements, collect_extra_wheels  # noqa: E402
from loom_build.locks import check_lock, requirements_without  # noqa: E402
from loom_build.versions import set_version  # noqa: E402
from loom_build.wheels import build_wheels, provide_locked_wheels, wheel_from_history  # noqa: E402
from loom_build.zips import ARCH_PLATFORMS, build_zip, check_extras, compiler_for, lambda_platforms, write_zip  # noqa: E402

__all__ = [
    "ARCH_PLATFORMS", "FUNCTIONS", "ROOT", "WHEEL_PACKAGES", "BuildError", "Extras", "build_wheels", "build_zip",
    "check_extra_requirements", "check_extras", "check_lock", "collect_extra_wheels", "compiler_for", "dist_name",
    "find_python",
    "lambda_platforms", "locked_pins", "main", "provide_locked_wheels", "requirements_without", "set_version",
    "sha256_file", "source_version", "wheel_from_history", "write_zip",
]


def _add_extras_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--extra-wheels", type=Path, action="append", default=[], metavar="PATH",
                        help="a workflow wheel, or a directory of wheels, to build into the zip (repeatable)")
    parser.add_argument("--extra-requirements", type=Path, default=None, metavar="FILE",
                        help="a hash-locked requirements file (pip-compile --generate-hashes) of extra packages")
    parser.add_argument("--extra-lock", type=Path, default=DEFAULT_LOCK, metavar="FILE",
                        help="where the extra wheels' sha256 are recorded and checked (default dist/extra-workflows.lock)")


def _add_examples_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--examples", choices=("0", "1"), default="1",
                        help="1 (default): Loom's example workflows (packages/workflows-examples) in the zip; 0: left out")


def _extras(args: argparse.Namespace, relock: bool = False) -> Extras:
    return Extras(args.extra_wheels, args.extra_requirements, args.extra_lock, relock=relock)


def _parser() -> argparse.ArgumentParser:
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
    _add_examples_arg(check_cmd)
    extras_cmd = sub.add_parser("lock-extras", help="(re)record the extra wheels' sha256 in the lock")
    _add_extras_args(extras_cmd)
    zip_cmd = sub.add_parser("zip", help="build one function's deployment zip")
    zip_cmd.add_argument("function", choices=sorted(FUNCTIONS))
    zip_cmd.add_argument("--runtime", choices=("lambda", "local"), default="lambda")
    zip_cmd.add_argument("--arch", default="x86_64", choices=tuple(ARCH_PLATFORMS),
                         help=f"Lambda architecture for --runtime lambda: {' or '.join(ARCH_PLATFORMS)} (default x86_64)")
    zip_cmd.add_argument("--wheels", type=Path, default=ROOT / "dist" / "wheels")
    zip_cmd.add_argument("--out", type=Path, required=True)
    zip_cmd.add_argument("--lambda-python", default=None, metavar="PYTHON",
                         help="the CPython 3.12 that compiles a Lambda zip's bytecode (default: python3.12 on PATH, "
                              "else pyenv's; none found: sources only, with a note)")
    zip_cmd.add_argument("--bytecode", choices=("0", "1"), default="1",
                         help="1 (default): bytecode compiled ahead for the zip's interpreter; 0: sources only")
    _add_extras_args(zip_cmd)
    _add_examples_arg(zip_cmd)
    bump_cmd = sub.add_parser("set-version", help="move a local package's version and the Lambdas' pins of it")
    bump_cmd.add_argument("package", choices=WHEEL_PACKAGES)
    bump_cmd.add_argument("version")
    bump_cmd.add_argument("--lambdas", nargs="+", choices=sorted(FUNCTIONS), default=sorted(FUNCTIONS))
    return parser


def _shown(path: Path) -> Path:
    return path.relative_to(ROOT) if path.is_relative_to(ROOT) else path


def _run(args: argparse.Namespace) -> None:
    if args.command == "wheels":
        for wheel in build_wheels(args.out) + provide_locked_wheels(args.out):
            print(f"{sha256_file(wheel)}  {_shown(wheel)}")
    elif args.command == "check":
        extras = _extras(args)
        for function in args.functions:
            check_lock(function, args.wheels, examples=args.examples == "1")
            if extras:
                check_extras(function, extras)
        if args.examples == "0":
            print("example workflows: left out (EXAMPLES=0)")
        if extras:
            print(f"extra workflow packages: {extras.describe()}")
        elif args.extra_lock.exists():
            print(f"note: no EXTRA_WHEELS/EXTRA_REQUIREMENTS, so the zips hold only Loom's own packages "
                  f"({args.extra_lock} records earlier builds with extras)")
    elif args.command == "lock-extras":
        if not args.extra_wheels:
            raise BuildError("lock-extras needs EXTRA_WHEELS=<wheel or directory>")
        extras = _extras(args, relock=True)
        print(f"{args.extra_lock}: {extras.describe()}")
    elif args.command == "set-version":
        for path in set_version(args.package, args.version, tuple(args.lambdas)):
            print(f"updated {_shown(path)}")
    else:
        compiler = None if args.bytecode == "0" else compiler_for(args.runtime, args.lambda_python or "auto")
        digest = build_zip(args.function, args.runtime, args.wheels, args.out, _extras(args), arch=args.arch,
                           examples=args.examples == "1", bytecode_with=compiler)
        version = "3.12" if args.runtime == "lambda" else "%d.%d" % sys.version_info[:2]
        compiled = f", bytecode for CPython {version}" if compiler else ", sources only"
        print(f"{digest}  {args.out}  ({args.out.stat().st_size / 1e6:.1f} MB{compiled})")


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        _run(args)
    except BuildError as exc:
        print(f"build failed: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
