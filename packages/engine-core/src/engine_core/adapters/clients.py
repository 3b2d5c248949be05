"""The boto3 clients Loom's functions create, from one session whose loader knows only Loom's services.

Creating a client, botocore first checks that the service exists by listing every service it ships: each
of its 400-odd model folders, once for the service model and once for the endpoint rules. That scan is
about a fifth of the time two clients take at a cold start, and its answer is only used to refuse a
name botocore does not know. Loom creates clients for three services, so its session's loader lists those
three (each still looked up where botocore's own loader looks, ``AWS_DATA_PATH`` included); everything
else about the clients is boto3's own. Code in a workflow that calls ``boto3.client`` gets boto3's
default session, untouched.
"""

from __future__ import annotations

import os
from types import FunctionType
from typing import Any

import boto3
import botocore.handlers
import botocore.session
from botocore.exceptions import DataNotFoundError
from botocore.loaders import Loader

SERVICES = ("dynamodb", "sqs", "events")
"""Every service Loom's functions make a client for: the store's, the step queue's, the status events'."""


class ServicesLoader(Loader):
    """botocore's loader, listing only ``services`` (those of them botocore has data for)."""

    def __init__(self, services: tuple[str, ...], **kwargs: Any):
        super().__init__(**kwargs)
        self.services = services

    def list_available_services(self, type_name: str) -> list[str]:
        available = []
        for name in self.services:
            try:
                self.list_api_versions(name, type_name)
            except DataNotFoundError:
                continue
            available.append(name)
        return available


def _data_paths(core: botocore.session.Session) -> list[str]:
    """``AWS_DATA_PATH``'s folders (or the config file's ``data_path``), read as botocore reads them."""
    value = core.get_config_variable("data_path")
    return [os.path.expanduser(os.path.expandvars(path)) for path in value.split(os.pathsep)] if value else []


def new_session() -> boto3.session.Session:
    """A boto3 session over a botocore session whose data loader is a :class:`ServicesLoader`."""
    core = botocore.session.get_session()
    core.register_component("data_loader", ServicesLoader(SERVICES, extra_search_paths=_data_paths(core)))
    return boto3.session.Session(botocore_session=core)


_made: tuple[Any, int, boto3.session.Session] | None = None
"""The session, with boto3's default session and the count of botocore's built-in handlers when it was made."""


def session() -> boto3.session.Session:
    """Loom's session, shared by its clients. Made again whenever boto3's default session was replaced or
    botocore gained a built-in handler since (a test double such as moto does both), so Loom's clients
    behave as clients from boto3's default session would."""
    global _made
    default, handlers = boto3.DEFAULT_SESSION, len(botocore.handlers.BUILTIN_HANDLERS)
    if _made is None or _made[0] is not default or _made[1] != handlers:
        _made = (default, handlers, new_session())
    return _made[2]


def client(service: str, config: Any = None) -> Any:
    """A boto3 client for one of :data:`SERVICES`, with ``config`` (a ``botocore.config.Config``). When
    ``boto3.client`` has been replaced (a test's double: ``unittest.mock.patch("boto3.client")``), the client is
    the replacement's, as it would be for code that calls ``boto3.client`` itself."""
    if service not in SERVICES:
        raise ValueError(f"{service!r} is not a service Loom's clients are made for ({', '.join(SERVICES)}); "
                         "add it to engine_core.adapters.clients.SERVICES, or use boto3.client for it")
    if not _is_boto3s(boto3.client):
        return boto3.client(service, config=config)
    return session().client(service, config=config)


def _is_boto3s(fn: Any) -> bool:
    """Whether ``fn`` is boto3's own ``boto3.client`` (a plain function of the ``boto3`` module)."""
    return type(fn) is FunctionType and fn.__module__ == "boto3" and fn.__name__ == "client"


__all__ = ["SERVICES", "ServicesLoader", "client", "new_session", "session"]
