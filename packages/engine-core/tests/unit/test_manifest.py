"""``python -m engine_core.manifest``: what a worker zip would deploy, read from the zip's own workflow packages."""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile

MODULE = '''
from engine_core import workflow

def a(ctx):
    return {}

def b(ctx):
    return {}

@workflow("zipped_orders")
class One:
    steps = [a]

@workflow("zipped_orders", version=2)
class Two:
    steps = [a, b]
'''


def test_manifest_of_a_worker_zip_lists_each_workflow_version_it_carries_with_its_fingerprint(tmp_path):
    # given: a zip carrying one workflow package (its module and its dist-info's entry point)
    worker = tmp_path / "worker.zip"
    with zipfile.ZipFile(worker, "w") as z:
        z.writestr("zipped_flows/__init__.py", MODULE)
        z.writestr("zipped_flows-1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: zipped-flows\nVersion: 1.0\n")
        z.writestr("zipped_flows-1.0.dist-info/entry_points.txt", "[loom.workflows]\nzipped = zipped_flows\n")
    out = tmp_path / "workflows.json"
    # when: run as the build runs it (a fresh interpreter: only what the zip carries is registered)
    done = subprocess.run([sys.executable, "-m", "engine_core.manifest", "--zip", str(worker), "--out", str(out)],
                          capture_output=True, text=True, timeout=120)
    # then
    assert done.returncode == 0, done.stderr
    workflows = json.loads(out.read_text())["workflows"]
    assert list(workflows) == ["zipped_orders"] and sorted(workflows["zipped_orders"]) == ["1", "2"]
    assert workflows["zipped_orders"]["1"] != workflows["zipped_orders"]["2"]


def test_manifest_of_a_missing_zip_says_to_build_it(tmp_path):
    done = subprocess.run([sys.executable, "-m", "engine_core.manifest", "--zip", str(tmp_path / "none.zip")],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "build it first" in done.stderr


def test_manifest_help_says_the_whole_first_paragraph_of_what_it_does():
    done = subprocess.run([sys.executable, "-m", "engine_core.manifest", "--help"], capture_output=True, text=True,
                          timeout=120)
    text = " ".join(done.stdout.split())
    assert done.returncode == 0 and "read from a worker zip (or this environment), for `loom versions check`" in text
