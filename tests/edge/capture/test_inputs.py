"""Broken and unusual inputs made with ffmpeg: VFR timestamps, rotation, gray, odd sizes, alpha, corrupt,
truncated, zero-byte and undecodable files. A bad camera fails alone; the others keep running."""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
from pathlib import Path

import numpy as np
import pytest

from vcascade.core.config import CameraConfig
from vcascade.edge.capture.kinds import normalize_image
from vcascade.edge.detection import YoloxDetector
from vcascade.edge.capture.frames import FrameSlots
from vcascade.edge.capture.source import CameraReader


def ffmpeg(*args: str) -> None:
    done = subprocess.run(["ffmpeg", "-v", "error", "-y", *args, "-threads", "1"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def ffprobe_pts_ms(path: Path) -> list[float]:
    """Frame PTS of the first video stream, ms, as ffprobe reports them (an independent reading)."""
    out = subprocess.run(
        ["ffprobe", "-v", "error", "-select_streams", "v:0", "-show_entries", "frame=pts_time", "-of", "csv=p=0",
         str(path)], capture_output=True, text=True, check=True,
    ).stdout
    return [float(line.strip().strip(",")) * 1000.0 for line in out.splitlines() if line.strip()]


def x264(path: Path, seconds: float = 2.0, size: str = "160x120", rate: int = 10, *extra: str) -> Path:
    ffmpeg("-f", "lavfi", "-i", f"testsrc2=size={size}:rate={rate}", "-t", str(seconds), *extra,
           "-c:v", "libx264", "-preset", "ultrafast", "-bf", "0", "-g", "10", "-pix_fmt", "yuv420p", str(path))
    return path


@pytest.fixture(scope="module")
def videos(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("inputs")


def test_variable_frame_rate_timestamps_are_the_stream_pts(read_all, videos):
    path = videos / "vfr.mp4"
    ffmpeg("-f", "lavfi", "-i", "testsrc2=size=160x120:rate=10", "-t", "3",
           "-vf", "settb=1/1000,setpts='if(lt(N,10),N*100,1000+(N-10)*300)'", "-fps_mode", "passthrough",
           "-c:v", "libx264", "-preset", "ultrafast", "-bf", "0", "-video_track_timescale", "1000", str(path))
    expected = ffprobe_pts_ms(path)
    assert expected[9:12] == pytest.approx([900.0, 1000.0, 1300.0])  # the VFR step we made is in the file
    reader, frames = read_all(path)
    assert reader.state == "ended" and reader.error is None
    assert [f.stream_ts_ms for f in frames] == pytest.approx(expected, abs=0.5)
    assert reader.corrupt_frames == 0  # a 3x slower frame rate is not mistaken for lost frames


def test_rotation_metadata_gives_upright_frames(read_all, videos):
    rotated = videos / "rotated.mp4"
    ffmpeg("-i", str(x264(videos / "plain.mp4", 1.0, "160x120")), "-c", "copy", "-metadata:s:v", "rotate=90",
           str(rotated))
    _, frames = read_all(rotated)
    assert frames[0].image.shape == (160, 120, 3)  # display orientation: portrait
    # reference: ffmpeg's own auto-rotation (what players show), decoded to raw BGR
    raw = subprocess.run(["ffmpeg", "-v", "error", "-i", str(rotated), "-frames:v", "1", "-f", "rawvideo",
                          "-pix_fmt", "bgr24", "-"], capture_output=True, check=True).stdout
    expected = np.frombuffer(raw, np.uint8).reshape(160, 120, 3)
    assert np.abs(frames[0].image.astype(int) - expected.astype(int)).mean() < 3.0


def test_gray_and_odd_sized_frames_become_bgr_and_go_through_the_detector(read_all, videos, yolox_path):
    path = videos / "gray_odd.mkv"
    ffmpeg("-f", "lavfi", "-i", "testsrc2=size=160x96:rate=10", "-t", "0.5", "-vf", "scale=161:97", "-pix_fmt", "gray", "-c:v", "ffv1",
           str(path))
    reader, frames = read_all(path)
    assert reader.state == "ended" and len(frames) == 5
    image = frames[0].image
    assert image.shape == (97, 161, 3) and image.dtype == np.uint8 and image.flags.c_contiguous
    assert np.array_equal(image[..., 0], image[..., 2])  # gray: the three channels are equal
    detector = YoloxDetector(yolox_path, input_size=416, score_threshold=0.01, intra_op_threads=1)
    detections = detector(image)
    assert detections.xyxy.dtype == np.float32
    assert (detections.xyxy[:, [0, 2]] <= 161).all() and (detections.xyxy[:, [1, 3]] <= 97).all()


def test_alpha_video_and_raw_arrays_are_normalised_to_bgr(read_all, videos):
    path = videos / "alpha.mov"
    ffmpeg("-f", "lavfi", "-i", "testsrc2=size=64x48:rate=10", "-t", "0.3", "-vf", "format=argb", "-c:v", "qtrle",
           str(path))
    reader, frames = read_all(path)
    assert reader.state == "ended" and frames[0].image.shape == (48, 64, 3)
    bgra = np.dstack([np.full((3, 5), v, np.uint8) for v in (10, 20, 30, 255)])
    assert normalize_image(bgra).shape == (3, 5, 3) and normalize_image(bgra)[0, 0].tolist() == [10, 20, 30]
    assert normalize_image(np.full((3, 5), 7, np.uint8))[1, 1].tolist() == [7, 7, 7]
    assert normalize_image(np.full((2, 2, 3), 65535, np.uint16))[0, 0].tolist() == [255, 255, 255]
    assert normalize_image(np.zeros((0, 4, 3), np.uint8)) is None and normalize_image(None) is None


def test_frames_lost_from_a_damaged_stream_are_counted(read_all, videos):
    ts = videos / "whole.ts"
    ffmpeg("-i", str(x264(videos / "for_ts.mp4", 4.0)), "-c", "copy", "-f", "mpegts", str(ts))
    data = ts.read_bytes()
    packets = len(data) // 188
    cut = videos / "cut.ts"  # a stretch of transport packets lost, as on a lossy link
    cut.write_bytes(data[: packets // 3 * 188] + data[packets // 2 * 188:])
    reader, frames = read_all(cut)
    assert reader.state == "ended" and reader.error is None
    assert reader.corrupt_frames >= 3 and reader.corrupt_frames + len(frames) <= 40 + 2
    assert [f.stream_ts_ms for f in frames] == sorted(f.stream_ts_ms for f in frames)


def test_truncated_file_is_an_error_not_an_end(read_all, videos):
    whole = videos / "faststart.mp4"
    ffmpeg("-i", str(x264(videos / "src.mp4", 6.0)), "-c", "copy", "-movflags", "+faststart", str(whole))
    truncated = videos / "truncated.mp4"
    truncated.write_bytes(whole.read_bytes()[: whole.stat().st_size // 2])
    reader, frames = read_all(truncated)
    assert 0 < len(frames) < 60
    assert reader.state == "failed" and reader.machine.reason == "truncated_file"
    assert "truncated" in reader.error
    reader, frames = read_all(whole)
    assert reader.machine.reason == "end_of_file" and reader.error is None and len(frames) == 60


def test_garbage_in_the_middle_of_a_file_is_not_a_normal_end(read_all, videos):
    damaged = videos / "damaged.mp4"
    shutil.copy(x264(videos / "src2.mp4", 6.0), damaged)
    with damaged.open("r+b") as f:
        f.seek(damaged.stat().st_size // 2)
        f.write(os.urandom(3000))
    reader, frames = read_all(damaged)
    assert frames
    assert reader.machine.reason == "truncated_file" or reader.corrupt_frames > 0, reader.machine.history()


@pytest.mark.parametrize(
    ("make", "expected", "reason"),
    [
        ("missing", "no such file", "missing_file"),
        ("zero_byte", "file is empty", "empty_file"),
        ("undecodable", "cannot open", "invalid_data"),
        ("truncated_header", "cannot open", "truncated_file"),
    ],
)
def test_bad_file_fails_its_camera_while_another_keeps_running(videos, bikes_path, tmp_path, make, expected, reason):
    path = tmp_path / f"{make}.mp4"
    if make == "zero_byte":
        path.write_bytes(b"")
    elif make == "undecodable":
        path.write_bytes(os.urandom(50_000))
    elif make == "truncated_header":  # moov at the end, cut off: the index is gone
        whole = x264(tmp_path / "whole.mp4", 2.0)
        path.write_bytes(whole.read_bytes()[: whole.stat().st_size // 2])
    slots, stop = FrameSlots(), threading.Event()
    bad = CameraReader("edge", "bad", CameraConfig(url=str(path), edge="e"), slots, stop)
    good = CameraReader("edge", "good", CameraConfig(url=str(bikes_path), edge="e", max_frames=30), slots, stop)
    bad.start()
    good.start()
    taken = []
    while not slots.finished():
        frame = slots.take(0.2)
        if frame is not None:
            taken.append(frame.camera)
    bad.join(15)
    good.join(15)
    assert bad.state == "failed" and expected in bad.error and bad.machine.reason == reason
    assert good.state == "ended" and good.error is None and taken.count("good") == 30 and "bad" not in taken
