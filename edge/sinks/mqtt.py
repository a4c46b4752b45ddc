"""The MQTT sink: each record published as JSON, QoS 1, to ``<topic_prefix>/<camera>/<kind>`` (paho-mqtt).

Follow one record: the queue's delivery thread (:mod:`vcascade.edge.sinks.queue`) hands it to :meth:`MqttSink.deliver`,
which waits until fewer than ``max_in_flight`` records are unacknowledged, then publishes it with QoS 1. paho keeps
the message until the broker's PUBACK arrives (MQTT 3.1.1, section 4.3.2), then :meth:`MqttSink._on_publish` settles
it as delivered. While the broker is away, paho's network thread reconnects with a doubling delay
(``reconnect_min_s`` .. ``reconnect_max_s``) and, once connected, sends every unacknowledged message again (DUP
flag set): at-least-once, so a subscriber may see a record twice and removes duplicates by ``event_id`` or
``roi_id``. Meanwhile new records wait in the sink's bounded queue (a full queue drops its oldest, counted).

A broker that refuses the connection (bad user name or password, not authorized) is named in the log and in the
sink's ``error`` (snapshot), counted in ``vcascade_edge_sink_attempts_failed_total{reason="not_authorized"}``, and
retried with the same backoff: the records wait, and are counted as ``queue_full`` or ``shutdown`` if it never
accepts.
"""

from __future__ import annotations

import logging
import os
import ssl
import threading
from typing import Any

import paho.mqtt.client as mqtt
import zmq

from vcascade.core.config import MqttSinkConfig
from vcascade.edge.sinks.queue import Entry, QueuedSink, SinkBooks, encoded

log = logging.getLogger(__name__)

QOS = 1
"""At-least-once: a record counts as delivered when the broker's PUBACK arrives."""
NO_CAMERA_TOPIC_LEVEL = "_"
"""Topic level used for a record without a ``camera`` (a deployment-wide record)."""
WAIT_SLICE_S = 3600.0
"""Longest single wait for room in the in-flight window, s (the wait ends earlier on any PUBACK or the drain
deadline)."""
AUTH_REASON_CODES = {134: "bad user name or password", 135: "not authorized"}
"""MQTT reason codes (MQTT 5.0 table 3.1; paho maps the 3.1.1 CONNACK codes 4 and 5 to them) of a refused login."""


def topic(prefix: str, record: dict[str, Any]) -> str:
    """The topic of ``record``: ``<prefix>/<camera>/<kind>`` (``kind`` defaults to ``result``; a record without a
    camera uses :data:`NO_CAMERA_TOPIC_LEVEL`). Camera names follow the config's name pattern, so they hold no
    ``/``, ``+`` or ``#``."""
    camera = str(record.get("camera") or NO_CAMERA_TOPIC_LEVEL)
    return f"{prefix}/{camera}/{record.get('kind') or 'result'}"


