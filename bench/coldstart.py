"""Cold start: import time of each Lambda handler module and each deployment zip's size.

Each import runs in a clean subprocess, ``python -X importtime -c "import <module>"``, with the
environment a function gets (LOOM_*, POWERTOOLS_*, a region and dummy credentials: the handlers build
their boto3 clients at import, which needs no network). The figure is the cumulative time of the
top-level import line, median of several runs. ``-X importtime`` itself adds a little overhead, so
the process wall time (interpreter start included) is reported beside it.

Two interpreters: the dev venv (editable installs, this machine's Python), and, when
``dist/local/*.zip`` exists, the unpacked zip on the same Python with ``-I`` (isolated: no
site-packages, nothing but the zip's own tree), which is what the local runtime loads.
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
    args = [python] + (["-I"] if isolated else []) + ["-X", "importtime", "-c", code]
    started = time.perf_counter()
    proc = subprocess.run(args, env=env, capture_output=True, text=True, cwd=tempfile.gettempdir(), timeout=120)
    wall = time.perf_counter() - started
    if proc.returncode != 0:
        tail = proc.stderr.strip().splitlines()[-1:] or ["?"]
        return {"ok": False, "error": tail[0]}
    return {"ok": True, "import_us": top_level_cumulative_us(proc.stderr, module), "wall_s": wall,
            "by_package": self_time_by_package(proc.stderr)}


def import_times(python: str, module: str, runs: int, extra_path: str | None = None,
                 isolated: bool = False, write_bytecode: bool = False) -> dict[str, Any]:
    results = [_import_once(python, module, extra_path, isolated, write_bytecode) for _ in range(runs)]
    failed = [r for r in results if not r["ok"]]
    if failed:
        return {"ok": False, "error": failed[0]["error"]}
    imports = [r["import_us"] / 1000 for r in results if r["import_us"] is not None]
    middle = sorted(results, key=lambda r: r["import_us"] or 0)[len(results) // 2]
    return {"ok": True, "import_ms": statistics.median(imports) if imports else None,
            "by_package_ms": middle["by_package"],
            "import_ms_runs": [round(x, 1) for x in imports],
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


def measure(runs: int = 7, progress: Callable[[str], None] = print) -> dict[str, Any]:
    out: dict[str, Any] = {"runs": runs, "python": sys.version.split()[0], "venv": {}, "local_zip": {},
                           "zips": {"lambda": zip_sizes(ROOT / "dist" / "lambda"),
                                    "local": zip_sizes(ROOT / "dist" / "local")}}
    for function, module in HANDLERS.items():
        result = import_times(sys.executable, module, runs)
        out["venv"][function] = {"module": module, **result}
        if result["ok"]:
            progress(f"  cold start: {module} imports in {result['import_ms']:.0f} ms (venv, median of {runs})")
        else:
            progress(f"  cold start: {module} does not import: {result['error']}")
    for row in out["zips"]["local"]:
        function = _function_of(Path(row["zip"]).stem)
        if function is None:
            continue
        with tempfile.TemporaryDirectory() as tmp:
            with zipfile.ZipFile(ROOT / row["zip"]) as z:
                z.extractall(tmp)
            result = import_times(sys.executable, HANDLERS[function], runs, extra_path=tmp, isolated=True)
            # The zips ship sources only, so every cold start compiles them. The same tree with
            # bytecode compiled ahead (what shipping __pycache__ in the zip would give):
            subprocess.run([sys.executable, "-m", "compileall", "-q", "-j", "0", tmp], capture_output=True, check=False)
            compiled = import_times(sys.executable, HANDLERS[function], runs, extra_path=tmp, isolated=True,
                                    write_bytecode=False)
        out["local_zip"][function] = {"zip": row["zip"], **result,
                                      "precompiled_import_ms": compiled.get("import_ms")}
        if result["ok"]:
            progress(f"  cold start: {row['zip']} imports {HANDLERS[function]} in {result['import_ms']:.0f} ms "
                     f"({compiled.get('import_ms') or float('nan'):.0f} ms with bytecode compiled ahead)")
        else:
            progress(f"  cold start: {row['zip']}: {result['error']}")
    return out
