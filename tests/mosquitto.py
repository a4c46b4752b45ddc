"""A real Mosquitto MQTT broker for tests: started on a free loopback port with a generated config, killed and
started again on the same port and data folder, stopped at the end (Debian package ``mosquitto``; scripts/test.sh
installs it). Also a subscriber that records what the broker delivers.
"""

from __future__ import annotations

import getpass
import json
import shutil
import socket
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import paho.mqtt.client as mqtt
import pytest

START_TIMEOUT_S = 20.0


@dataclass(frozen=True)
class TlsFiles:
    """PEM files of a test CA and of a server certificate it signed for 127.0.0.1."""

    ca: Path
    cert: Path
    key: Path


def make_tls_files(folder: Path) -> TlsFiles:
    """A throw-away CA and a server certificate for IP 127.0.0.1 (P-256 keys, valid one day), made with openssl."""
    folder.mkdir(parents=True, exist_ok=True)
    ca, ca_key, cert, key, csr = (folder / name for name in ("ca.pem", "ca.key", "server.pem", "server.key", "s.csr"))
    ext = folder / "san.ext"
    ext.write_text("subjectAltName=IP:127.0.0.1\n")
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    for args in (
        ["req", "-x509", *ec, "-days", "1", "-subj", "/CN=vcascade-test-ca", "-keyout", ca_key, "-out", ca],
        ["req", *ec, "-subj", "/CN=127.0.0.1", "-keyout", key, "-out", csr],
        ["x509", "-req", "-in", csr, "-CA", ca, "-CAkey", ca_key, "-CAcreateserial", "-days", "1", "-out", cert,
         "-extfile", ext],
    ):  # fmt: skip
        subprocess.run(["openssl", *map(str, args)], check=True, capture_output=True)
    return TlsFiles(ca, cert, key)


class Mosquitto:
    """One ``mosquitto`` process under test control.

    Args:
        folder: where the config, password file, persistence database and log go.
        port: the loopback port to listen on.
        users: ``{user: password}``; when given, anonymous clients are refused.
        persistent: keep sessions and queued QoS 1 messages in a database saved on every change, so that a
            subscriber's session survives :meth:`kill` (a broker as production runs it).
        tls: serve TLS only, with this certificate (:func:`make_tls_files`).
    """

    def __init__(self, folder: Path, port: int, users: dict[str, str] | None = None, persistent: bool = False,
                 tls: TlsFiles | None = None) -> None:  # fmt: skip
        exe = shutil.which("mosquitto") or next(
            (p for p in ("/usr/sbin/mosquitto", "/usr/local/sbin/mosquitto") if Path(p).is_file()), None
        )
        if exe is None:
            pytest.fail("mosquitto not found (apt-get install mosquitto; scripts/test.sh installs it)")
        self.exe, self.folder, self.port = exe, folder, port
        folder.mkdir(parents=True, exist_ok=True)
        lines = [f"listener {port} 127.0.0.1", f"user {getpass.getuser()}", f"log_dest file {folder / 'mosquitto.log'}"]
        if tls is not None:
            lines += [f"cafile {tls.ca}", f"certfile {tls.cert}", f"keyfile {tls.key}"]
        if users:
            passwords = folder / "passwords"
            passwords.write_text("".join(f"{user}:{password}\n" for user, password in users.items()))
            subprocess.run(["mosquitto_passwd", "-U", str(passwords)], check=True, capture_output=True)
            lines += ["allow_anonymous false", f"password_file {passwords}"]
        else:
            lines += ["allow_anonymous true"]
        if persistent:
            lines += ["persistence true", f"persistence_location {folder}/", "autosave_interval 1",
                      "autosave_on_changes true", "max_queued_messages 100000"]  # fmt: skip
        self.config = folder / "mosquitto.conf"
        self.config.write_text("\n".join(lines) + "\n")
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Mosquitto:
        """Start the broker and wait until its port accepts connections."""
        self.proc = subprocess.Popen([self.exe, "-c", str(self.config)], stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE)  # fmt: skip
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if self.proc.poll() is not None:
                pytest.fail(f"mosquitto exited with {self.proc.returncode}: {self.proc.stderr.read().decode()}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1.0):
                    return self
            except OSError:
                if time.monotonic() > deadline:
                    pytest.fail(f"mosquitto did not listen on {self.port} within {START_TIMEOUT_S} s")
                time.sleep(0.05)  # the port is polled: mosquitto has no readiness signal

    def kill(self) -> None:
        """SIGKILL: connections drop without a goodbye, as when the host dies."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def stop(self) -> None:
        """SIGTERM, then wait."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


class Subscriber:
    """A paho client subscribed (QoS 1) to ``topic_filter``, recording ``(topic, record)`` in arrival order.

    With ``client_id`` set it keeps a persistent session (clean_session False), so a persistent broker queues
    messages for it while either side is away.
    """

    def __init__(self, port: int, topic_filter: str, client_id: str = "", username: str | None = None,
                 password: str | None = None, ca_file: Path | None = None) -> None:  # fmt: skip
        self.messages: list[tuple[str, dict[str, Any]]] = []
        self.subscribed = threading.Event()
        self._cond = threading.Condition()
        self._filter = topic_filter
        self.client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=client_id,
                                  clean_session=not client_id)  # fmt: skip
        if username is not None:
            self.client.username_pw_set(username, password)
        if ca_file is not None:
            self.client.tls_set(ca_certs=str(ca_file))
        self.client.reconnect_delay_set(0.1, 1)  # type: ignore[arg-type]
        self.client.on_connect = lambda c, u, f, rc, p: c.subscribe(self._filter, qos=1)
        self.client.on_subscribe = lambda c, u, mid, rcs, p: self.subscribed.set()
        self.client.on_message = self._on_message
        self.client.connect_async("127.0.0.1", port, 30)
        self.client.loop_start()

    def _on_message(self, client: mqtt.Client, userdata: Any, message: mqtt.MQTTMessage) -> None:
        with self._cond:
            self.messages.append((message.topic, json.loads(message.payload)))
            self._cond.notify_all()

    def wait_for(self, predicate, timeout_s: float = 30.0) -> bool:
        """Wait until ``predicate(messages)`` holds (True) or ``timeout_s`` passes (False)."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while not predicate(self.messages):
                left_s = deadline - time.monotonic()
                if left_s <= 0:
                    return False
                self._cond.wait(left_s)
            return True

    def close(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()
