"""The end-of-run summary shows each edge sink's lines written and lost (issue 17, case 9: the summary said nothing
about 2,821 lines lost on a full disk)."""

from __future__ import annotations

from rich.console import Console

from tests.demo import demo_data
from vcascade.app.summary import camera_faults, frame_losses, starting_line, summary_tables
from vcascade.core.config import Deployment

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


def test_the_history_gets_a_row_with_records_stored_and_dropped():
    edge = {"component": "edge", "name": "e1", "final": True, "cameras": {"cam": CAMERA},
            "history": {"stored": {"result": 2, "camera_state": 3}, "dropped": {"disk_full": 1}, "queued": 0}}
    tables = summary_tables({("edge", "e1"): edge}, 1.0)
    assert tables[2].title == "edge sinks"
    (row,) = [line.split() for line in _render(tables[2:]).splitlines() if "history" in line]
    assert row == ["│", "edge", "e1", "│", "history", "│", "camera_state", "3,", "result", "2", "│", "disk_full", "1",
                   "│"]


def test_without_sinks_there_is_no_sinks_table():
    edge = {"component": "edge", "name": "e1", "final": True, "cameras": {"cam": CAMERA}}
    assert [table.title for table in summary_tables({("edge", "e1"): edge}, 1.0)][2:] == []


def test_a_failed_camera_keeps_the_columns_intact_and_its_reason_is_listed_below_the_table():
    """Issue 18: the long reason sat in the state cell and squeezed every other column to ``st…``, ``fr…``."""
    failed = {**CAMERA, "frames": 0, "sent": 0, "results": 0, "drops": {}, "p50_ms": None, "p99_ms": None,
              "state": "failed", "reason": "open_failed",
              "error": "/data/garbage.mp4: cannot open (FFmpeg could not read a video stream from it)"}  # fmt: skip
    edge = {"component": "edge", "name": "e1", "final": True, "cameras": {"good": CAMERA, "garbage": failed}}
    console = Console(width=100, record=True)  # narrower than the error line
    console.print(summary_tables({("edge", "e1"): edge}, 1.0)[0])
    text = console.export_text()
    header = next(line for line in text.splitlines() if "camera" in line and "accounted" in line)
    assert [cell.strip() for cell in header.split("┃")[1:-1]] == [
        "camera", "state", "frames", "fps", "decoder", "sent", "results", "drops", "accounted", "p50 ms", "p99 ms"
    ]  # fmt: skip
    row = next(line for line in text.splitlines() if line.startswith("│ garbage"))
    assert [cell.strip() for cell in row.split("│")[1:-1]] == ["garbage", "failed", "0", "-", "-", "0", "0", "0", "yes", "-", "-"]
    below = text[text.index(row):]
    assert "camera garbage: failed (open_failed): /data/garbage.mp4: cannot open" in " ".join(below.split())


def test_a_camera_that_never_read_a_frame_is_a_fault_even_when_it_ended():
    """Issue 18: after Ctrl-C a never-connected camera showed as ``ended``, 0 frames, and no problem line."""
    never = {**CAMERA, "frames": 0, "sent": 0, "results": 0, "drops": {}, "state": "ended", "reason": "stopped"}
    refused = {**never, "fault": "connection_refused", "detail": "rtsp://cam/1: Connection refused"}
    assert camera_faults({"good": CAMERA, "dead": never, "gone": refused}) == [
        "camera dead: ended (stopped) without reading a frame (never connected)",
        "camera gone: ended (stopped) without reading a frame (never connected; last fault connection_refused: "
        "rtsp://cam/1: Connection refused)",
    ]
    assert camera_faults({"good": CAMERA}) == []


