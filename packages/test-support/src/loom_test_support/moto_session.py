"""moto's ``mock_aws`` with one boto3 session per test process instead of one per test.

moto clears boto3's default session each time a mock starts, so every test that makes a client (or
cold-starts a handler, which makes its clients at import) builds a new session, and a new session parses
botocore's endpoint and service JSON again: about a tenth of a CPU-second per test, half a minute over
the package tests. :func:`mock_aws` makes that session once, after moto is imported (so moto's stubber
is among its handlers and none of its calls leaves the process), and installs it as boto3's default
session while each mock runs, as moto installs a fresh one. The backends are still reset per mock.

Inside a mock moto sets the access key (``FOOBARKEY``), so the credentials the session keeps from its
first client are the ones every later test would resolve too.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from unittest import mock

import boto3
import moto

_session: boto3.Session | None = None
FAKE_CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_SESSION_TOKEN": "testing",
                    "AWS_DEFAULT_REGION": "us-east-1"}


def fake_credentials(monkeypatch) -> None:
    """Credentials and a region for an in-process moto, set for one test (``monkeypatch``)."""
    for name, value in FAKE_CREDENTIALS.items():
        monkeypatch.setenv(name, value)


@contextmanager
def mock_aws() -> Iterator[None]:
    global _session
    with moto.mock_aws(config={"core": {"reset_boto3_session": False}}):
        if _session is None:
            _session = boto3.Session()
        with mock.patch("boto3.DEFAULT_SESSION", _session):
            yield
