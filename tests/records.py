"""Reading an edge's JSONL sink in tests. Every record has a ``kind``: ``result`` (ROI results, counted drops,
``tracked`` detections; what the edge's books count), ``event``/``event_update`` (analytics) and ``camera_state``
(docs/SINKS.md). Tests of the books read the result lines alone."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def read_records(path: Path) -> list[dict[str, Any]]:
    """Every whole record of a JSONL sink file, in order (none while the file does not exist; a line still being
    written, without its closing brace, is left out)."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.endswith("}")]


def result_lines(path: Path) -> list[dict[str, Any]]:
    """The ``kind: "result"`` records of a JSONL sink file: one per ROI (``ok`` or ``dropped``) and per ``tracked``
    detection."""
    return [record for record in read_records(path) if record["kind"] == "result"]
