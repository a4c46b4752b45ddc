"""Every file of ../shared/media/bad-inputs/ (hard inputs from public bug reports) read by a real CameraReader,
checked against what its README documents (FFmpeg's own decoding is the reference)."""

from __future__ import annotations

import logging
import shutil
import subprocess
import sys
from pathlib import Path

import av
import pytest
from prometheus_client import REGISTRY

REPO = Path(__file__).resolve().parents[3]
# The corpus comes from the ``bad_inputs`` fixture (tests/conftest.py, tests/media.py): $VCASCADE_TEST_MEDIA is the
# folder holding bad-inputs/ or bad-inputs/ itself; a missing corpus fails each test with the folders tried.


def ffprobe_pts_ms(path: Path) -> list[float]:
    """Frame PTS of the first video stream from the stream start, ms, as ffprobe reports them."""
    out = subprocess.run(["ffprobe", "-v", "error", "-select_streams", "v:0", "-show_entries", "frame=pts_time",
                          "-of", "csv=p=0", str(path)], capture_output=True, text=True, check=True).stdout
    pts = [float(line.strip().strip(",")) * 1000.0 for line in out.splitlines() if line.strip()]
    return [p - pts[0] for p in pts]


@pytest.fixture
def media(tmp_path, bad_inputs):
    """A copy of one bad-input file (the corpus is read-only)."""
    def copy(name: str) -> Path:
        return Path(shutil.copy(bad_inputs / name, tmp_path / name))
    return copy


@pytest.mark.parametrize("name", ["ten.mp4", "ten.ts"])
def test_reference_files_give_250_frames_nothing_corrupt(read_all, media, name):
    reader, frames = read_all(media(name))
    assert (reader.state, reader.reason, len(frames)) == ("ended", "end_of_file", 250)
    assert [f.stream_ts_ms for f in frames] == pytest.approx([40.0 * i for i in range(250)])
    assert reader.corrupt_frames == 0


def test_raw_h264_gets_timestamps_from_its_frame_rate_and_detect_fps_works(read_all, media):
    reader, frames = read_all(media("ten.h264"))
    assert (reader.state, len(frames), reader.corrupt_frames) == ("ended", 250, 0)
    assert [f.stream_ts_ms for f in frames] == pytest.approx([40.0 * i for i in range(250)])
    reader, frames = read_all(media("ten.h264"), detect_fps=5)
    assert len(frames) == 50 and reader.rate_skipped == 200  # as for ten.mp4
    assert read_all(media("ten.mp4"), detect_fps=5)[1].__len__() == 50


def test_variable_frame_rate_is_the_stream_pts_and_never_a_gap(read_all, media):
    path = media("vfr.mp4")
    reader, frames = read_all(path)
    assert (reader.state, len(frames), reader.corrupt_frames) == ("ended", 100, 0)
    assert [f.stream_ts_ms for f in frames] == pytest.approx(ffprobe_pts_ms(path), abs=0.5)


def test_stream_joined_mid_gop_counts_the_units_before_its_keyframe(read_all, media, caplog):
    lines = {"edge": "edge", "camera": "cam", "level": "error"}
    before = REGISTRY.get_sample_value("vcascade_edge_ffmpeg_log_lines_total", lines) or 0.0
    with caplog.at_level(logging.DEBUG, logger="vcascade.edge.ffmpeg"):
        reader, frames = read_all(media("noidr.h264"))
    assert (reader.state, len(frames)) == ("ended", 200)
    ts = [f.stream_ts_ms for f in frames]
    assert ts == sorted(set(ts))
    assert reader.losses == {"before_keyframe": 40}
    ffmpeg_lines = [r for r in caplog.records if r.name == "vcascade.edge.ffmpeg"]
    assert ffmpeg_lines and all(r.levelno == logging.DEBUG for r in ffmpeg_lines)
    assert any("camera cam: [h264] non-existing PPS 0 referenced" in r.getMessage() for r in ffmpeg_lines)
    assert REGISTRY.get_sample_value("vcascade_edge_ffmpeg_log_lines_total", lines) > before


def test_noisy_bitstream_is_read_to_the_end_with_damage_counted(read_all, media):
    reader, frames = read_all(media("noisy.mp4"))
    assert (reader.state, reader.reason) == ("ended", "end_of_file")
    assert len(frames) == 249  # as FFmpeg: concealed frames are delivered
    counts = reader.losses
    # 19 frames the decoder flags corrupt (one of them after a missing-reference message) + 1 undecodable packet
    assert counts.get("corrupt", 0) + counts.get("missing_reference", 0) == 20 and "pts_gap" not in counts


def test_video_among_eight_audio_streams_is_read_whole(read_all, media):
    reader, frames = read_all(media("multi.mkv"))
    assert (reader.state, reader.reason) == ("ended", "end_of_file")
    assert [f.stream_ts_ms for f in frames] == pytest.approx([0.0, 20000.0, 40000.0, 60000.0])
    assert reader.corrupt_frames == 0