def test_frames_lost_or_damaged_are_listed_below_the_table_by_reason():
    cut = {**CAMERA, "losses": {"pts_gap": 3}}
    noisy = {**CAMERA, "losses": {"corrupt": 20, "missing_reference": 2, "before_keyframe": 0}}
    cameras = {"clean": {**CAMERA, "losses": {}}, "trunc": cut, "noisy": noisy}
    assert frame_losses(cameras) == ["camera noisy: 22 frames lost or damaged (corrupt 20, missing_reference 2)",
                                     "camera trunc: 3 frames lost or damaged (pts_gap 3)"]
    edge = {"component": "edge", "name": "e1", "final": True, "cameras": cameras}
    assert "camera trunc: 3 frames lost or damaged (pts_gap 3)" in _render(summary_tables({("edge", "e1"): edge}, 1.0))


def test_the_start_up_line_counts_each_kind_and_says_what_it_waits_for():
    data = demo_data()
    assert starting_line(Deployment.model_validate(data)).startswith("starting 1 broker, 1 worker, 1 edge: ")
    data["workers"]["worker-9"] = dict(data["workers"]["worker-1"], metrics_port=19998)
    data["edges"]["edge-9"] = dict(data["edges"]["edge-1"], metrics_port=19999)
    data["cameras"]["street-2"]["edge"] = "edge-9"
    line = starting_line(Deployment.model_validate(data))
    assert line.startswith("starting 1 broker, 2 workers, 2 edges: ") and "once every worker has loaded" in line


def test_a_camera_removed_on_purpose_is_removed_and_no_problem():
    """Issue 27: a camera taken out with ``vcascade camera remove`` was reported as ``problem:`` at shutdown (it had
    ended, ``stopped``, and a live one that never connected had read no frame)."""
    removed = {**CAMERA, "frames": 0, "sent": 0, "results": 0, "drops": {}, "p50_ms": None, "p99_ms": None,
               "state": "ended", "reason": "stopped", "removal": "closed",
               "fault": "connection_refused", "detail": "rtsp://cam/1: Connection refused"}  # fmt: skip
    failed = {**removed, "state": "failed", "reason": "missing_file", "error": "/data/gone.mp4: no such file"}
    assert camera_faults({"good": CAMERA, "unplugged": removed, "typo": failed}) == []
    edge = {"component": "edge", "name": "e1", "final": True, "cameras": {"good": CAMERA, "unplugged": removed}}
    text = _render(summary_tables({("edge", "e1"): edge}, 1.0))
    row = next(line for line in text.splitlines() if line.startswith("│ unplugged"))
    assert row.split("│")[2].strip() == "removed"
    assert "camera unplugged: removed at run time after 0 frames (books closed)" in text
    assert "never connected" not in text


def test_each_camera_row_shows_its_measured_decode_rate():
    cameras = {"fast": {**CAMERA, "fps": 24.87}, "slow": {**CAMERA, "fps": 1.0}, "new": {**CAMERA, "fps": None}}
    edge = {"component": "edge", "name": "e1", "final": True, "cameras": cameras}
    text = _render(summary_tables({("edge", "e1"): edge}, 1.0)[:1])
    fps = {cells[0]: cells[3] for line in text.splitlines() if line.startswith("│ ")
           and len(cells := [c.strip() for c in line.split("│")[1:-1]]) == 11}  # fmt: skip
    assert fps == {"fast": "24.9", "slow": "1.0", "new": "-"}


def test_decoder_in_use_is_a_column_and_hardware_fallbacks_are_listed_below():
    cameras = {"gpu": {**CAMERA, "decoder": "cuda"},
               "cpu": {**CAMERA, "decoder": "software", "decoder_fallbacks": {"cuda:no_device": 2, "qsv:not_in_ffmpeg": 2}}}
    edge = {"component": "edge", "name": "e1", "final": True, "cameras": cameras}
    text = _render(summary_tables({("edge", "e1"): edge}, 1.0)[:1])
    decoder = {cells[0]: cells[4] for line in text.splitlines() if line.startswith("│ ")
               and len(cells := [c.strip() for c in line.split("│")[1:-1]]) == 11}  # fmt: skip
    assert decoder == {"gpu": "cuda", "cpu": "software"}
    assert ("camera cpu: decoding with software; hardware not used (cuda no_device 2, qsv not_in_ffmpeg 2)"
            in " ".join(text.split()))
