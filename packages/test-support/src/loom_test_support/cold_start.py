"""A handler's cold start in a fresh process: what its import leaves behind, for the handlers' cold-start tests."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

FUNCTION_ENV = {
    "LOOM_TABLE_NAME": "loom-test", "LOOM_QUEUE_URL": "https://sqs.us-east-1.amazonaws.com/123456789012/loom-steps",
    "POWERTOOLS_SERVICE_NAME": "loom-test", "POWERTOOLS_METRICS_NAMESPACE": "LoomTest", "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
}
"""A function's environment as the Terraform module sets it, with dummy credentials (nothing is called)."""


def run_fresh(code: str, **env: str) -> Any:
    """Run ``code`` (which prints one JSON document last) in a fresh interpreter with :data:`FUNCTION_ENV` and
    ``env`` in place of this process's LOOM_* and AWS_* variables; the document."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("LOOM_", "AWS_"))}
    done = subprocess.run([sys.executable, "-c", code], env={**clean, **FUNCTION_ENV, **env},
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)
