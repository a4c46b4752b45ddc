"""Every exported metric moves when its event happens (no metric that always reads 0).

The families are read from the Prometheus registry (:func:`vcascade.app.metric_list.exported_families`);
:data:`SCENARIOS` says for each which scenario below causes its event, and must name exactly those families, so
a new metric without a scenario fails here.

One deployment stages every event at once, with real processes, video and sockets:

* ``pipeline`` — edge-1 runs bikes.mp4 through broker-1 and worker-1 (frames, detections, ROIs, results,
  latency, credits, stage times, queues, camera states);
* ``skipping`` — a 100 fps clip paced in real time (the newest-frame slot is overwritten) and a camera with
  ``detect_fps``;
* ``corrupt`` — a clip whose PTS jumps over 10 frames (``pts_gap``);
* ``dead_camera`` — an RTSP camera on a closed port (reconnects with back-off);
* ``no_worker`` — edge-2 sends to broker-2, which has no worker and drops its ROIs as ``stale``, and to
  broker-3, a ROUTER in this test that heartbeats but never answers an ROI (retries after ``roi_timeout_s``)
  and answers every message with garbage as well (edge malformed);
* ``malformed`` — the test sends garbage to broker-1's frontend and backend, and an ROI whose payload is not
  a JPEG (the worker answers ``Drop(decode_error)``).

Each process is fresh, so "before" is 0: a family moved when a scrape saw a non-zero sample of it. Metrics whose
event is staged by another test name it (``covered:<file>``), and that file must assert on the metric;
``unstaged:<why>`` marks events no test stages yet. The edges also log at INFO in JSON: every line must parse
and name its component, and there is no line per frame.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest
import yaml
import zmq
from prometheus_client.parser import text_string_to_metric_families

from tests.demo import demo_data, largest_sample
from vcascade.app.metric_list import exported_families
from vcascade.core.protocol import wire
from vcascade.core.transport.sockets import make_socket
from vcascade.core.telemetry.metrics import family_of

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(420)]

REPO = Path(__file__).resolve().parents[2]
DEADLINE_S = 300.0
"""Generous: two edges and a worker load their models on a shared 2-core machine."""

FAMILIES = exported_families()

SCENARIOS: dict[str, str] = {
    # edge
    "vcascade_edge_frames_decoded_total": "pipeline",
    "vcascade_edge_frames_skipped_total": "skipping",
    "vcascade_edge_frames_rate_skipped_total": "skipping",
    "vcascade_edge_frames_corrupt_total": "corrupt",
    "vcascade_edge_frames_detected_total": "pipeline",
    "vcascade_edge_detections_total": "pipeline",
    "vcascade_edge_rois_sent_total": "pipeline",
    "vcascade_edge_recognizer_rois_sent_total": "pipeline",
    "vcascade_edge_rois_suppressed_total": "pipeline",
    "vcascade_edge_tracked_lines_total": "pipeline",
    "vcascade_edge_results_total": "pipeline",
    "vcascade_edge_recognizer_results_total": "pipeline",
    "vcascade_edge_roi_drops_total": "no_worker",
    "vcascade_edge_roi_retries_total": "no_worker",
    "vcascade_edge_duplicate_answers_total": "covered:tests/edge/link/test_broker_link.py",
    "vcascade_edge_ffmpeg_log_lines_total": "covered:tests/edge/capture/test_hard_inputs.py",
    "vcascade_edge_results_on_time_total": "covered:tests/edge/link/test_broker_link.py",
    "vcascade_edge_results_late_total": "covered:tests/edge/link/test_broker_link.py",
    "vcascade_edge_malformed_messages_total": "malformed",
    "vcascade_edge_camera_up": "pipeline",
    "vcascade_edge_camera_state": "pipeline",
    "vcascade_edge_camera_transitions_total": "pipeline",
    "vcascade_edge_camera_reconnects_total": "dead_camera",
    "vcascade_edge_camera_blocked_seconds_total": "pipeline",
    "vcascade_edge_send_queue_depth": "pipeline",
    "vcascade_edge_in_flight": "pipeline",
    "vcascade_edge_hop_seconds": "pipeline",
    "vcascade_edge_broker_up": "pipeline",
    "vcascade_edge_broker_rois_sent_total": "pipeline",
    "vcascade_edge_auth_failures_total": "covered:tests/core/transport/test_security.py",
    "vcascade_edge_disconnects_total": "covered:tests/edge/test_control_hostile.py",
    "vcascade_edge_control_requests_total": "unstaged: tests/e2e/test_runtime_cameras.py sends control requests "
                                            "but reads no metric",
    # broker
    "vcascade_broker_rois_received_total": "pipeline",
    "vcascade_broker_rois_dispatched_total": "pipeline",
    "vcascade_broker_recognizer_rois_dispatched_total": "pipeline",
    "vcascade_broker_results_total": "pipeline",
    "vcascade_broker_drops_total": "no_worker",
    "vcascade_broker_malformed_messages_total": "malformed",
    "vcascade_broker_rois_redispatched_total": "covered:tests/broker/test_server.py",
    "vcascade_broker_send_failures_total": "covered:tests/broker/test_reliability.py",
    "vcascade_broker_queue_bytes": "covered:tests/broker/test_reliability.py",
    "vcascade_broker_rois_overdue_total": "covered:tests/broker/test_bounds_server.py",
    "vcascade_broker_workers_evicted_total": "covered:tests/broker/test_bounds_server.py",
    "vcascade_edge_sink_lines_written_total": "covered:tests/edge/sinks/test_sinks.py",
    "vcascade_edge_line_crossings_total": "covered:tests/edge/analytics/test_camera.py",
    "vcascade_edge_zone_visits_total": "covered:tests/edge/analytics/test_camera.py",
    "vcascade_edge_zone_occupancy": "covered:tests/edge/analytics/test_camera.py",
    "vcascade_edge_events_total": "covered:tests/edge/analytics/test_camera.py",
    "vcascade_edge_sink_lines_lost_total": "covered:tests/edge/sinks/test_sinks.py",
    "vcascade_edge_sink_records_emitted_total": "covered:tests/edge/sinks/test_queue.py",
    "vcascade_edge_sink_queue_depth": "covered:tests/edge/sinks/test_queue.py",
    "vcascade_edge_sink_attempts_failed_total": "covered:tests/edge/sinks/test_webhook.py",
    "vcascade_broker_edges": "pipeline",
    "vcascade_broker_queue_depth": "no_worker",
    "vcascade_broker_recognizer_queue_depth": "no_worker",
    # the broker publishes its gauges once a second and this pipeline's worker answers in milliseconds: a
    # scrape rarely caught an ROI in flight (the test failed on it about twice in three runs)
    "vcascade_broker_in_flight": "covered:tests/broker/test_server.py",
    "vcascade_broker_workers": "pipeline",
    "vcascade_broker_recognizer_workers": "pipeline",
    "vcascade_broker_worker_credits": "pipeline",
    "vcascade_broker_queue_seconds": "pipeline",
    "vcascade_broker_auth_failures_total": "covered:tests/core/transport/test_security.py",
    "vcascade_broker_disconnects_total": "covered:tests/broker/test_oversized.py",
    # worker
    "vcascade_worker_rois_received_total": "pipeline",
    "vcascade_worker_results_total": "pipeline",
    "vcascade_worker_drops_total": "malformed",
    "vcascade_worker_malformed_messages_total": "covered:tests/center/test_worker.py",
    "vcascade_worker_batch_size": "pipeline",
    "vcascade_worker_stage_seconds": "pipeline",
    "vcascade_worker_stage_busy_seconds_total": "pipeline",
    "vcascade_worker_stage_errors_total": "covered:tests/center/test_stage_group.py",
    "vcascade_worker_hop_seconds": "pipeline",
    "vcascade_worker_queue_depth": "covered:tests/center/test_queue_depth_metric.py",
    "vcascade_worker_send_failures_total": "unstaged: a broker that stops reading while thousands of results "
                                           "queue (too slow for CI)",
    "vcascade_worker_reconnects_total": "covered:tests/center/test_worker.py",
    "vcascade_worker_link_discarded_total": "unstaged: a stage group's answer after its micro-batch failed "
                                            "(timing-dependent)",
    "vcascade_worker_in_flight": "pipeline",
    "vcascade_worker_credits": "pipeline",
    "vcascade_worker_auth_failures_total": "covered:tests/core/telemetry/test_telemetry_auth.py",
    # identity space (workers of embedding recognizers)
    "vcascade_identity_gallery_size": "covered:tests/center/identity/test_identity_metrics.py",
    "vcascade_identity_enrolments_total": "covered:tests/center/identity/test_identity_metrics.py",
    "vcascade_identity_matches_total": "covered:tests/center/identity/test_identity_metrics.py",
    "vcascade_identity_merges_total": "covered:tests/center/identity/test_identity_metrics.py",
    "vcascade_identity_provisional_results_total": "covered:tests/center/identity/test_identity_metrics.py",
    "vcascade_identity_comparisons_total": "covered:tests/center/identity/test_identity_metrics.py",
    "vcascade_identity_store_seconds": "covered:tests/center/identity/test_identity_metrics.py",
    "vcascade_identity_store_errors_total": "covered:tests/center/identity/test_identity_metrics.py",
    "vcascade_identity_dropped_updates_total": "covered:tests/center/identity/test_identity_metrics.py",
    "vcascade_identity_store_records_skipped_total": "covered:tests/center/identity/test_store_damage.py",
    "vcascade_identity_store_resets_total": "covered:tests/center/identity/test_store_damage.py",
    "vcascade_identity_ids_refused_total": "covered:tests/center/identity/test_store_damage.py",
    "vcascade_identity_track_revisions_total": "covered:tests/center/identity/test_tracks.py",
    "vcascade_edge_camera_url_refusals_total": "covered:tests/edge/capture/test_url_policy.py",
    "vcascade_edge_camera_decoder": "covered:tests/edge/capture/test_decoder.py",
    "vcascade_edge_decoder_fallbacks_total": "covered:tests/edge/capture/test_decoder.py",
    "vcascade_edge_timestamp_discontinuities_total": "covered:tests/edge/capture/test_live_timing.py",
    "vcascade_edge_detections_skipped_total": "covered:tests/edge/detection/test_motion.py",
    "vcascade_edge_images_out_total": "covered:tests/e2e/test_privacy_exits.py",
    "vcascade_http_refused_total": "covered:tests/e2e/test_http_surfaces.py",
    "vcascade_http_connections": "covered:tests/e2e/test_http_surfaces.py",
    "vcascade_http_connection_limit": "covered:tests/e2e/test_http_surfaces.py",
    # the edges' history store
    "vcascade_history_records_total": "covered:tests/edge/history/test_writer.py",
    "vcascade_history_stored_total": "covered:tests/edge/history/test_writer.py",
    "vcascade_history_dropped_total": "covered:tests/edge/history/test_writer.py",
    "vcascade_history_evidence_images_total": "covered:tests/edge/history/test_writer.py",
    "vcascade_history_evidence_dropped_total": "covered:tests/edge/history/test_writer.py",
    "vcascade_history_evicted_total": "covered:tests/edge/history/test_writer.py",
    "vcascade_history_evicted_bytes_total": "covered:tests/edge/history/test_writer.py",
    "vcascade_history_queue_depth": "covered:tests/edge/history/test_writer.py",
    "vcascade_history_store_up": "covered:tests/edge/history/test_writer.py",
    # stage group (a process this deployment does not run)
    "vcascade_stage_group_batches_total": "covered:tests/e2e/test_stage_group_cascade.py",
    "vcascade_stage_group_stage_seconds": "unstaged: tests/e2e/test_stage_group_cascade.py reads only the "
                                          "batches counter of its group",
    "vcascade_stage_group_malformed_messages_total": "unstaged: tests/center/test_stage_group.py sends its group "
                                                     "garbage but reads no group metric",
    # every process
    "vcascade_build_info": "pipeline",
    "process_cpu_seconds_total": "pipeline",
    "process_resident_memory_bytes": "pipeline",
    "process_virtual_memory_bytes": "pipeline",
    "process_start_time_seconds": "pipeline",
    "process_open_fds": "pipeline",
    "process_max_fds": "pipeline",
}
"""Per exported family, the scenario of this test that causes its event, ``covered:<test file>`` or
``unstaged:<why>``."""


def _ffmpeg(src: Path, out: Path, *args: str) -> Path:
    subprocess.run(["ffmpeg", "-v", "error", "-y", "-i", str(src), *args, "-c:v", "mpeg4", "-q:v", "4", str(out)],
                   check=True, timeout=120)  # fmt: skip
    return out


def _deployment(tmp_path: Path, free_port, bikes_path: Path) -> tuple[Path, dict]:
    gap = _ffmpeg(bikes_path, tmp_path / "gap.mp4", "-vf", "select='lt(n,60)*not(between(n,20,29))'",
                  "-fps_mode", "passthrough")  # fmt: skip
    fast = _ffmpeg(bikes_path, tmp_path / "fast.mp4", "-vf", "select='lt(n,80)',setpts=PTS/4", "-r", "100")
    data = demo_data()
    bikes = str(bikes_path)
    data["cameras"] = {
        "cam-a": {"url": bikes, "edge": "edge-1", "max_frames": 60},
        "cam-fast": {"url": str(fast), "edge": "edge-1", "realtime": True},
        "cam-rate": {"url": bikes, "edge": "edge-1", "realtime": True, "detect_fps": 5, "max_frames": 50},
        "cam-gap": {"url": str(gap), "edge": "edge-1"},
        "cam-dead": {"url": f"rtsp://127.0.0.1:{free_port()}/dead", "edge": "edge-1", "backoff_initial_s": 0.2,
                     "backoff_max_s": 2.0},
        "cam-b": {"url": bikes, "edge": "edge-2", "max_frames": 60},
    }  # fmt: skip
    edge = data["edges"]["edge-1"]
    edge.update(sinks=[{"type": "jsonl", "path": str(tmp_path / "edge-1.jsonl")}], metrics_port=free_port(),
                drain_timeout_s=5.0, max_in_flight=2)  # fmt: skip
    # max_in_flight 2: a small window, so the send queue fills (vcascade_edge_send_queue_depth)
    edge2 = json.loads(json.dumps(edge))
    edge2.update(brokers=["broker-2", "broker-3"], sinks=[{"type": "jsonl", "path": str(tmp_path / "edge-2.jsonl")}],
                 metrics_port=free_port(), roi_timeout_s=0.3, max_attempts=2, overflow="drop_oldest")  # fmt: skip
    edge2["roi"]["ttl_ms"] = 1000  # longer than roi_timeout_s: an ROI broker-3 never answers is retried
    data["edges"]["edge-2"] = edge2
    for name in ("broker-1", "broker-2", "broker-3"):
        data["brokers"][name] = {"host": "127.0.0.1", "frontend_port": free_port(), "backend_port": free_port(),
                                 "metrics_port": free_port()}  # fmt: skip
    data["workers"]["worker-1"]["metrics_port"] = free_port()
    path = tmp_path / "deploy.yaml"
    path.write_text(yaml.safe_dump(data))
    return path, data


class Sampler(threading.Thread):
    """Scrapes every component's /metrics every 0.25 s; remembers the families seen with a non-zero sample."""

    def __init__(self, ports: dict[str, int]) -> None:
        super().__init__(daemon=True)
        self.ports, self.moved, self.stop = ports, {}, threading.Event()
        self.started_s = time.monotonic()

    def run(self) -> None:
        while not self.stop.wait(0.25):
            for component, port in self.ports.items():
                try:
                    body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2).read().decode()
                except OSError:
                    continue
                for family in text_string_to_metric_families(body):
                    for sample in family.samples:
                        name = family_of(sample.name, FAMILIES) or sample.name
                        if name in SCENARIOS and sample.value != 0 and not sample.name.endswith("_created"):
                            self.moved.setdefault(name, (component, round(time.monotonic() - self.started_s, 1)))


