"""tools/gen_metrics_docs.py: docs/OBSERVABILITY.md's metric table is the registry's, and only the table is
rewritten."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tools.gen_metrics_docs import BEGIN, END, render

from vcascade.app.metric_list import exported_families

REPO = Path(__file__).resolve().parents[2]


def test_the_metric_table_in_the_docs_is_current():
    proc = subprocess.run([sys.executable, "-m", "tools.gen_metrics_docs", "--check"], capture_output=True, text=True, timeout=60,
                          cwd=REPO)
    assert proc.returncode == 0, proc.stderr


def test_the_table_has_one_row_per_family_and_the_page_around_it_is_kept():
    page = render(f"# title\n\ntext before\n{BEGIN}\nstale rows\n{END}\n\ntext after\n")
    assert page.startswith(f"# title\n\ntext before\n{BEGIN}\n| metric | type | labels | help |\n")
    assert page.endswith(f"\n{END}\n\ntext after\n") and "stale rows" not in page
    rows = [line for line in page.splitlines() if line.startswith("| `")]
    families = exported_families()
    assert [row.split("`")[1] for row in rows] == list(families)
    hop = families["vcascade_edge_hop_seconds"]
    assert f"| `{hop.name}` | histogram | edge, camera, hop | {hop.help} |" in rows


def test_a_page_without_the_markers_is_refused():
    with pytest.raises(ValueError, match="BEGIN metric table"):
        render("# no table here\n")
