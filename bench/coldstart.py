"""Cold start: each Lambda's init (its handler module's import, clients included) and each zip's size.

Each import runs in a clean subprocess, ``python -X importtime -c "import <module>"``, with the
environment a function gets (LOOM_*, POWERTOOLS_*, a region and dummy credentials: the handlers build
their boto3 clients at import, which needs no network). The figure is the cumulative time of the
top-level import line, median of several runs. ``-X importtime`` itself adds a little overhead, so
the process wall time (interpreter start included) is reported beside it.

The zips, as Lambda loads them: each zip unpacked and imported with ``python -I -B`` (isolated: the
zip's tree first on ``sys.path``, then the runtime-provided boto3, compiled for that interpreter as
Lambda's runtime ships it; nothing else). ``dist/lambda`` with a CPython 3.12 when one is found
(Lambda's python3.12: the zips' bytecode is for it), and ``dist/local`` with this machine's Python.
The first zip run also imports the same tree with its bytecode removed (what a zip of sources pays).
The dev venv (editable installs, sources compiled ahead) is measured too, for the issue-15 baseline.

The floor, measured the same way in the same rounds and with the same interpreter and provided
libraries: a module that only imports boto3 and creates the clients the handler creates
(``HANDLER_CLIENTS``, with the handlers' client configuration). The target is each handler within
``TARGET_OVER_FLOOR_MS`` of it, the median of the per-round differences (each round measures the floor
and every handler back to back, so load hits both alike).
"""

from __future__ import annotations

import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .analysis import TARGET_OVER_FLOOR_MS

ROOT = Path(__file__).resolve().parent.parent
HANDLERS = {
    "worker": "loom_worker.handler",
    "sweeper": "loom_sweeper.handler",
    "control-plane": "loom_control_plane.handler",
}
FUNCTION_ENV = {
    "LOOM_TABLE_NAME": "loom-bench", "LOOM_QUEUE_URL": "https://sqs.us-east-1.amazonaws.com/123456789012/loom-steps",
    "LOOM_DLQ_URL": "https://sqs.us-east-1.amazonaws.com/123456789012/loom-steps-dlq", "LOOM_SHARDS": "4",
    "POWERTOOLS_SERVICE_NAME": "loom", "POWERTOOLS_METRICS_NAMESPACE": "Loom", "LOG_LEVEL": "INFO",
    "AWS_DEFAULT_REGION": "us-east-1", "AWS_REGION": "us-east-1", "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing", "AWS_SESSION_TOKEN": "testing", "PYTHONDONTWRITEBYTECODE": "1",
}
HANDLER_CLIENTS = {"worker": ("dynamodb", "sqs"), "sweeper": ("dynamodb", "sqs"), "control-plane": ("dynamodb", "sqs")}
"""The boto3 clients each handler creates at import (``engine_core.adapters.bootstrap``: the store's and the
queue's; the events client only with ``LOOM_EVENT_BUS_NAME``, which this environment does not set)."""
FLOOR_SOURCE = """import boto3
from botocore.config import Config

_config = Config(retries={{"mode": "standard", "max_attempts": 3}}, connect_timeout=2, read_timeout=10, tcp_keepalive=True)
clients = [boto3.client(name, config=_config) for name in {clients!r}]
"""
"""The floor module: what any Lambda creating those clients at import pays, and nothing else."""
HANDLER_LIBRARIES = {
    "worker": ["from aws_lambda_powertools.utilities.typing import LambdaContext"],
    "sweeper": ["from aws_lambda_powertools.utilities.typing import LambdaContext"],
    "control-plane": ["from aws_lambda_powertools.logging import correlation_paths",
                      "from aws_lambda_powertools.utilities.typing import LambdaContext"],
}
"""The Powertools utilities each handler imports before engine-core (its own first lines, in their order)."""
LIBRARIES_SOURCE = """import gc
gc.disable()
{imports}
from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.logging.utils import copy_config_to_registered_loggers
from pydantic import BaseModel, ValidationError
{floor}
logger, metrics = Logger(), Metrics()


class FirstModel(BaseModel):
    value: int = 0
"""
"""The libraries module: the floor plus the libraries the handler imports (Powertools, pydantic) and its
Logger and Metrics, in the handler's order and with the collector off, as the handler runs them, and one
one-field pydantic model: pydantic loads most of itself (its fields and types, its plugin loader and with it
``importlib.metadata``) when the first model class is built, which any handler with a model pays once. The
handler minus this module is Loom's own share of the init: engine-core, the handler's setup, the workflows."""
_LINE = re.compile(r"^import time:\s+(\d+)\s+\|\s+(\d+)\s+\|\s?(\s*)(\S+)\s*$")


