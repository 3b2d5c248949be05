"""The control plane's HTTP transport and its error under their earlier names, for code written against
them (``Client.create(url).request(method, path, body) -> (status, document)``, raising ``ApiError`` with
``status`` and ``code``): the local runtime's demo and the end-to-end harness. New code uses
:class:`loom_cli.sdk.LoomClient` and :class:`loom_cli.sdk.LoomError`."""

from __future__ import annotations

from .sdk.errors import LoomError as ApiError
from .sdk.transport import Transport as Client

__all__ = ["ApiError", "Client"]
