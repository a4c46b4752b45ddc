"""A real PostgreSQL server (Debian package ``postgresql``) on a free port, for the history store tests.

``initdb`` and ``postgres`` refuse to run as root: as root, the server runs as the ``postgres`` user in a folder
of its own under the system's temporary folder (the test's own folder is private to root). Trust authentication
on 127.0.0.1 only; ``fsync`` off (a test server).
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import psycopg

START_TIMEOUT_S = 60.0
USER = "vcascade"
DATABASE = "history"


def _binary(name: str) -> str:
    found = shutil.which(name) or next(iter(sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"), reverse=True)), None)
    if found is None:
        raise RuntimeError(f"{name} not installed (Debian package postgresql; scripts/test.sh)")
    return found


class PostgresServer:
    """One ``postgres`` process with a database ``history``; ``url`` stays the same across restarts."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.folder = Path(tempfile.mkdtemp(prefix="vcascade-pg-"))
        self.url = f"postgresql://{USER}@127.0.0.1:{port}/{DATABASE}"
        self.proc: subprocess.Popen | None = None
        self._as = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        if self._as:
            shutil.chown(self.folder, "postgres", "postgres")
        subprocess.run([*self._as, _binary("initdb"), "-D", str(self.folder / "data"), "-U", USER, "-A", "trust",
                        "--no-sync", "-E", "UTF8"], check=True, capture_output=True, timeout=120)

    def start(self) -> "PostgresServer":
        """Start the server, wait until it answers, create the database once."""
        self.proc = subprocess.Popen(
            [*self._as, _binary("postgres"), "-D", str(self.folder / "data"), "-p", str(self.port),
             "-c", "listen_addresses=127.0.0.1", "-c", f"unix_socket_directories={self.folder}", "-c", "fsync=off",
             "-c", "max_connections=20", "-c", "shared_buffers=16MB"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + START_TIMEOUT_S
        admin = f"postgresql://{USER}@127.0.0.1:{self.port}/postgres"
        while True:
            try:
                with psycopg.connect(admin, autocommit=True, connect_timeout=2) as conn:
                    if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [DATABASE]).fetchone() is None:
                        conn.execute(f"CREATE DATABASE {DATABASE}")
                return self
            except psycopg.OperationalError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"postgres on port {self.port} did not start") from None
                time.sleep(0.1)

    def stop(self) -> None:
        """Stop the server (``pg_ctl stop -m fast``: open connections are closed) and wait for it to exit."""
        if self.proc is not None and self.proc.poll() is None:
            subprocess.run([*self._as, _binary("pg_ctl"), "stop", "-D", str(self.folder / "data"), "-m", "fast",
                            "-w", "-t", "30"], capture_output=True, timeout=60, check=False)
            self.proc.wait(timeout=30)
        self.proc = None

    def remove(self) -> None:
        self.stop()
        shutil.rmtree(self.folder, ignore_errors=True)
