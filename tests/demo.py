"""configs/demo.yaml for the tests: as shipped (two recognizers), or reduced to its embedder alone.

Most tests exercise one path (edge, broker, the MobileNetV2 embedder's worker) and start only ``worker-1``;
the shipped demo also routes vehicles to the PP-OCR text recognizer of ``worker-2``, whose ROIs would wait for
a worker those tests never start. tests/e2e/test_run_demo.py runs the demo as shipped.

The shipped embedder runs with ``engine: onnxruntime`` and ``split_points: auto``; the tests here run it with
torch at the split point ``features.3`` (:data:`TORCH_EMBEDDER`), the path most center tests check bit for bit,
and one that starts without an export and a profile. tests/center/stages/test_torch_onnx.py checks the ONNX Runtime
engine against torch.
"""

from __future__ import annotations

import http.client
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import yaml
from prometheus_client.parser import text_string_to_metric_families

DEMO = Path(__file__).resolve().parents[1] / "configs" / "demo.yaml"
EMBEDDER, TEXT = "mobilenetv2-embedder", "ppocr-text"
TORCH_EMBEDDER = {"engine": "torch", "split_points": ["features.3"]}


def demo_data(both_recognizers: bool = False, torch_embedder: bool = True) -> dict[str, Any]:
    """configs/demo.yaml as a dict; unless ``both_recognizers``, only the embedder, ``worker-1`` and no routes;
    with ``torch_embedder``, the embedder on torch split at ``features.3`` (:data:`TORCH_EMBEDDER`)."""
    data = yaml.safe_load(DEMO.read_text())
    if torch_embedder:
        data["recognizers"][EMBEDDER].update(TORCH_EMBEDDER)
    if not both_recognizers:
        data["recognizers"] = {EMBEDDER: data["recognizers"][EMBEDDER]}
        data["workers"] = {name: w for name, w in data["workers"].items() if w["recognizer"] == EMBEDDER}
        for edge in data["edges"].values():
            edge.get("roi", {}).pop("routes", None)
    return data


def free_ports(data: dict[str, Any], free_port) -> dict[str, Any]:
    """``data`` with free ports for every edge, broker and worker (metrics; a broker's frontend and backend), so
    that tests running in parallel never meet (``free_port``: the fixture)."""
    for edge in data["edges"].values():
        edge["metrics_port"] = free_port()
    for broker in data["brokers"].values():
        broker.update(frontend_port=free_port(), backend_port=free_port(), metrics_port=free_port())
    for worker in data["workers"].values():
        worker["metrics_port"] = free_port()
    return data


def one_camera_demo(free_port, sinks: list[dict[str, Any]]) -> dict[str, Any]:
    """:func:`demo_data` with camera ``street-1`` alone, ``sinks`` on ``edge-1``, and free ports
    (:func:`free_ports`)."""
    data = demo_data()
    del data["cameras"]["street-2"]
    data["edges"]["edge-1"]["sinks"] = sinks
    return free_ports(data, free_port)


def short_demo(tmp_path: Path, free_port, frames: int | None, both_recognizers: bool = False) -> dict[str, Any]:
    """:func:`demo_data` whose cameras stop after ``frames`` frames (None: at the video's end), with ``edge-1``'s
    result lines in ``tmp_path/results.jsonl`` (its one sink, truncated at start) and free ports
    (:func:`free_ports`): the end-to-end tests' run of the demo."""
    data = demo_data(both_recognizers=both_recognizers)
    for cam in data["cameras"].values():
        if frames is not None:
            cam["max_frames"] = frames
    data["edges"]["edge-1"]["sinks"] = [{"type": "jsonl", "path": str(tmp_path / "results.jsonl"), "mode": "truncate"}]
    return free_ports(data, free_port)


def write_deployment(tmp_path: Path, data: dict[str, Any], name: str = "deploy.yaml") -> Path:
    """``data`` as the YAML file ``tmp_path/name``."""
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data))
    return path


def start_run(config: Path, models_dir: Path, summary: Path, *args: str, **popen: Any) -> subprocess.Popen:
    """``vcascade run CONFIG --model-dir MODELS_DIR --summary-json SUMMARY ARGS...`` as a child process working in
    the config's folder, its stdout and stderr together as text on ``proc.stdout``; ``popen``: more arguments of
    :class:`subprocess.Popen` (``start_new_session``)."""
    return subprocess.Popen(
        [sys.executable, "-m", "vcascade", "run", str(config), "--model-dir", str(models_dir),
         "--summary-json", str(summary), *args],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=config.parent, **popen,
    )  # fmt: skip


def torch_demo_text() -> str:
    """configs/demo.yaml's text (comments kept) with the embedder on torch, split at ``features.3``."""
    text = DEMO.read_text()
    start = text.index("    engine: onnxruntime")
    end = text.index("\n", text.index("    split_points: auto", start)) + 1
    return text[:start] + "    split_points: [features.3]\n" + text[end:]


def scrape_metrics(port: int) -> str:
    """The text of ``/metrics`` on 127.0.0.1:``port``, or "" while nothing answers there, including a process
    that exits in the middle of its answer (``http.client.IncompleteRead``)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=1) as resp:
            return resp.read().decode()
    except (OSError, http.client.HTTPException):
        return ""


def largest_sample(port: int, name: str) -> float:
    """The largest value of the samples named ``name`` on 127.0.0.1:``port``'s ``/metrics`` (whatever their
    labels); 0 while nothing answers there or no such sample exists yet."""
    text = scrape_metrics(port)
    return max((s.value for f in text_string_to_metric_families(text) for s in f.samples if s.name == name),
               default=0.0)  # fmt: skip
