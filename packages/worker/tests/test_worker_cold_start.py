"""What the worker's cold start imports: not Powertools' batch utility (the partial batch response is
``engine_core.adapters.sqs_records.answer_batch``), so neither asyncio nor every event source's data class."""

from __future__ import annotations

import json
import os
import subprocess
import sys

COLD_START = "import json, sys; import loom_worker.handler; print(json.dumps(sorted(sys.modules)))"
FUNCTION_ENV = {
    "LOOM_TABLE_NAME": "loom-test", "LOOM_QUEUE_URL": "https://sqs.us-east-1.amazonaws.com/123456789012/loom-steps",
    "POWERTOOLS_SERVICE_NAME": "loom-test", "POWERTOOLS_METRICS_NAMESPACE": "LoomTest", "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
}


def test_a_cold_start_imports_neither_the_batch_utility_nor_asyncio():
    # when: the handler module is imported in a fresh process with a function's environment
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("LOOM_", "AWS_"))}
    done = subprocess.run([sys.executable, "-c", COLD_START], env={**clean, **FUNCTION_ENV},
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    modules = set(json.loads(done.stdout))
    # then
    assert "loom_worker.handler" in modules and "engine_core.adapters.sqs_records" in modules
    assert not {m for m in modules if m.startswith(("aws_lambda_powertools.utilities.batch",
                                                     "aws_lambda_powertools.utilities.data_classes"))}
    assert "asyncio" not in modules
