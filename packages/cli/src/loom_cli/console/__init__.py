"""``loom console``: a web console on 127.0.0.1 over the control plane's API (see ``server.py``)."""

from __future__ import annotations

import signal
import sys
import threading
import webbrowser

from ..sdk import LoomClient, LoomError
from ..sdk.errors import CONFIGURATION
from .server import Console

__all__ = ["Console", "serve"]


def serve(client: LoomClient, port: int = 0, open_browser: bool = False, interval_s: float = 1.0) -> int:
    """Serve the console until Ctrl-C (or SIGTERM); prints its URL first (and opens it with ``open_browser``)."""
    try:
        console = Console(client, port=port, interval_s=interval_s)
    except OSError as exc:
        raise LoomError(CONFIGURATION, f"cannot listen on 127.0.0.1:{port}: {exc.strerror}") from None
    if threading.current_thread() is threading.main_thread():
        # A shell starts a background job with SIGINT ignored, and the child inherits that: take Ctrl-C
        # (and a plain kill) back, so the console always stops when told to.
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, signal.default_int_handler)
    signed = "SigV4-signed" if client.signed else "unsigned"
    try:
        print(f"loom console: {console.url}  (API {client.url}, {signed}; Ctrl-C stops it)", flush=True)
        if open_browser:
            webbrowser.open(console.url)
        console.httpd.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        print("loom console: stopped", file=sys.stderr)
    finally:
        console.stopping.set()
        console.httpd.server_close()
    return 0