def _garbage_broker(ctx: zmq.Context, port: int, stop: threading.Event) -> threading.Thread:
    """broker-3: a ROUTER that heartbeats like a broker (so the edge counts it alive and sends it ROIs), never
    answers an ROI (the edge retries them after ``roi_timeout_s``), and answers every message with a frame that
    is not a vcascade header as well (edge malformed). Garbage alone no longer proves a broker alive."""
    sock = make_socket(ctx, zmq.ROUTER)
    sock.bind(f"tcp://127.0.0.1:{port}")
    heartbeat = wire.encode(wire.Heartbeat(sender="broker-3"))

    def serve() -> None:
        while not stop.is_set():
            if sock.poll(100):
                identity = sock.recv_multipart()[0]
                sock.send_multipart([identity, heartbeat])
                sock.send_multipart([identity, b"\xc1 not msgpack"])
        sock.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return thread


def _start(config: Path, kind: str, name: str, *extra: str) -> subprocess.Popen:
    """A component process; stdout and stderr go to files beside the config (a full pipe would block it)."""
    out, err = (open(config.parent / f"{name}.{ext}", "w") for ext in ("out", "err"))
    with out, err:
        return subprocess.Popen(
            [sys.executable, "-m", "vcascade", kind, "--config", str(config), "--name", name, *extra],
            stdout=out, stderr=err, text=True,
        )  # fmt: skip


