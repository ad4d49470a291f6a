"""An ASGI app served for real by uvicorn on 127.0.0.1 (a free port, in a thread) for the tests that
talk to `lmlab serve`'s API over HTTP."""

import threading
import time
from contextlib import contextmanager

import uvicorn


@contextmanager
def served(app, timeout: float = 30.0):
    """Serve `app` until the block ends; yields its base URL (http://127.0.0.1:PORT)."""
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + timeout
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the test server did not start")
        time.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout)
