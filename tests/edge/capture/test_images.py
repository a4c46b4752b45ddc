"""Image sequences (FFmpeg image2 patterns) and single images are cameras: every image a frame, then the end."""

from __future__ import annotations

import shutil

import pytest


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    """12 JPEGs img001.jpg ... img012.jpg (160x120 test pattern) and one PNG still, made with ffmpeg."""
    import subprocess

    folder = tmp_path_factory.mktemp("images")
    ffmpeg = shutil.which("ffmpeg") or "ffmpeg"
    subprocess.run([ffmpeg, "-v", "error", "-y", "-f", "lavfi", "-i", "testsrc2=size=160x120:rate=25", "-frames:v",
                    "12", "-threads", "1", str(folder / "img%03d.jpg")], check=True)
    subprocess.run([ffmpeg, "-v", "error", "-y", "-f", "lavfi", "-i", "testsrc2=size=160x120:rate=25", "-frames:v",
                    "1", "-threads", "1", str(folder / "still.png")], check=True)
    return folder


@pytest.mark.parametrize("pattern", ["img%03d.jpg", "img*.jpg"])
def test_image_sequence_gives_every_image_at_25_frames_per_second(read_all, images, pattern):
    reader, frames = read_all(images / pattern)
    assert reader.state == "ended" and reader.reason == "end_of_file", reader.detail
    assert len(frames) == reader.frames == 12 and reader.corrupt_frames == 0, reader.losses
    assert [f.stream_ts_ms for f in frames] == pytest.approx([40.0 * i for i in range(12)])
    assert frames[0].image.shape == (120, 160, 3)
    assert reader.policy == "every_frame"


@pytest.mark.parametrize("name", ["still.png", "img005.jpg"])
def test_single_image_is_one_frame_then_the_end(read_all, images, name):
    reader, frames = read_all(images / name)
    assert (reader.state, reader.reason, len(frames), reader.corrupt_frames) == ("ended", "end_of_file", 1, 0)
    assert frames[0].image.shape == (120, 160, 3) and frames[0].stream_ts_ms == 0.0


@pytest.mark.parametrize("pattern", ["shot%03d.jpg", "shot*.jpg"])
def test_pattern_matching_no_file_fails_saying_so(read_all, images, pattern):
    reader, frames = read_all(images / pattern)
    assert (reader.state, reader.fault, frames) == ("failed", "missing_file", [])
    assert "no file matches this image sequence pattern" in reader.error, reader.error


def test_decode_rate_of_a_paced_file_is_its_frame_rate_at_most(read_all, short_video):
    """``realtime: true`` releases the 10 fps file at its PTS pace: the measured rate is about 10 frames/s, never
    more (a reader that falls behind never bursts to catch up)."""
    reader, frames = read_all(short_video, realtime=True)
    assert len(frames) == 10 and reader.decode_fps is not None
    assert 4.0 < reader.decode_fps <= 10.5, reader.decode_fps


def test_decode_rate_is_unknown_before_two_frames(read_all, images):
    reader, frames = read_all(images / "still.png")
    assert len(frames) == 1 and reader.decode_fps is None
