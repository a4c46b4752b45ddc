"""Process logging (vcascade.core.telemetry.logs): component in every line, JSON format, repeated warnings rate-limited."""

from __future__ import annotations

import io
import json
import logging
import signal
import subprocess
import sys
import time

import pytest
import yaml

from tests.demo import demo_data
from vcascade.core.telemetry.logs import RateLimitFilter, configure_logging


class FakeClock:
    """A settable monotonic clock, seconds (the filter's only time source)."""

    def __init__(self) -> None:
        self.now_s = 100.0

    def __call__(self) -> float:
        return self.now_s


@pytest.fixture
def restore_root_logging():
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    for h in list(root.handlers):
        root.removeHandler(h)
    for h in handlers:
        root.addHandler(h)
    root.setLevel(level)


def _capture(fmt: str, interval_s: float = 60.0) -> tuple[logging.Handler, io.StringIO]:
    handler = configure_logging("INFO", "edge", "edge-1", fmt, interval_s)
    stream = io.StringIO()
    handler.setStream(stream)
    return handler, stream


def test_text_lines_name_the_component(restore_root_logging):
    _, stream = _capture("text")
    logging.getLogger("vcascade.edge.capture.source").info("camera %s: streaming", "street-1")
    line = stream.getvalue().strip()
    assert " edge:edge-1 INFO vcascade.edge.capture.source: camera street-1: streaming" in line


def test_json_lines_parse_and_carry_component_name_and_exception(restore_root_logging):
    _, stream = _capture("json")
    log = logging.getLogger("vcascade.broker.server")
    log.warning("worker %s lost", "worker-1")
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        log.exception("stage failed")
    first, second = (json.loads(line) for line in stream.getvalue().splitlines())
    assert first["component"] == "edge" and first["name"] == "edge-1" and first["level"] == "WARNING"
    assert first["msg"] == "worker worker-1 lost" and first["logger"] == "vcascade.broker.server"
    assert first["ts"].endswith("Z")
    assert "RuntimeError: boom" in second["exc"]


def test_repeated_errors_are_rate_limited_with_a_count():
    clock = FakeClock()
    limiter = RateLimitFilter(interval_s=10.0, clock=clock)
    log = logging.getLogger("test.ratelimit")
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.addFilter(limiter)
    log.addHandler(handler)
    log.propagate = False
    log.setLevel(logging.DEBUG)
    try:
        for i in range(5):
            log.error("camera %s: read failed", f"cam-{i}")
        log.info("an info line always passes")
        log.error("another template passes")
        clock.now_s += 10.0
        log.error("camera %s: read failed", "cam-9")
    finally:
        log.removeHandler(handler)
        log.propagate = True
    lines = stream.getvalue().splitlines()
    assert lines == [
        "camera cam-0: read failed",
        "an info line always passes",
        "another template passes",
        "camera cam-9: read failed (and 4 more like it in the last 10 s)",
    ]


def test_unknown_format_is_refused(restore_root_logging):
    with pytest.raises(ValueError, match="log format"):
        configure_logging("INFO", "edge", "edge-1", "xml")


def test_cli_refuses_an_unknown_log_format():
    proc = subprocess.run([sys.executable, "-m", "vcascade", "broker", "--config", "x.yaml", "--name", "b",
                           "--log-format", "xml"], capture_output=True, text=True, timeout=60)  # fmt: skip
    assert proc.returncode == 2 and "--log-format" in proc.stderr


def test_a_broker_process_logs_json_lines_naming_itself(tmp_path, free_port):
    data = demo_data()
    data["brokers"]["broker-1"].update(frontend_port=free_port(), backend_port=free_port(), metrics_port=free_port())
    config = tmp_path / "deploy.yaml"
    config.write_text(yaml.safe_dump(data))
    err = tmp_path / "broker.err"
    with err.open("w") as stderr:
        command = [sys.executable, "-m", "vcascade", "broker", "--config", str(config), "--name", "broker-1",
                   "--log-format", "json"]  # fmt: skip
        proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=stderr)
    try:
        deadline = time.monotonic() + 60
        while "workers on" not in err.read_text() and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.1)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    lines = [json.loads(line) for line in err.read_text().splitlines()]
    assert proc.returncode == 0 and lines
    assert all(line["component"] == "broker" and line["name"] == "broker-1" for line in lines)
    assert any("workers on" in line["msg"] for line in lines)
