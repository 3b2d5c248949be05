"""Moving a local package's version: its ``pyproject.toml``, engine-core's ``__version__``, and the exact
pins in the chosen Lambdas' ``requirements.in`` (the first step of `make bump-engine-core`; re-locking
is `make lock-lambdas`' job)."""

from __future__ import annotations

import re
from pathlib import Path

from packaging.requirements import Requirement
from packaging.version import InvalidVersion, Version

from .common import ROOT, WHEEL_PACKAGES, BuildError, dist_name, normalize


def set_version(package: str, version: str, lambdas: tuple[str, ...], root: Path = ROOT) -> list[Path]:
    """Move ``package`` to ``version`` everywhere it is written: its pyproject.toml, engine-core's
    ``__version__``, and the exact pins in the chosen Lambdas' requirements.in (and pyproject.toml, if
    one still pins it). Checks everything first, then writes. Re-locking is `make lock-lambdas`' job."""
    try:
        Version(version)
    except InvalidVersion:
        raise BuildError(f"VERSION={version!r} is not a version (PEP 440), e.g. VERSION=0.2.0") from None
    name = dist_name(package, root)
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
