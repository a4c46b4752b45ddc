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


def one_camera_demo(free_port, sinks: list[dict[str, Any]]) -> dict[str, Any]:
    """:func:`demo_data` with camera ``street-1`` alone, ``sinks`` on ``edge-1``, and free ports for ``edge-1``,
    ``broker-1`` and ``worker-1`` (``free_port``: the fixture)."""
    data = demo_data()
    del data["cameras"]["street-2"]
    data["edges"]["edge-1"].update(sinks=sinks, metrics_port=free_port())
    data["brokers"]["broker-1"].update(frontend_port=free_port(), backend_port=free_port(), metrics_port=free_port())
    data["workers"]["worker-1"]["metrics_port"] = free_port()
    return data


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
