"""Loom worker Lambda. Handler: ``loom_worker.handler.handler`` (SQS, partial batch responses)."""
