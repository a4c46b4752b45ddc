"""How a benchmark with a goal ends: its result printed as JSON, written to ``--json`` when given, and an exit code
saying whether the goal was met."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def finish(result: dict[str, Any], json_path: Path | None) -> int:
    """Print ``result`` as indented JSON, also write it to ``json_path`` when given; 0 if ``result["within_goal"]``
    is true, else 1."""
    text = json.dumps(result, indent=1)
    print(text)
    if json_path:
        json_path.write_text(text + "\n")
    return 0 if result["within_goal"] else 1
