"""`vcascade status`: histogram percentiles like PromQL, rates, and a view of a real broker beside components
that are not running (shown as unreachable, never a crash)."""

from __future__ import annotations

import io
import threading
import time
from pathlib import Path

import pytest
import yaml
from rich.console import Console

from tests.demo import demo_data
from vcascade.app.promconfig import MetricsTarget
from vcascade.app.status import (
    Scrape,
    camera_state,
    cameras_table,
    histogram_quantile,
    identities_table,
    rate,
    run_status,
    scrape,
)
from vcascade.broker.server import run_broker
from vcascade.core.schema import BrokerSettings
from vcascade.core.config import CameraConfig, load_config
from vcascade.core.telemetry.metrics import serve_metrics
from vcascade.edge.capture.frames import FrameSlots
from vcascade.edge.capture.source import CameraReader

REPO = Path(__file__).resolve().parents[2]


def test_histogram_quantile_interpolates_like_promql():
    # 10 observations <= 0.1 s, 10 more in (0.1, 0.2], none above: cumulative counts by upper bound.
    buckets = {0.1: 10.0, 0.2: 20.0, float("inf"): 20.0}
    assert histogram_quantile(0.5, buckets) == pytest.approx(0.1)
    assert histogram_quantile(0.25, buckets) == pytest.approx(0.05)
    assert histogram_quantile(0.75, buckets) == pytest.approx(0.15)
    assert histogram_quantile(0.99, {0.1: 0.0, 1.0: 0.0, float("inf"): 5.0}) == pytest.approx(1.0)  # in +Inf
    assert histogram_quantile(0.5, {0.1: 0.0, float("inf"): 0.0}) is None


def test_rate_is_the_counter_increase_per_second():
    target = MetricsTarget("edge", "edge-1", "127.0.0.1", 1)
    key = (("camera", "cam-a"), ("edge", "edge-1"))
    before = Scrape(target, 10.0, {"vcascade_edge_frames_decoded_total": {key: 100.0}})
    after = Scrape(target, 12.0, {"vcascade_edge_frames_decoded_total": {key: 150.0}})
    assert rate(before, after, "vcascade_edge_frames_decoded_total", camera="cam-a") == pytest.approx(25.0)
    assert rate(None, after, "vcascade_edge_frames_decoded_total") is None


def test_unreachable_component_is_reported_not_raised(free_port):
    result = scrape(MetricsTarget("worker", "worker-1", "127.0.0.1", free_port()), timeout_s=2)
    assert result.error and not result.samples


def test_status_shows_a_live_broker_and_unreachable_components(tmp_path, free_port):
    data = demo_data()
    for section in ("edges", "workers"):
        for cfg in data[section].values():
            cfg["metrics_port"] = free_port()  # nothing listens there
    data["brokers"]["broker-1"].update(frontend_port=free_port(), backend_port=free_port(), metrics_port=free_port())
    config = tmp_path / "deploy.yaml"
    config.write_text(yaml.safe_dump(data))
    stop = threading.Event()
    settings = BrokerSettings.from_deployment(load_config(config), "broker-1")
    thread = threading.Thread(target=run_broker, args=(settings, stop), daemon=True)
    thread.start()
    try:
        port = data["brokers"]["broker-1"]["metrics_port"]
        deadline = time.monotonic() + 30
        while scrape(MetricsTarget("broker", "broker-1", "127.0.0.1", port)).error and time.monotonic() < deadline:
            time.sleep(0.1)
        out = io.StringIO()
        assert run_status(config, once=True, interval_s=0.2, console=Console(file=out, width=200)) == 0
    finally:
        stop.set()
        thread.join(timeout=30)
    text = out.getvalue()
    broker_line = next(line for line in text.splitlines() if "broker-1" in line and "not ready" in line)
    assert "no worker registered" in broker_line
    assert text.count("unreachable") == 2, text
    assert "brokers" in text and "latency (ms)" in text


def test_a_failed_camera_shows_its_reason(free_port):
    """Issue 18: ``status`` showed ``failed`` without the reason. A real camera reader on a missing file, its metrics
    served and scraped as ``vcascade status`` does."""
    cfg = CameraConfig(url="/nonexistent/vcascade-status-test.mp4", edge="edge-st")
    reader = CameraReader("edge-st", "gone", cfg, FrameSlots(), threading.Event())
    reader.start()
    reader.join(30)
    assert reader.state == "failed"
    port = free_port()
    server = serve_metrics(port, "127.0.0.1")
    try:
        after = scrape(MetricsTarget("edge", "edge-st", "127.0.0.1", port))
    finally:
        server.shutdown()
        server.server_close()
    assert camera_state(after, "gone") == f"failed ({reader.machine.reason})" and reader.machine.reason
    console = Console(width=200, record=True)
    console.print(cameras_table({}, {"edge-st": after}))
    row = next(line for line in console.export_text().splitlines() if " gone " in line)
    assert f"failed ({reader.machine.reason})" in row
def test_identity_spaces_show_each_embedding_worker():
    target = MetricsTarget("worker", "worker-1", "127.0.0.1", 1, recognizer="embedder")
    w = (("worker", "worker-1"),)

    def scrape_at(t_s: float, enrolments: float) -> Scrape:
        return Scrape(target, t_s, {
            "vcascade_identity_gallery_size": {w: 12.0},
            "vcascade_identity_enrolments_total": {w: enrolments},
            "vcascade_identity_matches_total": {w: 30.0},
            "vcascade_identity_comparisons_total": {w: 40.0 * (enrolments + 30.0)},
            "vcascade_identity_merges_total": {(*w, ("kind", "duplicate")): 2.0, (*w, ("kind", "reconciled")): 1.0},
            "vcascade_identity_provisional_results_total": {w: 5.0},
            "vcascade_identity_store_errors_total": {(*w, ("op", "write")): 4.0},
            "vcascade_identity_store_seconds_bucket": {(*w, ("op", "write"), ("le", "0.01")): 10.0,
                                                      (*w, ("op", "write"), ("le", "+Inf")): 10.0},
        })  # fmt: skip

    console = Console(file=io.StringIO(), width=200)
    console.print(identities_table({"worker-1": scrape_at(10.0, 10.0)}, {"worker-1": scrape_at(12.0, 14.0)}))
    row = [line for line in console.file.getvalue().splitlines() if "worker-1" in line][0]
    cells = [cell.strip() for cell in row.split("│")[1:-1]]
    assert cells == ["worker-1", "embedder", "12", "2.0", "0.0", "40.0", "3", "5", "4", "9.9"], row
