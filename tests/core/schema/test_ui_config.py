"""The ``ui:`` section (issue 20, item 3): off and on loopback by default; any other bind address, of the view
or of an edge's preview endpoint, needs a token, which comes from the environment."""

from __future__ import annotations

from tests.core.schema.test_routes_config import _error, _load
from tests.demo import demo_data

TOKEN = "0123456789abcdef-token"


load, error = _load, _error  # loads a deployment dict; the ConfigError message it raises


def test_the_view_is_off_read_only_on_loopback_by_default(tmp_path):
    ui = load(tmp_path, demo_data()).ui
    assert not ui.enabled and ui.bind == "127.0.0.1" and ui.token is None
    assert ui.preview_fps == 2 and ui.preview_width_px == 640
    assert load(tmp_path, demo_data()).edges["edge-1"].preview_port is None  # no previews unless asked


def test_a_remote_bind_needs_a_token(tmp_path):
    data = demo_data()
    data["ui"] = {"bind": "0.0.0.0"}
    assert "ui.bind = '0.0.0.0': a non-loopback address needs ui.token" in error(tmp_path, data)
    data["ui"]["token"] = "short"
    assert "ui.token" in error(tmp_path, data) and "at least 16 characters" in error(tmp_path, data)
    data["ui"]["token"] = TOKEN
    assert load(tmp_path, data).ui.token == TOKEN


def test_the_token_comes_from_the_environment(tmp_path, monkeypatch):
    data = demo_data()
    data["ui"] = {"bind": "0.0.0.0", "token": "${VCASCADE_UI_TOKEN}"}
    monkeypatch.setenv("VCASCADE_UI_TOKEN", TOKEN)
    assert load(tmp_path, data).ui.token == TOKEN
    monkeypatch.delenv("VCASCADE_UI_TOKEN")
    assert "VCASCADE_UI_TOKEN" in error(tmp_path, data)


def test_an_edge_preview_endpoint_on_a_remote_address_needs_the_token(tmp_path, free_port):
    data = demo_data()
    data["edges"]["edge-1"].update(preview_port=free_port(), bind="*")
    data["security"] = {"allow_plaintext_remote": True}
    msg = error(tmp_path, data)
    assert "edges.edge-1.bind = '*': the preview endpoint (preview_port) on a non-loopback address needs ui.token" in msg
    data["ui"] = {"token": TOKEN}
    assert load(tmp_path, data).edges["edge-1"].preview_port is not None


def test_preview_and_view_ports_are_distinct_from_the_others(tmp_path):
    data = demo_data()
    data["edges"]["edge-1"]["preview_port"] = data["edges"]["edge-1"]["metrics_port"]
    assert "edges.edge-1.preview_port" in error(tmp_path, data)
    data = demo_data()
    data["ui"] = {"enabled": True, "port": data["brokers"]["broker-1"]["metrics_port"]}
    assert "ui.port" in error(tmp_path, data)
