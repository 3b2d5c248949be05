"""Build a release's artifacts: `make release RELEASE_TAG=loom-v0.1.0` (or engine-core-v<version>).

    python tools/release.py --tag loom-v0.1.0 --out dist/release
    python tools/release.py --tag engine-core-v0.2.0 --check     # only the tag against the version

The tag must name the version this commit holds (terraform/modules/VERSION for loom-v*, packages/engine-core
for engine-core-v*). The wheels and the three Lambda zips are built twice from scratch and compared byte
for byte; ``--out`` then holds them with SHA256SUMS (and, for an engine-core tag, the engine-core wheel
alone in ``engine-core/``, what a package index receives). See docs/releasing.md.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

_TOOLS = str(Path(__file__).resolve().parent)
if _TOOLS not in sys.path:
    sys.path.insert(0, _TOOLS)

from loom_build.common import ROOT, BuildError  # noqa: E402
from loom_build.release import build_release, check_tag  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tag", required=True, help="loom-vX.Y.Z or engine-core-vX.Y.Z")
    parser.add_argument("--out", type=Path, default=ROOT / "dist" / "release")
    parser.add_argument("--check", action="store_true", help="only check the tag against the version it names")
    args = parser.parse_args(argv)
    try:
        what, version = check_tag(args.tag)
        if args.check:
            print(f"{args.tag}: {what} {version}, as this commit says")
            return 0
        for path in build_release(args.tag, args.out):
            print(f"{path}")
        print(f"{args.out / 'SHA256SUMS'}: {what} {version}, built twice, the same bytes")
    except BuildError as exc:
        print(f"release failed: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
