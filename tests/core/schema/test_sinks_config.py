"""Sink configs of the network sinks (vcascade/core/schema/sinks.py): secrets from ``${VAR}`` held hidden, and
inconsistent settings refused with the key named."""

from pathlib import Path

import pytest
import yaml

from vcascade.core.config import ConfigError, MqttSinkConfig, WebhookSinkConfig, load_config

DEMO = Path(__file__).resolve().parents[3] / "configs" / "demo.yaml"


def _load(tmp_path, sinks: list[dict]):
    data = yaml.safe_load(DEMO.read_text())
    data["edges"]["edge-1"]["sinks"] = sinks
    path = tmp_path / "deploy.yaml"
    path.write_text(yaml.safe_dump(data))
    return load_config(path)


def test_mqtt_and_webhook_secrets_come_from_the_environment_and_never_print(tmp_path, monkeypatch):
    monkeypatch.setenv("MQTT_PASSWORD", "p4ss")
    monkeypatch.setenv("HOOK_TOKEN", "t0ken")
    dep = _load(tmp_path, [
        {"type": "mqtt", "host": "broker.local", "username": "edge", "password": "${MQTT_PASSWORD}",
         "topic_prefix": "site-a/vcascade"},
        {"type": "webhook", "url": "https://hooks.example.com/vc", "auth_header": "Bearer ${HOOK_TOKEN}"},
    ])
    mqtt, webhook = dep.edges["edge-1"].sinks
    assert isinstance(mqtt, MqttSinkConfig) and isinstance(webhook, WebhookSinkConfig)
    assert mqtt.password.get_secret_value() == "p4ss" and webhook.auth_header.get_secret_value() == "Bearer t0ken"
    assert "p4ss" not in repr(dep) and "t0ken" not in repr(dep)
    assert (mqtt.port, mqtt.queue_max, webhook.batch_max, webhook.timeout_s) == (1883, 10_000, 100, 5.0)


@pytest.mark.parametrize(("sink", "expected"), [
    ({"type": "mqtt", "host": "h", "password": "x"}, "password"),
    ({"type": "mqtt", "host": "h", "topic_prefix": "a/#"}, "topic_prefix"),
    ({"type": "mqtt", "host": "h", "topic_prefix": "/a"}, "must not start or end with '/'"),
    ({"type": "mqtt", "host": "h", "ca_file": "/ca.pem"}, "set `tls: true`"),
    ({"type": "webhook", "url": "ftp://x"}, "url"),
    ({"type": "webhook", "url": "http://x", "batch_max": 0}, "batch_max"),
    ({"type": "kafka"}, "type"),
])
def test_bad_sink_settings_name_the_key(tmp_path, sink, expected):
    with pytest.raises(ConfigError) as info:
        _load(tmp_path, [sink])
    assert "edges.edge-1.sinks" in str(info.value) and expected in str(info.value), str(info.value)