def _stderr(config: Path, name: str) -> str:
    return (config.parent / f"{name}.err").read_text()


def _check_alive(config: Path, procs: dict[str, subprocess.Popen]) -> None:
    """Brokers and the worker run until the test stops them (edges end with their files); fail at once with the
    stderr of one that exited, rather than wait out the deadline for metrics it will never move."""
    for name, proc in procs.items():
        assert proc.poll() is None or name.startswith("edge"), f"{name} exited: {_stderr(config, name)[-3000:]}"


def _wait_for_worker(config: Path, procs: dict[str, subprocess.Popen], broker_ports: list[int]) -> None:
    """Until every broker's ``vcascade_broker_workers`` gauge is 1 (the worker's models load slowly under load)."""
    deadline = time.monotonic() + DEADLINE_S
    while not all(largest_sample(port, "vcascade_broker_workers") >= 1 for port in broker_ports):
        _check_alive(config, procs)
        assert time.monotonic() < deadline, f"the worker never joined: {_stderr(config, 'worker-1')[-3000:]}"
        time.sleep(0.5)


def _send_malformed(ctx: zmq.Context, broker: dict) -> None:
    """Garbage on broker-1's frontend and backend, and one ROI whose payload is not a JPEG."""
    front = make_socket(ctx, zmq.DEALER)
    front.connect(f"tcp://127.0.0.1:{broker['frontend_port']}")
    back = make_socket(ctx, zmq.DEALER)
    back.connect(f"tcp://127.0.0.1:{broker['backend_port']}")
    front.send_multipart([b"\xc1 garbage"])
    back.send_multipart([b"\xc1 garbage"])
    roi = wire.Roi(roi_id="bad-jpeg-1", camera="cam-a", frame_seq=0, stream_ts_ms=0.0, capture_unix_ms=0.0,
                   xyxy=(0.0, 0.0, 8.0, 8.0), crop_xyxy=(0, 0, 8, 8), class_id=0, score=0.9)  # fmt: skip
    front.send_multipart([wire.encode(roi), b"not a jpeg"])
    time.sleep(1.0)  # let them leave before LINGER cuts the sockets
    front.close()
    back.close()


