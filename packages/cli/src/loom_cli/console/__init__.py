"""``loom console``: a web console on 127.0.0.1 over the control plane's API (see ``server.py``)."""

from __future__ import annotations

import sys
import webbrowser

from ..client import Client
from .server import Console

__all__ = ["Console", "serve"]


def serve(client: Client, port: int = 0, open_browser: bool = False, interval_s: float = 1.0) -> int:
    """Serve the console until Ctrl-C; prints its URL first (and opens it with ``open_browser``)."""
    try:
        console = Console(client, port=port, interval_s=interval_s)
    except OSError as exc:
        from ..client import CliError

        raise CliError(f"cannot listen on 127.0.0.1:{port}: {exc.strerror}", 2) from None
    signed = "SigV4-signed" if client.sign else "unsigned"
    print(f"loom console: {console.url}  (API {client.url}, {signed}; Ctrl-C stops it)", flush=True)
    if open_browser:
        webbrowser.open(console.url)
    try:
        console.httpd.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        print("loom console: stopped", file=sys.stderr)
    finally:
        console.stopping.set()
        console.httpd.server_close()
    return 0
