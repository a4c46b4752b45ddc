"""The ``metrics:`` section (issue 28, item 1): loopback by default; any other bind address needs a token (from
the environment or a file); TLS needs its certificate and key together; the token never shows in the config."""

from __future__ import annotations

import pytest

from tests.core.schema.test_routes_config import _error, _load
from tests.demo import demo_data

TOKEN = "metrics-token-0123456789abcdef"


def _with(metrics: dict) -> dict:
    data = demo_data()
    data["metrics"] = metrics
    return data


def test_metrics_bind_loopback_without_a_token_by_default(tmp_path):
    metrics = _load(tmp_path, demo_data()).metrics
    assert metrics.bind == "127.0.0.1" and metrics.read_token() is None and metrics.tls_cert_file is None


def test_a_remote_bind_needs_a_token_from_the_environment_or_a_file(tmp_path, monkeypatch):
    assert "metrics.bind = '0.0.0.0': a non-loopback address needs metrics.token" in _error(tmp_path, _with({"bind": "0.0.0.0"}))
    short = _error(tmp_path, _with({"bind": "0.0.0.0", "token": "short-secret"}))
    assert "metrics.token = '**********': a token needs 16 characters at least" in short and "short-secret" not in short
    monkeypatch.setenv("VCASCADE_METRICS_TOKEN", TOKEN)
    metrics = _load(tmp_path, _with({"bind": "0.0.0.0", "token": "${VCASCADE_METRICS_TOKEN}"})).metrics
    assert metrics.read_token() == TOKEN and TOKEN not in repr(metrics) and TOKEN not in str(metrics.model_dump())
    token_file = tmp_path / "metrics.token"
    token_file.write_text(f"{TOKEN}\n")
    assert _load(tmp_path, _with({"bind": "0.0.0.0", "token_file": str(token_file)})).metrics.read_token() == TOKEN


def test_token_and_token_file_together_or_a_certificate_without_its_key_are_refused(tmp_path):
    both = _with({"token": TOKEN, "token_file": "/run/secrets/t"})
    assert "give token or token_file, not both" in _error(tmp_path, both)
    assert "tls_cert_file and tls_key_file go together" in _error(tmp_path, _with({"tls_cert_file": "/etc/c.pem"}))


def test_an_unreadable_or_short_token_file_names_the_file(tmp_path):
    short = tmp_path / "short.token"
    short.write_text("abc\n")
    with pytest.raises(ValueError, match="short.token: the token needs 16 characters"):
        _load(tmp_path, _with({"token_file": str(short)})).metrics.read_token()
    with pytest.raises(ValueError, match="missing.token: No such file"):
        _load(tmp_path, _with({"token_file": str(tmp_path / "missing.token")})).metrics.read_token()
