"""One redaction for every exit (issue 28, item 4): URLs parsed as FFmpeg does (user information up to the last
``@``), credentials by name in query and path, webhook paths, and secrets of the configuration remembered so an
echo of them is hidden too. Property-based: no generated secret reaches an exit."""

from __future__ import annotations

import io
import logging
import string
from collections.abc import Callable

import pytest
import yaml
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from vcascade.core import redact as redact_module
from vcascade.core.config import ConfigError, load_config
from vcascade.core.redact import (
    RedactingFilter, forget_all, redact, redact_webhook_url, remember_config, remember_url,
)
from vcascade.edge.capture.faults import CameraFault
from vcascade.edge.capture.state import Transition
from vcascade.edge.sinks.lines import line
from vcascade.edge.way_back import CameraStateChanged

# secrets of the kind cameras get: printable, with the characters that broke the old pattern ('@', '/', ' ', ':')
SECRET = st.text(alphabet=string.ascii_letters + string.digits + "@/: !$%*+,.~-", min_size=6, max_size=24).filter(
    lambda s: s.strip() == s and any(c.isdigit() for c in s) and "***" not in s
)  # a digit: so a secret is never a word of the fixed text around it (a record's key, a log's level)
QUERY_SECRET = st.text(alphabet=string.ascii_letters + string.digits + "@/:!$*+,.~-", min_size=6, max_size=24).filter(
    lambda s: any(c.isdigit() for c in s))
HOST = st.sampled_from(["10.0.0.5", "cam.example.com", "[fe80::1]", "192.168.1.64:554"])
SCHEME = st.sampled_from(["rtsp", "rtsps", "http", "https", "rtmp"])
SECRET_PARAM = st.sampled_from(["pwd", "password", "passwd", "token", "key", "auth", "secret", "sig", "apikey",
                                "access_token", "X-Amz-Signature"])


@pytest.fixture(autouse=True)
def _no_remembered_secrets():
    forget_all()
    yield
    forget_all()


def _around(text: Callable[[str], str], secret: str) -> str:
    """``text(secret)``, after skipping an example whose secret is a piece of what the exits write around it
    (``reet-1`` is in the log's ``camera street-1``, ``168.1`` in a host): the exits of ``text`` with another
    secret in its place must not show it."""
    assume(not any(secret in shown for shown in _exits(text("Q")).values()))
    return text(secret)