def test_every_metric_moves_when_its_event_happens(tmp_path, free_port, bikes_path, models_dir):
    config, data = _deployment(tmp_path, free_port, bikes_path)
    ports = {name: cfg["metrics_port"] for section in ("edges", "brokers", "workers")
             for name, cfg in data[section].items() if name != "broker-3"}  # fmt: skip
    staged = {name for name, scenario in SCENARIOS.items() if not scenario.startswith(("covered:", "unstaged:"))}
    ctx, stop_fake = zmq.Context(), threading.Event()
    fake = _garbage_broker(ctx, data["brokers"]["broker-3"]["frontend_port"], stop_fake)
    procs = {name: _start(config, "broker", name) for name in ("broker-1", "broker-2")}
    procs["worker-1"] = _start(config, "worker", "worker-1")
    for edge in ("edge-1", "edge-2"):
        procs[edge] = _start(config, "edge", edge, "--model-dir", str(models_dir), "--log-level", "INFO",
                             "--log-format", "json")  # fmt: skip
    sampler = Sampler(ports)
    sampler.start()
    try:
        deadline = time.monotonic() + DEADLINE_S
        while "vcascade_worker_results_total" not in sampler.moved and time.monotonic() < deadline:
            _check_alive(config, procs)
            time.sleep(0.5)
        _send_malformed(ctx, data["brokers"]["broker-1"])
        while not staged <= set(sampler.moved) and time.monotonic() < deadline:
            _check_alive(config, procs)
            time.sleep(0.5)
    finally:
        sampler.stop.set()
        for proc in procs.values():
            if proc.poll() is None:
                proc.terminate()
        codes = {name: proc.wait(timeout=60) for name, proc in procs.items()}
        stop_fake.set()
        fake.join(timeout=5)
        ctx.term()
    print("first seen moving (component, s after start):", json.dumps(sampler.moved, indent=1))
    never = sorted(staged - set(sampler.moved))
    assert not never, f"never moved: {never}; stderr: {({n: _stderr(config, n)[-1500:] for n in procs})}"
    assert {n: _stderr(config, n)[-1500:] for n, code in codes.items() if code != 0} == {}
    _check_edge_logs({name: _stderr(config, name) for name in procs if name.startswith("edge")})


