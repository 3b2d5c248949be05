"""The shared Lambda test harness's fixtures (packages/test-support)."""

from loom_test_support.lambda_harness import clock, lambdas, logs, world  # noqa: F401