def top_level_cumulative_us(stderr: str, module: str) -> int | None:
    """The cumulative microseconds of ``module``'s own import line (least indented occurrence)."""
    best: tuple[int, int] | None = None
    for line in stderr.splitlines():
        m = _LINE.match(line)
        if not m or m.group(4) != module:
            continue
        depth, cumulative = len(m.group(3)), int(m.group(2))
        if best is None or depth < best[0]:
            best = (depth, cumulative)
    return None if best is None else best[1]


def self_time_by_package(stderr: str, limit: int = 6) -> list[tuple[str, float]]:
    """Self import time summed by top-level package (ms), largest first: where the time goes."""
    totals: dict[str, int] = {}
    for line in stderr.splitlines():
        m = _LINE.match(line)
        if m:
            root = m.group(4).split(".")[0]
            totals[root] = totals.get(root, 0) + int(m.group(1))
    ranked = sorted(totals.items(), key=lambda kv: -kv[1])
    return [(name, us / 1000) for name, us in ranked[:limit]]


def _import_once(python: str, module: str, extra_path: str | list[str] | None, isolated: bool,
                 write_bytecode: bool = False) -> dict[str, Any]:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": os.environ.get("HOME", "/tmp"), **FUNCTION_ENV}
    if write_bytecode:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
    code = f"import {module}"
    if extra_path:
        paths = [extra_path] if isinstance(extra_path, str) else list(extra_path)
        code = f"import sys; sys.path[0:0] = {paths!r}; import {module}"
    # -B: never write bytecode (-I ignores PYTHONDONTWRITEBYTECODE), so "sources only" stays sources only.
    args = [python, "-B"] + (["-I"] if isolated else []) + ["-X", "importtime", "-c", code]
    started = time.perf_counter()
    proc = subprocess.run(args, env=env, capture_output=True, text=True, cwd=tempfile.gettempdir(), timeout=120)
    wall = time.perf_counter() - started
    if proc.returncode != 0:
        tail = proc.stderr.strip().splitlines()[-1:] or ["?"]
        return {"ok": False, "error": tail[0]}
    return {"ok": True, "import_us": top_level_cumulative_us(proc.stderr, module), "wall_s": wall,
            "by_package": self_time_by_package(proc.stderr)}


def floor_module(folder: Path, function: str) -> str:
    """Write the floor module of ``function`` into ``folder``; its module name."""
    name = "loom_floor_" + function.replace("-", "_")
    (folder / f"{name}.py").write_text(FLOOR_SOURCE.format(clients=list(HANDLER_CLIENTS[function])))
    return name


def libraries_module(folder: Path, function: str) -> str:
    """Write the libraries module of ``function`` into ``folder``; its module name."""
    name = "loom_libraries_" + function.replace("-", "_")
    floor = FLOOR_SOURCE.format(clients=list(HANDLER_CLIENTS[function]))
    (folder / f"{name}.py").write_text(LIBRARIES_SOURCE.format(imports="\n".join(HANDLER_LIBRARIES[function]),
                                                               floor=floor))
    return name


def compile_sources(root: Path = ROOT) -> None:
    """Bytecode for the editable packages' sources, as an installed wheel has it."""
    subprocess.run([sys.executable, "-m", "compileall", "-q", "-j", "0", *map(str, sorted(root.glob("packages/*/src")))],
                   capture_output=True, check=False)


def over_floor_ms(handler: list[dict[str, Any]], floor: list[dict[str, Any]]) -> float | None:
    """Median over rounds of (handler import - floor), each pair measured back to back."""
    pairs = [(h["import_us"] - f["import_us"]) / 1000 for h, f in zip(handler, floor)
             if h.get("ok") and f.get("ok") and h.get("import_us") is not None and f.get("import_us") is not None]
    return statistics.median(pairs) if pairs else None


