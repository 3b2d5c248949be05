"""engine-core's structure: no import circle (deferred and type-checking imports count), and the step
kinds reached only through the protocol and the kind table (DESIGN.md: "One protocol for every kind")."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"
PKG = "engine_core"


def _modules() -> dict[str, Path]:
    out = {}
    for path in (SRC / PKG).rglob("*.py"):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _imports(mods: dict[str, Path]) -> dict[str, set[str]]:
    """Every module each module imports from the package, wherever the import statement stands."""
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for mod, path in mods.items():
        base = mod.split(".") if path.name == "__init__.py" else mod.split(".")[:-1]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                root = base[: len(base) - (node.level - 1)] if node.level else []
                target = ".".join(root + ([node.module] if node.module else [])) if node.level else node.module or ""
                for alias in node.names:
                    name = f"{target}.{alias.name}"
                    graph[mod].add(name if name in mods else target)
            elif isinstance(node, ast.Import):
                graph[mod].update(a.name for a in node.names)
        graph[mod] = {t for t in graph[mod] if t in mods and t != mod
                      and not (mod.startswith(t + ".") and mods[t].name == "__init__.py")}
    return graph


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in graph:
        if v not in index:
            visit(v)
    return found


def test_engine_core_has_no_import_circle_deferred_imports_included():
    assert _circles(_imports(_modules())) == []


def test_the_circle_finder_finds_a_circle_when_there_is_one():
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


ALLOWED_FOR_KINDS = {"engine_core._runner", "engine_core.callbacks", "engine_core.clock", "engine_core.code_step",
                     "engine_core.codec",
                     "engine_core.context", "engine_core.errors", "engine_core.faults", "engine_core.model",
                     "engine_core.outcome", "engine_core.protocol", "engine_core.retries", "engine_core.steps",
                     "engine_core.transitions", "engine_core.waiting_events"}


def test_a_kind_imports_only_the_protocol_the_model_the_definitions_and_pure_helpers():
    graph = _imports(_modules())
    for mod, targets in graph.items():
        if not mod.startswith("engine_core.kinds.") or mod == "engine_core.kinds":
            continue
        own = mod.split(".")[2].lstrip("_").split("_")[0]  # a kind's private helpers: _fanout_parent -> fanout
        for target in targets:
            if target.startswith("engine_core.kinds."):
                assert target.split(".")[2].lstrip("_").split("_")[0] == own, f"{mod} imports another kind: {target}"
            else:
                assert target in ALLOWED_FOR_KINDS, f"{mod} imports {target}"


def test_the_engine_the_step_run_the_operator_and_the_registry_never_name_a_kind():
    graph = _imports(_modules())
    for mod in ("engine_core.engine", "engine_core.step_run", "engine_core.step_reads", "engine_core.operations", "engine_core.operator_base", "engine_core.event_sends",
                "engine_core.reads", "engine_core.registry", "engine_core.sweeper", "engine_core.lifecycle", "engine_core.steps"):
        named = {t for t in graph[mod] if t.startswith("engine_core.kinds.")}
        assert not named, f"{mod} imports {named} (kinds are reached through engine_core.kinds' table)"
    assert "engine_core.kinds" not in graph["engine_core.registry"]
