"""What a build would deploy: each workflow, its versions and their fingerprints, read from a worker zip (or
this environment), for ``loom versions check`` to compare with the executions live on the stack.

    python -m engine_core.manifest --zip dist/lambda/worker.zip --out build/workflows.json

From a zip, only the workflow packages the zip carries are loaded (their ``loom.workflows`` entry points,
found in the zip's own ``*.dist-info``); their modules are imported from the zip, after this environment's
own path, so engine-core and pydantic come from here (a zip built for another Python still reads).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import zipfile
from importlib.metadata import distributions
from pathlib import Path
from typing import Any

from .errors import RegistrationError
from .registry import ENTRY_POINT_GROUP, REGISTRY, Registry


def manifest_of(registry: Registry) -> dict[str, Any]:
    """``{"workflows": {name: {version: fingerprint}}}`` (versions as strings: JSON object keys)."""
    return {"workflows": {name: {str(v): registry.get(name, v).fingerprint for v in registry.versions(name)}
                          for name in registry.names()}}


def load_from_dir(root: Path, registry: Registry = REGISTRY) -> list[str]:
    """Import the workflow packages installed in ``root`` (an unpacked Lambda zip); returns the entry points."""
    found = []
    for dist in distributions(path=[str(root)]):
        for ep in dist.entry_points.select(group=ENTRY_POINT_GROUP):
            found.append(f"{dist.metadata['Name']}: {ep.name} = {ep.value}")
            if str(root) not in sys.path:
                sys.path.append(str(root))
            try:
                ep.load()
            except RegistrationError:
                raise
            except Exception as exc:
                raise RegistrationError(f"workflow package {dist.metadata['Name']!r} in {root} failed to import "
                                        f"({ep.name} = {ep.value}): {type(exc).__name__}: {exc}") from exc
    return found


def main(argv: list[str] | None = None) -> int:
    summary = __doc__.split("\n\n")[0].replace("\n", " ").replace("``", "`")  # the whole first paragraph
    p = argparse.ArgumentParser(prog="python -m engine_core.manifest", description=summary)
    p.add_argument("--zip", type=Path, help="a worker zip: read the workflow packages it carries")
    p.add_argument("--out", type=Path, help="write the manifest here (default: print it)")
    args = p.parse_args(argv)
    if args.zip is not None:
        if not args.zip.is_file():
            print(f"error: no zip at {args.zip}: build it first (make build, or make build-local)", file=sys.stderr)
            return 2
        with tempfile.TemporaryDirectory(prefix="loom-manifest-") as tmp:
            with zipfile.ZipFile(args.zip) as z:
                z.extractall(tmp)
            loaded = load_from_dir(Path(tmp))
            if not loaded:
                print(f"warning: {args.zip} carries no workflow package (no {ENTRY_POINT_GROUP} entry point)",
                      file=sys.stderr)
            text = json.dumps(manifest_of(REGISTRY), indent=2, sort_keys=True)
    else:
        REGISTRY.load_entry_points()
        text = json.dumps(manifest_of(REGISTRY), indent=2, sort_keys=True)
    if args.out is None:
        print(text)
    else:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