def test_transport_stream_cut_short_counts_the_frames_lost_at_the_cut(read_all, media):
    reader, frames = read_all(media("trunc.ts"))
    assert len(frames) == 118
    assert [f.stream_ts_ms for f in frames][-2:] == pytest.approx([4640.0, 4800.0])
    assert reader.losses == {"pts_gap": 3}
    # the demuxer does not flag its last packet incomplete (video PES without a length): nothing more to see
    assert reader.state == "ended"


def _video_packets(path: Path) -> list[tuple[int, int, bool]]:
    with av.open(str(path)) as container:
        return [(p.pts, p.size, p.is_corrupt) for p in container.demux(video=0) if p.size]


def test_transport_stream_cut_on_a_pes_boundary_leaves_every_packet_whole(bad_inputs):
    """Why trunc.ts cannot be told from a finished file: the cut falls where the next video PES packet starts, so
    the demuxer returns the first 118 packets of ten.ts byte for byte, none flagged corrupt."""
    cut, whole = _video_packets(bad_inputs / "trunc.ts"), _video_packets(bad_inputs / "ten.ts")
    assert len(cut) == 118 and cut == whole[: len(cut)]
    assert not any(corrupt for _, _, corrupt in cut)
    data = (bad_inputs / "trunc.ts").read_bytes()
    assert len(data) % 188 == 0
    after = (bad_inputs / "ten.ts").read_bytes()[len(data) : len(data) + 188]
    assert after[1] & 0x40, "the first TS packet after the cut starts a new PES packet (payload_unit_start)"


def test_a_trimmed_file_leaves_the_same_hole_at_its_end_and_is_no_error(read_all, tmp_path, bad_inputs):
    """A file FFmpeg itself trims by stream copy (``-c copy -t``, a finished MP4 with its index) ends, like
    trunc.ts, with a reference frame whose B-frames were left out: the hole at the end is counted, and a rule
    calling it truncation would fail this valid file."""
    trimmed = tmp_path / "trimmed.mp4"
    subprocess.run(["ffmpeg", "-v", "error", "-y", "-i", str(bad_inputs / "ten.mp4"), "-c", "copy", "-t", "4.7",
                    str(trimmed)], check=True)
    reader, frames = read_all(str(trimmed))
    assert (reader.state, reader.reason) == ("ended", "end_of_file")
    assert len(frames) == 120 and reader.losses == {"pts_gap": 1}


def test_truncated_container_is_an_error(read_all, tmp_path, bad_inputs):
    whole = tmp_path / "faststart.mp4"  # ten.mp4 with its index first, then cut in the middle of its frames
    subprocess.run(["ffmpeg", "-v", "error", "-y", "-i", str(bad_inputs / "ten.mp4"), "-c", "copy", "-movflags",
                    "+faststart", str(whole)], check=True)
    cut = tmp_path / "cut.mp4"
    cut.write_bytes(whole.read_bytes()[:30_000])
    reader, frames = read_all(cut)
    assert 0 < len(frames) < 250
    assert (reader.state, reader.reason) == ("failed", "truncated_file") and "truncated" in reader.error


def test_ffmpeg_warnings_never_reach_the_terminal_raw(media):
    """A separate process reads noidr.h264 (FFmpeg warns 'non-existing PPS'): nothing of FFmpeg on its stderr."""
    path = media("noidr.h264")
    code = (
        "import threading, sys\n"
        "from vcascade.core.config import CameraConfig\n"
        "from vcascade.edge.capture.frames import FrameSlots\n"
        "from vcascade.edge.capture.source import CameraReader\n"
        "slots = FrameSlots()\n"
        f"reader = CameraReader('edge', 'cam', CameraConfig(url={str(path)!r}, edge='e'), slots, threading.Event())\n"
        "reader.start()\n"
        "while not slots.finished():\n"
        "    slots.take(0.2)\n"
        "reader.join(30)\n"
        "print(reader.frames, reader.losses)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "200 {'before_keyframe': 40}"
    assert "PPS" not in done.stderr and "h264" not in done.stderr, done.stderr


def test_frames_decoded_without_their_reference_are_counted(read_all, tmp_path, bad_inputs):
    """ten.h264 with one P-frame access unit removed: FFmpeg decodes the rest (249) and says references are
    missing for the frames that pointed at it."""
    with av.open(str(bad_inputs / "ten.h264")) as source:
        units = [(bytes(p), p.is_keyframe) for p in source.demux(source.streams.video[0]) if p.size]
    assert not units[5][1]  # a P-frame in the first GOP (keyframes every 50)
    path = tmp_path / "lost_unit.h264"
    path.write_bytes(b"".join(data for i, (data, _) in enumerate(units) if i != 5))
    reader, frames = read_all(path)
    assert (reader.state, len(frames)) == ("ended", 249)
    assert reader.losses.get("missing_reference", 0) >= 1 and "pts_gap" not in reader.losses, reader.losses