def _exits(text: str) -> dict[str, str]:
    """The same text through each exit that does not need a running process: plain redaction, a log line through
    the handler filter the CLI installs, a camera fault, a camera-state sink record."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.addFilter(RedactingFilter())
    logger = logging.getLogger("tests.redact")
    logger.addHandler(handler)
    logger.propagate = False
    try:
        logger.warning("camera street-1: %s", text)
        try:
            raise OSError(f"echo: {text}")
        except OSError:
            logger.exception("failed")
    finally:
        logger.removeHandler(handler)
    fault = CameraFault("connection_refused", text)
    record = line(CameraStateChanged("street-1", Transition(0.0, "connecting", "failed", "error", text)))
    return {"redact": redact(text), "log": stream.getvalue(), "fault": str(fault) + fault.detail,
            "camera_state": yaml.safe_dump(record)}


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(scheme=SCHEME, user=st.sampled_from(["admin", "root", "op"]), password=SECRET, host=HOST)
def test_a_password_with_at_slash_colon_or_space_never_reaches_an_exit(scheme, user, password, host):
    text = _around(lambda p: f"{scheme}://{user}:{p}@{host}/Streaming/Channels/101: Connection refused", password)
    for exit_name, shown in _exits(text).items():
        assert password not in shown, (exit_name, shown)
        assert host.split(":")[0].strip("[]") in shown, (exit_name, shown)  # the host is still shown


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(scheme=SCHEME, name=SECRET_PARAM, secret=QUERY_SECRET, host=HOST, in_path=st.booleans())
def test_a_credential_in_the_query_or_path_never_reaches_an_exit(scheme, name, secret, host, in_path):
    def text(value: str) -> str:
        return (f"opening {scheme}://{host}/user=admin_{name}={value}_channel=1_stream=0.sdp failed" if in_path
                else f"opening {scheme}://{host}/cgi-bin/stream?user=admin&{name}={value}&channel=1 failed")

    for exit_name, shown in _exits(_around(text, secret)).items():
        assert secret not in shown, (exit_name, shown)
        assert "channel=1" in shown, (exit_name, shown)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(password=SECRET, token=QUERY_SECRET)
def test_a_secret_of_the_configuration_echoed_alone_is_hidden(password, token):
    """A library that echoes only the password (not the URL) still leaks nothing: the configuration's secrets are
    remembered."""
    forget_all()
    remember_config({"cameras": {"c": {"url": f"rtsp://admin:{password}@10.0.0.5/s"}},
                     "sinks": [{"type": "mqtt", "password": token}]})
    for exit_name, shown in _exits(f"auth failed for password {password!r} and {token}").items():
        assert password not in shown and token not in shown, (exit_name, shown)


@settings(max_examples=100, deadline=None)
@given(path=st.text(alphabet=string.ascii_letters + string.digits + "-_", min_size=8, max_size=40))
def test_a_webhook_path_is_hidden_where_the_url_is_shown_and_where_it_is_echoed(path):
    url = f"https://hooks.example.com/services/{path}?sig=abc123"
    assert redact_webhook_url(url) == "https://hooks.example.com/***"
    forget_all()
    remember_config({"edges": {"e": {"sinks": [{"type": "webhook", "url": url}]}}})
    assert path not in redact(f"POST /services/{path} failed: 404")


def test_ffmpeg_userinfo_is_up_to_the_last_at():
    assert redact("rtsp://admin:p@ss@10.0.0.5:554/s") == "rtsp://***@10.0.0.5:554/s"
    assert redact("rtsp://10.0.0.5/s") == "rtsp://10.0.0.5/s"
    assert redact("bikes.mp4: missing") == "bikes.mp4: missing"


def test_a_config_error_does_not_echo_a_secret(tmp_path):
    """pydantic's message quotes the bad value; the camera's password must not come with it."""
    path = tmp_path / "deploy.yaml"
    path.write_text(yaml.safe_dump({"cameras": {"c": {"url": "rtsp://admin:Hunter2secret@10.0.0.5/s",
                                                      "fps": "fast"}}}))
    with pytest.raises(ConfigError) as raised:
        load_config(path)
    assert "Hunter2secret" not in str(raised.value)
    assert "Hunter2secret" in redact_module._remembered  # and later output hides it too


def test_remember_url_keeps_short_values_out():
    remember_url("rtsp://a:b@h/s?pwd=xy")
    assert redact("a b xy") == "a b xy"  # too short to hide everywhere; hidden in URLs by structure
    assert redact("rtsp://a:b@h/s?pwd=xy") == "rtsp://***@h/s?pwd=***"


def test_a_webhook_token_never_reaches_the_warning_lines(tmp_path, free_port, capsys):
    """A real webhook sink failing against a closed port, its warnings through the handler the CLI installs; the
    token in the path and the signature in the query were printed before."""
    import zmq

    from tests.demo import demo_data
    from tests.waiting import until
    from vcascade.core.telemetry.logs import configure_logging
    from vcascade.edge.sinks.registry import open_sinks

    token = "T0KEN-in-the-path-5d41402abc4b2a76"
    url = f"http://127.0.0.1:{free_port()}/services/{token}?sig=Sig9secret"
    data = demo_data()
    data["edges"]["edge-1"]["sinks"] = [{"type": "webhook", "url": url, "max_attempts": 1, "batch_wait_s": 0}]
    path = tmp_path / "deploy.yaml"
    path.write_text(yaml.safe_dump(data))
    dep = load_config(path)  # what every command does first: its secrets are remembered
    configure_logging("INFO", "edge", "edge-1", "text")
    (sink,) = open_sinks(dep.edges["edge-1"].sinks, zmq.Context.instance(), "edge-1")
    try:
        sink.write({"kind": "result", "camera": "c", "status": "ok"})
        assert until(lambda: sum(sink.stats()["lost"].values()) >= 1, 30.0)
    finally:
        sink.close()
    err = capsys.readouterr().err
    assert "127.0.0.1" in err, err  # the warning was written
    assert token not in err and "Sig9secret" not in err, err


def test_a_log_call_whose_template_does_not_fit_its_arguments_is_written_redacted_and_raises_nothing():
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.addFilter(RedactingFilter())
    logger = logging.getLogger("tests.redact.badformat")
    logger.addHandler(handler)
    logger.propagate = False
    try:
        logger.warning("camera %s %d", "rtsp://admin:Hunter2x@10.0.0.5/s")  # one argument for two fields
    finally:
        logger.removeHandler(handler)
    assert "Hunter2x" not in stream.getvalue() and "10.0.0.5" in stream.getvalue()


def test_the_remembered_secrets_are_bounded():
    """Cameras added at run time each add their secrets: a client adding many must not grow the set forever."""
    for i in range(redact_module.MAX_REMEMBERED + 100):
        remember_url(f"rtsp://admin:Secret{i:06d}@10.0.0.5/s")
    assert len(redact_module._remembered) == redact_module.MAX_REMEMBERED
    assert redact("rtsp://admin:Secret999999@10.0.0.5/s") == "rtsp://***@10.0.0.5/s"  # the structure still hides it
