"""Cold start: import time of each Lambda handler module and each deployment zip's size.

Each import runs in a clean subprocess, ``python -X importtime -c "import <module>"``, with the
environment a function gets (LOOM_*, POWERTOOLS_*, a region and dummy credentials: the handlers build
their boto3 clients at import, which needs no network). The figure is the cumulative time of the
top-level import line, median of several runs. ``-X importtime`` itself adds a little overhead, so
the process wall time (interpreter start included) is reported beside it.

Two interpreters: the dev venv (editable installs, this machine's Python; their sources compiled
ahead, so the column measures importing, not compiling), and, when ``dist/local/*.zip`` exists, the
unpacked zip on the same Python with ``-I`` (isolated: no site-packages, nothing but the zip's own
tree), which is what the local runtime loads.

The floor, measured the same way in the same rounds: a module that only imports boto3 and creates the
clients the handler creates (``HANDLER_CLIENTS``, with the handlers' client configuration). Issue 15's
target is each handler within ``TARGET_OVER_FLOOR_MS`` of it, the median of the per-round differences
(each round measures the floor and every handler back to back, so load hits both alike).
"""

from __future__ import annotations

import os
import re
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


def _import_once(python: str, module: str, extra_path: str | None, isolated: bool,
                 write_bytecode: bool = False) -> dict[str, Any]:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": os.environ.get("HOME", "/tmp"), **FUNCTION_ENV}
    if write_bytecode:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
    code = f"import {module}"
    if extra_path:
        code = f"import sys; sys.path.insert(0, {extra_path!r}); import {module}"
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


def _function_of(zip_name: str) -> str | None:
    for function in HANDLERS:
        if function.replace("-", "_") in zip_name.replace("-", "_"):
            return function
    return None


def measure(runs: int = 5, progress: Callable[[str], None] = print) -> dict[str, Any]:
    """Every configuration once per round, ``runs`` rounds: load from other work on the machine then
    hits all configurations alike instead of whichever happened to run during it."""
    out: dict[str, Any] = {"runs": runs, "python": sys.version.split()[0], "venv": {}, "local_zip": {},
                           "zips": {"lambda": zip_sizes(ROOT / "dist" / "lambda"),
                                    "local": zip_sizes(ROOT / "dist" / "local")}}
    compile_sources()
    configs: list[tuple[str, str, str, str | None, bool]] = []
    with tempfile.TemporaryDirectory() as root:
        floors = Path(root) / "floor"
        floors.mkdir()
        for f, m in HANDLERS.items():
            configs += [("floor", f, floor_module(floors, f), str(floors), False), ("venv", f, m, None, False)]
        for row in out["zips"]["local"]:
            function = _function_of(Path(row["zip"]).stem)
            if function is None:
                continue
            sources, compiled = Path(root) / f"{function}-src", Path(root) / f"{function}-pyc"
            for target in (sources, compiled):
                with zipfile.ZipFile(ROOT / row["zip"]) as z:
                    z.extractall(target)
            # The zips ship sources only, so every cold start compiles them; the same tree with bytecode
            # compiled ahead is what shipping __pycache__ in the zip would give.
            subprocess.run([sys.executable, "-m", "compileall", "-q", "-j", "0", str(compiled)],
                           capture_output=True, check=False)
            configs += [("zip", function, HANDLERS[function], str(sources), True),
                        ("zip-pyc", function, HANDLERS[function], str(compiled), True)]
            out["local_zip"][function] = {"zip": row["zip"]}
        samples: dict[tuple[str, str], list[dict[str, Any]]] = {}
        for round_ in range(runs):
            for kind, function, module, path, isolated in configs:
                samples.setdefault((kind, function), []).append(
                    _import_once(sys.executable, module, path, isolated=isolated))
            progress(f"  cold start: round {round_ + 1} of {runs} ({len(configs)} imports)")
    floor_by_function = {f: summarize(samples[("floor", f)]) for f in HANDLERS}
    medians = [s["import_ms"] for s in floor_by_function.values() if s.get("ok") and s.get("import_ms") is not None]
    out["boto3_floor_ms"] = statistics.median(medians) if medians else None
    out["target_over_floor_ms"] = TARGET_OVER_FLOOR_MS
    for (kind, function), results in samples.items():
        summary = summarize(results)
        if kind == "floor":
            continue
        if kind == "venv":
            floor = floor_by_function[function]
            out["venv"][function] = {
                "module": HANDLERS[function], **summary, "clients": list(HANDLER_CLIENTS[function]),
                "floor_ms": floor.get("import_ms"), "floor_ms_runs": floor.get("import_ms_runs"),
                "over_floor_ms": over_floor_ms(results, samples[("floor", function)])}
        elif kind == "zip":
            out["local_zip"][function].update(summary)
        else:
            out["local_zip"][function]["precompiled_import_ms"] = summary.get("import_ms")
            out["local_zip"][function]["precompiled_import_ms_min"] = summary.get("import_ms_min")
            out["local_zip"][function]["precompiled_over_floor_ms"] = over_floor_ms(results, samples[("floor", function)])
    for function, r in out["venv"].items():
        z = out["local_zip"].get(function, {})
        if r["ok"]:
            over = r.get("over_floor_ms")
            progress(f"  cold start: {r['module']}: venv {r['import_ms']:.0f} ms (min {r['import_ms_min']:.0f}), floor "
                     f"{r.get('floor_ms') or 0:.0f} ms, over it {over if over is not None else float('nan'):.0f} ms; "
                     + (f"zip {z['import_ms']:.0f} ms, with bytecode {z.get('precompiled_import_ms') or 0:.0f} ms"
                        if z.get("ok") else "no zip"))
        else:
            progress(f"  cold start: {r['module']} does not import: {r['error']}")
    return out
