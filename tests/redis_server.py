"""A real redis-server (Debian package ``redis-server``) on a free port, for the identity store tests.

Started with append-only persistence in a temporary folder, so :meth:`RedisServer.stop` then
:meth:`RedisServer.start` is a store that goes away and comes back with its data, as a persisting production
server does.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

import redis

START_TIMEOUT_S = 10.0


class RedisServer:
    """One redis-server process; ``url`` stays the same across restarts.

    Args:
        port: TCP port (from the ``free_port`` fixture).
        folder: its data folder (append-only file).
    """

    def __init__(self, port: int, folder: Path) -> None:
        self.port, self.folder = port, folder
        self.url = f"redis://127.0.0.1:{port}/0"
        self.proc: subprocess.Popen | None = None

    def start(self) -> "RedisServer":
        """Start the server and wait until it answers PING."""
        exe = shutil.which("redis-server")
        if exe is None:
            raise RuntimeError("redis-server not installed (Debian package redis-server; scripts/test.sh)")
        self.folder.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen(
            [exe, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.folder), "--appendonly", "yes",
             "--appendfsync", "always", "--save", "", "--daemonize", "no", "--loglevel", "warning"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        client = redis.Redis.from_url(self.url, socket_timeout=1.0)
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            try:
                client.ping()
                return self
            except redis.ConnectionError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"redis-server on port {self.port} did not start") from None
                time.sleep(0.05)
            finally:
                client.close()

    def stop(self) -> None:
        """Stop the server (SIGTERM: it flushes its append-only file) and wait for it to exit."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=10)
        self.proc = None
