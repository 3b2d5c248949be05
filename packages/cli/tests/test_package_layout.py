"""loom_cli's shape: no import circle (imports inside functions count), the SDK standing alone, the
console and the MCP server built on the SDK and never on the CLI's commands, and no module over 400 lines."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = SRC / "loom_cli"
MAX_LINES = 400


def _module(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> set[str]:
    """The loom_cli modules ``path`` imports, at the top or deferred inside a function."""
    module, found = _module(path), set()
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    known = {_module(p) for p in PACKAGE.rglob("*.py")}
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            # `from . import forms` imports the submodule; `from .sdk import LoomClient`, the module .sdk
            names = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
        else:
            continue
        for name in names:
            while name and name not in known:  # `from .sdk import LoomClient`: the module is loom_cli.sdk
                name = name.rpartition(".")[0]
            if name.startswith("loom_cli") and name != module:
                found.add(name)
    return found


GRAPH = {_module(p): _imports(p) for p in PACKAGE.rglob("*.py")}


def _cycle_from(start: str) -> list[str] | None:
    stack = [(start, [start])]
    while stack:
        node, path = stack.pop()
        for nxt in GRAPH.get(node, ()):
            if nxt == start:
                return path + [start]
            if nxt not in path:
                stack.append((nxt, path + [nxt]))
    return None


def test_the_package_has_no_import_circle():
    cycles = [c for c in (_cycle_from(m) for m in sorted(GRAPH)) if c]
    assert not cycles, f"import circles (deferred imports count): {cycles}"


def test_the_sdk_imports_nothing_of_the_cli_console_or_mcp():
    for module, imports in GRAPH.items():
        if module.startswith("loom_cli.sdk"):
            assert all(i.startswith("loom_cli.sdk") for i in imports), (module, imports)


@pytest.mark.parametrize("surface", ["loom_cli.console", "loom_cli.mcp_server", "loom_cli.mcp_tools"])
def test_the_console_and_mcp_sit_on_the_sdk_not_on_the_cli(surface):
    for module, imports in GRAPH.items():
        if module == surface or module.startswith(surface + "."):
            assert not imports & {"loom_cli.main", "loom_cli.commands", "loom_cli.watch"}, (module, imports)


def test_no_module_is_over_400_lines():
    long = {str(p.relative_to(SRC)): n for p in PACKAGE.rglob("*.py")
            if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, long
