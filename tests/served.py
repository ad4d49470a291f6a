"""Servers for the tests that talk to `lmlab serve`'s API over HTTP, on 127.0.0.1 at a free port: an
ASGI app served by uvicorn in a thread (`served`), or the `lmlab serve` command itself in a process
(`lmlab_serve`)."""

import os
import socket
import subprocess
import sys
import threading
import time
from contextlib import contextmanager

import httpx
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


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def lmlab_serve(args: list, env: dict | None = None, timeout: float = 60.0):
    """`lmlab serve ARGS --port P` in a process, until the block ends (then Ctrl-C's signal, or a kill
    past 20 s); yields P once /health answers. `env` is added to the environment."""
    port = free_port()
    process = subprocess.Popen([sys.executable, "-m", "lmlab.cli.main", "serve", *map(str, args), "--port", str(port)],
                               env={**os.environ, **(env or {})}, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + timeout
    try:
        while True:
            assert process.poll() is None, process.stderr.read().decode()[-2000:]
            assert time.monotonic() < deadline, f"lmlab serve did not start within {timeout:g} s"
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.2)
        yield port
    finally:
        process.terminate()
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
