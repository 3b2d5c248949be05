"""What the worker's cold start imports: not Powertools' batch utility (the partial batch response is
``engine_core.adapters.sqs_records.answer_batch``), so neither asyncio nor every event source's data class."""

from __future__ import annotations

from loom_test_support.cold_start import run_fresh

COLD_START = "import json, sys; import loom_worker.handler; print(json.dumps(sorted(sys.modules)))"


def test_a_cold_start_imports_neither_the_batch_utility_nor_asyncio():
    # when: the handler module is imported in a fresh process with a function's environment
    modules = set(run_fresh(COLD_START))
    # then
    assert "loom_worker.handler" in modules and "engine_core.adapters.sqs_records" in modules
    assert not {m for m in modules if m.startswith(("aws_lambda_powertools.utilities.batch",
                                                     "aws_lambda_powertools.utilities.data_classes"))}
    assert "asyncio" not in modules
