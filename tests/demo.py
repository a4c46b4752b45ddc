"""configs/demo.yaml for the tests: as shipped (two recognizers), or reduced to its embedder alone.

Most tests exercise one path (edge, broker, the MobileNetV2 embedder's worker) and start only ``worker-1``;
the shipped demo also routes vehicles to the PP-OCR text recognizer of ``worker-2``, whose ROIs would wait for
a worker those tests never start. tests/e2e/test_run_demo.py runs the demo as shipped.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

DEMO = Path(__file__).resolve().parents[1] / "configs" / "demo.yaml"
EMBEDDER, TEXT = "mobilenetv2-embedder", "ppocr-text"


def demo_data(both_recognizers: bool = False) -> dict[str, Any]:
    """configs/demo.yaml as a dict; unless ``both_recognizers``, only the embedder, ``worker-1`` and no routes."""
    data = yaml.safe_load(DEMO.read_text())
    if not both_recognizers:
        data["recognizers"] = {EMBEDDER: data["recognizers"][EMBEDDER]}
        data["workers"] = {name: w for name, w in data["workers"].items() if w["recognizer"] == EMBEDDER}
        for edge in data["edges"].values():
            edge.get("roi", {}).pop("routes", None)
    return data
