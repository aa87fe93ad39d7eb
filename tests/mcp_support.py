"""Starting ``hopmem mcp --http`` for a test: a free loopback port, the server process, and its teardown."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def mcp_command(*args: str) -> list[str]:
    """``hopmem mcp`` with ``args``, run by this interpreter."""
    return [sys.executable, "-m", "hopmem.cli", "mcp", *args]


@contextmanager
def serving_http(*args: str, timeout: float = 60.0) -> Iterator[int]:
    """``hopmem mcp --http --port PORT *args`` until the block ends; yields PORT once it listens."""
    port = free_port()
    proc = subprocess.Popen(mcp_command("--http", "--port", str(port), *args),
                            env={**os.environ, "OPENBLAS_NUM_THREADS": "1"}, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                assert proc.poll() is None, f"the server exited: {proc.stderr.read() if proc.stderr else ''}"
                assert time.monotonic() < deadline, "the server did not start listening"
                time.sleep(0.1)
        yield port
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:  # pragma: no cover
            proc.kill()
            proc.wait()
        if proc.stderr is not None:
            proc.stderr.close()