def summarize(results: list[dict[str, Any]]) -> dict[str, Any]:
    """Median (and minimum: the least-disturbed run on a shared machine) of repeated imports."""
    failed = [r for r in results if not r["ok"]]
    if failed:
        return {"ok": False, "error": failed[0]["error"]}
    ok = [r for r in results if r["import_us"] is not None]
    imports = [r["import_us"] / 1000 for r in ok]
    middle = sorted(ok, key=lambda r: r["import_us"])[len(ok) // 2] if ok else {"by_package": []}
    return {"ok": True, "import_ms": statistics.median(imports) if imports else None,
            "import_ms_min": min(imports) if imports else None,
            "by_package_ms": middle["by_package"], "import_ms_runs": [round(x, 1) for x in imports],
            "process_wall_ms": statistics.median(r["wall_s"] for r in results) * 1000}


def zip_sizes(folder: Path) -> list[dict[str, Any]]:
    rows = []
    for path in sorted(folder.glob("*.zip")):
        with zipfile.ZipFile(path) as z:
            infos = z.infolist()
            rows.append({"zip": str(path.relative_to(ROOT)), "bytes": path.stat().st_size,
                         "unpacked_bytes": sum(i.file_size for i in infos), "files": len(infos)})
    return rows


def find_python312() -> str | None:
    """Lambda's python3.12 here, as the build finds it (``tools/loom_build/bytecode.py``), or None."""
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        from loom_build.bytecode import find_python
    finally:
        sys.path.remove(str(ROOT / "tools"))
    found = find_python("3.12", os.environ.get("LAMBDA_PYTHON") or None)
    return str(found) if found else None


def provided_libs(folder: Path, pythons: list[str]) -> Path:
    """boto3 and its closure as Lambda's runtime provides them (``loom_local.runtime_libs``), with bytecode
    for each of ``pythons`` (Lambda's runtime ships its boto3 compiled)."""
    from loom_local import runtime_libs

    target = runtime_libs.ensure(folder / "provided")
    for python in pythons:
        subprocess.run([python, "-I", "-m", "compileall", "-q", "-j", "0", str(target)], capture_output=True, check=False)
    return target


def _python_version(python: str) -> str:
    done = subprocess.run([python, "-I", "-c", "import platform; print(platform.python_version())"],
                          capture_output=True, text=True)
    return done.stdout.strip() or "?"


def zip_runs_to_measure(python312: str | None) -> list[dict[str, Any]]:
    """Which zips to import with which interpreter: the Lambda zips on a 3.12 first (when both exist)."""
    runs = []
    if python312 and list((ROOT / "dist" / "lambda").glob("*.zip")):
        runs.append({"dir": "dist/lambda", "python": python312})
    if list((ROOT / "dist" / "local").glob("*.zip")):
        runs.append({"dir": "dist/local", "python": sys.executable})
    return runs


def measure(runs: int = 5, progress: Callable[[str], None] = print) -> dict[str, Any]:
    """Every configuration once per round, ``runs`` rounds: load from other work on the machine then
    hits all configurations alike instead of whichever happened to run during it."""
    python312 = find_python312()
    out: dict[str, Any] = {"runs": runs, "python": sys.version.split()[0], "venv": {}, "zip_runs": [],
                           "zips": {"lambda": zip_sizes(ROOT / "dist" / "lambda"),
                                    "local": zip_sizes(ROOT / "dist" / "local")},
                           "python312": _python_version(python312) if python312 else None}
    if python312 is None:
        progress("  cold start: no CPython 3.12 here: the dist/lambda zips are not imported (dist/local only)")
    compile_sources()
    configs: list[tuple[str, str, str, str, str | list[str] | None, bool]] = []
    plan = zip_runs_to_measure(python312)
    with tempfile.TemporaryDirectory() as root:
        floors = Path(root) / "floor"
        floors.mkdir()
        libs = provided_libs(Path(root), sorted({r["python"] for r in plan}))
        for f, m in HANDLERS.items():
            configs += [("floor", "venv", f, floor_module(floors, f), str(floors), False), ("venv", "venv", f, m, None, False)]
        for i, run in enumerate(plan):
            key = f"{run['dir']} ({Path(run['python']).name} {_python_version(run['python'])})"
            entry = {"key": key, "dir": run["dir"], "python_version": _python_version(run["python"]), "functions": {}}
            out["zip_runs"].append(entry)
            for function, module in HANDLERS.items():
                archive = ROOT / run["dir"] / f"{function}.zip"
                if not archive.exists():
                    continue
                tree = Path(root) / f"{i}-{function}"
                with zipfile.ZipFile(archive) as z:
                    z.extractall(tree)
                    pycs = sum(1 for n in z.namelist() if n.endswith(".pyc"))
                entry["functions"][function] = {"zip": f"{run['dir']}/{function}.zip", "pycs": pycs}
                configs += [("floor", key, function, floor_module(floors, function), [str(floors), str(libs)], True),
                            ("zip", key, function, module, [str(tree), str(libs)], True),
                            ("libraries", key, function, libraries_module(floors, function),
                             [str(floors), str(tree), str(libs)], True)]
                if i == 0:  # the same tree without its bytecode: what a zip of sources pays
                    sources = Path(root) / f"{i}-{function}-sources"
                    shutil.copytree(tree, sources, ignore=shutil.ignore_patterns("__pycache__"))
                    configs.append(("sources", key, function, module, [str(sources), str(libs)], True))
            run["key"] = key
        samples: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
        python_of = {r["key"]: r["python"] for r in plan}
        for round_ in range(runs):
            for kind, where, function, module, path, isolated in configs:
                python = python_of.get(where, sys.executable)
                samples.setdefault((kind, where, function), []).append(
                    _import_once(python, module, path, isolated=isolated))
            progress(f"  cold start: round {round_ + 1} of {runs} ({len(configs)} imports)")
    floor_by_function = {f: summarize(samples[("floor", "venv", f)]) for f in HANDLERS}
    medians = [s["import_ms"] for s in floor_by_function.values() if s.get("ok") and s.get("import_ms") is not None]
    out["boto3_floor_ms"] = statistics.median(medians) if medians else None
    out["target_over_floor_ms"] = TARGET_OVER_FLOOR_MS
    for function in HANDLERS:
        results = samples[("venv", "venv", function)]
        floor = floor_by_function[function]
        out["venv"][function] = {
            "module": HANDLERS[function], **summarize(results), "clients": list(HANDLER_CLIENTS[function]),
            "floor_ms": floor.get("import_ms"), "floor_ms_runs": floor.get("import_ms_runs"),
            "over_floor_ms": over_floor_ms(results, samples[("floor", "venv", function)])}
    for entry in out["zip_runs"]:
        key = entry["key"]
        for function, row in entry["functions"].items():
            handler, floor = samples[("zip", key, function)], samples[("floor", key, function)]
            f = summarize(floor)
            row.update({"module": HANDLERS[function], **summarize(handler), "clients": list(HANDLER_CLIENTS[function]),
                        "floor_ms": f.get("import_ms"), "floor_ms_runs": f.get("import_ms_runs"),
                        "over_floor_ms": over_floor_ms(handler, floor)})
            if ("libraries", key, function) in samples:
                lib = samples[("libraries", key, function)]
                row["libraries_ms"] = summarize(lib).get("import_ms")
                row["libraries_over_floor_ms"] = over_floor_ms(lib, floor)
                row["own_ms"] = over_floor_ms(handler, lib)  # the libraries as the handler's floor
            if ("sources", key, function) in samples:
                src = samples[("sources", key, function)]
                row["sources_only_ms"] = summarize(src).get("import_ms")
                row["sources_only_over_floor_ms"] = over_floor_ms(src, floor)
    for entry in out["zip_runs"]:
        for function, r in entry["functions"].items():
            if r.get("ok"):
                over = r.get("over_floor_ms")
                progress(f"  cold start: {entry['key']} {function}: init {r['import_ms']:.0f} ms (min "
                         f"{r['import_ms_min']:.0f}), floor {r.get('floor_ms') or 0:.0f} ms, over it "
                         f"{over if over is not None else float('nan'):+.0f} ms"
                         + (f"; sources only {r['sources_only_ms']:.0f} ms" if r.get("sources_only_ms") else ""))
            else:
                progress(f"  cold start: {entry['key']} {function} does not import: {r.get('error')}")
    for function, r in out["venv"].items():
        if r["ok"]:
            progress(f"  cold start: dev venv {function}: {r['import_ms']:.0f} ms, over the floor "
                     f"{r['over_floor_ms'] if r.get('over_floor_ms') is not None else float('nan'):+.0f} ms")
        else:
            progress(f"  cold start: {r['module']} does not import in the dev venv: {r['error']}")
    return out