def _check_edge_logs(stderr: dict[str, str]) -> None:
    """Our lines are JSON naming the component; INFO is per event, far fewer lines than the 250+ frames decoded."""
    for name, text in stderr.items():
        native = [line for line in text.splitlines() if line.strip() and not line.startswith("{")]
        assert all(line.startswith("[") for line in native), native  # FFmpeg/OpenCV's own "[tcp @ ...]" lines
        lines = [json.loads(line) for line in text.splitlines() if line.startswith("{")]
        assert lines
        assert all(line["component"] == "edge" and line["name"] == name for line in lines), text[-2000:]
        info = [line["msg"] for line in lines if line["level"] == "INFO" and "cam-dead" not in line["msg"]]
        assert len(info) < 40, info  # cam-dead logs each reconnect attempt: events, not frames


@pytest.mark.parametrize("name", sorted(n for n, s in SCENARIOS.items() if s.startswith("covered:")))
def test_metrics_staged_elsewhere_are_asserted_there(name):
    path = REPO / SCENARIOS[name].removeprefix("covered:")
    assert name in path.read_text(), f"{path} does not assert {name}"


def test_every_exported_metric_has_a_scenario():
    assert set(SCENARIOS) == set(FAMILIES), (
        f"without a scenario: {sorted(set(FAMILIES) - set(SCENARIOS))}; "
        f"not exported: {sorted(set(SCENARIOS) - set(FAMILIES))}"
    )