class MqttSink:
    """:class:`~vcascade.edge.sinks.queue.Delivery` backend publishing to one MQTT broker (QoS 1, MQTT 3.1.1).

    The connection starts in the background (paho's network thread): opening never fails because the broker is
    away; refused logins are reported as described in the module docstring.

    Args:
        cfg: the sink's configuration (``password`` and TLS files already resolved from ``${VAR}``).
        ctx: unused (the registry's common signature).
        edge: the edge's name (metric label, default client id).
        label: the sink's name in metrics and snapshots, e.g. ``mqtt[1]``.

    Raises:
        ssl.SSLError, OSError: a TLS file given in ``cfg`` cannot be loaded.
    """

    batch_max = 1
    batch_wait_s = 0.0

    def __init__(self, cfg: MqttSinkConfig, ctx: zmq.Context | None, edge: str = "", label: str = "mqtt") -> None:
        self.cfg, self.label = cfg, label
        self.books = SinkBooks(edge, label)
        self.connected = threading.Event()
        self._ledger: QueuedSink | None = None
        self._acks_lock = threading.Lock()
        self._unacked: dict[int, Entry] = {}
        self._early_acks: set[int] = set()  # PUBACKs that came before publish() returned its message id
        self._closing = False
        client_id = cfg.client_id or f"vcascade-{edge or 'edge'}-{os.getpid()}"
        client = self._client = mqtt.Client(
            mqtt.CallbackAPIVersion.VERSION2, client_id=client_id, clean_session=True, protocol=mqtt.MQTTv311
        )
        if cfg.username is not None:
            client.username_pw_set(cfg.username, cfg.password.get_secret_value() if cfg.password else None)
        if cfg.tls:
            client.tls_set(ca_certs=cfg.ca_file, certfile=cfg.cert_file, keyfile=cfg.key_file,
                           cert_reqs=ssl.CERT_REQUIRED)  # fmt: skip
        client.reconnect_delay_set(cfg.reconnect_min_s, cfg.reconnect_max_s)  # type: ignore[arg-type]  # floats work
        client.max_inflight_messages_set(cfg.max_in_flight)
        client.max_queued_messages_set(0)  # the sink's own queue is the bound
        client.on_connect, client.on_connect_fail = self._on_connect, self._on_connect_fail
        client.on_disconnect, client.on_publish = self._on_disconnect, self._on_publish
        client.connect_async(cfg.host, cfg.port, cfg.keepalive_s)
        client.loop_start()

    # ------------------------------------------------------------ delivery thread

    def deliver(self, batch: list[Entry], ledger: QueuedSink) -> None:
        """Publish each record once the in-flight window has room; PUBACKs settle them (paho's thread)."""
        self._ledger = ledger
        for entry, payload in encoded(batch, ledger):
            while not ledger.wait_held_below(self.cfg.max_in_flight + 1, WAIT_SLICE_S):
                if ledger.abandoned.is_set():
                    return
            if ledger.abandoned.is_set():
                return
            self._publish(entry, payload, ledger)

    def _publish(self, entry: Entry, payload: bytes, ledger: QueuedSink) -> None:
        try:
            info = self._client.publish(topic(self.cfg.topic_prefix, entry.record), payload, qos=QOS)
        except ValueError as exc:  # a topic or payload MQTT cannot carry (over 256 MB, bad UTF-8)
            ledger.settle([entry], "rejected", exc)
            return
        if info.rc not in (mqtt.MQTT_ERR_SUCCESS, mqtt.MQTT_ERR_NO_CONN):  # NO_CONN: queued until connected
            ledger.settle([entry], "other", mqtt.error_string(info.rc))
            return
        with self._acks_lock:
            acked = info.mid in self._early_acks
            if acked:
                self._early_acks.discard(info.mid)
            else:
                self._unacked[info.mid] = entry
        if acked:
            ledger.settle([entry])

    def close(self) -> None:
        """Disconnect and stop paho's network thread (records still unacknowledged were counted at the drain)."""
        self._closing = True
        self._client.disconnect()
        self._client.loop_stop()

    # ------------------------------------------------------------ paho's network thread

    def _on_publish(self, client: mqtt.Client, userdata: Any, mid: int, reason_code: Any, properties: Any) -> None:
        with self._acks_lock:
            entry = self._unacked.pop(mid, None)
            if entry is None:
                self._early_acks.add(mid)
        if entry is not None and self._ledger is not None:
            self._ledger.settle([entry])

    def _on_connect(self, client: mqtt.Client, userdata: Any, flags: Any, reason_code: Any, properties: Any) -> None:
        where = f"MQTT broker {self.cfg.host}:{self.cfg.port}"
        if not reason_code.is_failure:
            self.connected.set()
            log.info("sink %s: connected to %s", self.label, where)
            return
        refused = AUTH_REASON_CODES.get(reason_code.value)
        if refused is not None:
            self.books.attempt_failed("not_authorized", f"{where} refused the login of user "
                                      f"{self.cfg.username!r}: {refused}")  # fmt: skip
        else:
            self.books.attempt_failed("refused", f"{where} refused the connection: {reason_code}")

    def _on_connect_fail(self, client: mqtt.Client, userdata: Any) -> None:
        over = " over TLS (check `ca_file` and the broker's certificate)" if self.cfg.tls else ""
        self.books.attempt_failed("connection", f"cannot connect to MQTT broker {self.cfg.host}:{self.cfg.port}{over}")

    def _on_disconnect(self, client: mqtt.Client, userdata: Any, flags: Any, reason_code: Any, properties: Any) -> None:
        was_connected = self.connected.is_set()
        self.connected.clear()
        if not self._closing and was_connected:
            self.books.attempt_failed(
                "disconnected", f"lost MQTT broker {self.cfg.host}:{self.cfg.port} ({reason_code}); reconnecting"
            )
