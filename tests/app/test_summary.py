"""The end-of-run summary shows each edge sink's lines written and lost (issue 17, case 9: the summary said nothing
about 2,821 lines lost on a full disk)."""

from __future__ import annotations

from rich.console import Console

from vcascade.app.summary import summary_tables

CAMERA = {"frames": 10, "state": "ended", "error": None, "sent": 3, "results": 2, "drops": {"timeout": 1},
          "p50_ms": 10.0, "p99_ms": 20.0}  # fmt: skip


def _render(tables) -> str:
    console = Console(width=200, record=True)
    for table in tables:
        console.print(table)
    return console.export_text()


def test_edge_sinks_get_a_row_each_with_lines_written_and_lost():
    edge = {"component": "edge", "name": "e1", "final": True, "cameras": {"cam": CAMERA}, "sinks": {
        "jsonl[0]": {"written": {"ok": 2, "dropped": 1}, "lost": {}},
        "jsonl[1]": {"written": {"ok": 1}, "lost": {"disk_full": 2}},
    }}  # fmt: skip
    tables = summary_tables({("edge", "e1"): edge}, 1.0)
    assert [table.title for table in tables] == ["vcascade run summary (1.0 s)", "brokers and workers", "edge sinks"]
    rows = [line for line in _render(tables[2:]).splitlines() if "jsonl[" in line]
    assert [row.split() for row in rows] == [
        ["│", "edge", "e1", "│", "jsonl[0]", "│", "dropped", "1,", "ok", "2", "│", "0", "│"],
        ["│", "edge", "e1", "│", "jsonl[1]", "│", "ok", "1", "│", "disk_full", "2", "│"],
    ]


def test_without_sinks_there_is_no_sinks_table():
    edge = {"component": "edge", "name": "e1", "final": True, "cameras": {"cam": CAMERA}}
    assert [table.title for table in summary_tables({("edge", "e1"): edge}, 1.0)][2:] == []
