"""A pytest plugin (pytest.ini loads it): test reports that pytest-xdist can send between processes.

Some suites feed lone surrogates ("\\ud800") through the engine on purpose, and the engine logs them.
A test's captured output travels with its report, and pytest-xdist's channel encodes text as strict
UTF-8, so one such log line would stop the whole run with an INTERNALERROR. Before the report leaves
the worker, its captured sections and text are made encodable (``\\ud800`` written as an escape); the
test's outcome is untouched.
"""

from __future__ import annotations

import pytest


def _encodable(text: str) -> str:
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    report.sections = [(_encodable(title), _encodable(body)) for title, body in report.sections]
    if isinstance(report.longrepr, str):
        report.longrepr = _encodable(report.longrepr)
