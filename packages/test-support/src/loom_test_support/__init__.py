"""Test support shared by the Lambda packages' suites; never part of a Lambda zip.

``loom_test_support.lambda_harness`` drives the handlers the way AWS does, on moto, from the event
files in ``tests/events/``. A package's ``tests/conftest.py`` imports its fixtures::

    from loom_test_support.lambda_harness import clock, lambdas, logs, world  # noqa: F401
"""
