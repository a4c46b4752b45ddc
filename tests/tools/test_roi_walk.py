"""tools/roi_walk.py's short form: the demo deployment runs until each recognizer answered two ROIs, and the
modules that ran on the person ROI's way (measured in every component process) are among those listed in
docs/DESIGN.md's "Following one ROI in the code", each listed once, and no more than the count it gives."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.demo import EMBEDDER, TEXT

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
DOCUMENTED = re.compile(r"(?i)the person ROI's walk is \*\*(\d+) files\*\*")
"""How docs/DESIGN.md states the measured walk of the demo's person ROI."""
ON_EVERY_WALK = ["vcascade.edge.capture.source", "vcascade.edge.detection.pool", "vcascade.edge.link.broker_link",
                 "vcascade.broker.server", "vcascade.center.worker", "vcascade.center.stages.engine",
                 "vcascade.core.protocol.wire", "vcascade.edge.sinks.lines"]  # fmt: skip
"""Modules no ROI can pass by: camera to sink, through the broker and a worker."""


def documented_walk() -> int:
    (count,) = DOCUMENTED.findall((REPO / "docs" / "DESIGN.md").read_text())
    return int(count)


def documented_modules() -> list[str]:
    """The modules the walk's table in docs/DESIGN.md lists, as dotted names: a name without a folder is in the
    folder of the last name with one in its row."""
    text = (REPO / "docs" / "DESIGN.md").read_text()
    table = text[text.index("| # | file | what happens |"):text.index("Branches: what other deployments")]
    modules = []
    for row in re.findall(r"^\| \d+ \| (.*?) \|", table, flags=re.MULTILINE):
        folder = ""
        for name in re.findall(r"`([\w/]+)\.py`", row):
            folder, path = (name.rpartition("/")[0], name) if "/" in name else (folder, f"{folder}/{name}")
            dotted = path.replace("/", ".")
            modules.append(dotted if dotted.startswith("vcascade.") else f"vcascade.{dotted}")
    return modules


def test_the_demo_person_roi_walk_stays_within_the_documented_count(tmp_path, models_dir):
    out = tmp_path / "walk.json"
    proc = subprocess.run(
        [sys.executable, "-m", "tools.roi_walk", "--model-dir", str(models_dir), "--answers", "2",
         "--json", str(out)],
        capture_output=True, text=True, timeout=900, cwd=REPO, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["answered"][EMBEDDER] >= 2 and result["answered"][TEXT] >= 2
    assert {f"{p['kind']} {p['name']}" for p in result["processes"] if p["recording"] and p["stopped"]} == {
        "edge edge-1", "broker broker-1", "worker worker-1", "worker worker-2"}
    person, text = result["walks"][EMBEDDER], result["walks"][TEXT]
    assert set(ON_EVERY_WALK) <= set(person["modules"]) and set(ON_EVERY_WALK) <= set(text["modules"])
    head = "vcascade.center.identity.head"  # the embedding head: the person ROI's, never the text ROI's
    assert head in person["modules"] and head not in text["modules"]
    assert not any(m.startswith("vcascade.app.") for m in result["walks"]["all"]["modules"])
    assert person["files"] == len(person["modules"]) == sum(person["per_component"].values())
    listed = documented_modules()
    assert len(listed) == len(set(listed)) == documented_walk()  # each module once, as many as the count says
    assert set(person["modules"]) <= set(listed), sorted(set(person["modules"]) - set(listed))
    assert person["files"] <= documented_walk()
    assert f"walk of {EMBEDDER}'s ROIs" in proc.stdout
