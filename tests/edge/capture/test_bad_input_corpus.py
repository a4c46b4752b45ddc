"""A corpus of bad inputs, made by the test with ffmpeg and the onnx helper API, run through one real edge
process (under `vcascade run`, with a real broker and worker) beside a good camera.

Videos (from bikes.mp4): corrupt H.264 bytes in the middle, a transport stream that does not start on a
keyframe, a truncated file, a zero-byte file, four audio tracks, rotation metadata, variable frame rate,
gray and odd-sized frames. Each camera must end with a clear, specific error or a correct result, every ROI
accounted for, and the good camera must get all its frames and results (tests/edge/capture/test_inputs.py covers
the same kinds of file one reader at a time; this runs them together in one edge).

Models (edited copies of yolox_nano.onnx): channels-last (NHWC) input is refused at open with the shape it
has; a batch dimension declared as 2 over a graph that still reshapes for one image is refused at
open with the shape the graph really returns (an edge given it stops with that error); float16 input gives
the float32 model's detections.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import cv2
import numpy as np
import onnx
import pytest
import yaml
from onnx import TensorProto, helper

from vcascade.core.config import YoloxDetectorConfig
from vcascade.edge.detection import DetectorContractError, build_detector

REPO = Path(__file__).resolve().parents[3]
from tools.chaos_deploy import write_deployment

RUN_TIMEOUT_S = 600


def ffmpeg(*args: str) -> None:
    done = subprocess.run(["ffmpeg", "-v", "error", "-y", *args, "-threads", "1"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def frame_count(path: Path) -> int:
    """Decoded video frames, as ffprobe counts them (an independent reading)."""
    out = subprocess.run(["ffprobe", "-v", "error", "-select_streams", "v:0", "-count_frames", "-show_entries",
                          "stream=nb_read_frames", "-of", "csv=p=0", str(path)], capture_output=True, text=True)  # fmt: skip
    counts = [int(v) for v in out.stdout.replace(",", " ").split()]  # MPEG-TS: once per program, too
    return counts[0] if counts else 0


def make_corpus(d: Path, bikes: Path) -> dict[str, Path]:
    """The bad videos, 2 to 4 s of bikes.mp4 each (640x272, 25 fps)."""
    enc = ["-c:v", "libx264", "-preset", "ultrafast", "-bf", "0", "-pix_fmt", "yuv420p"]
    clip = d / "clip.mp4"
    ffmpeg("-i", str(bikes), "-t", "4", *enc, "-g", "10", "-an", str(clip))
    corpus = {}
    corpus["corrupt_middle"] = d / "corrupt_middle.mp4"
    data = bytearray(clip.read_bytes())
    mid = len(data) // 2
    data[mid : mid + 4000] = os.urandom(4000)
    corpus["corrupt_middle"].write_bytes(bytes(data))
    gop = d / "gop50.ts"  # keyframes at 0 s and 2 s only; cut at 30%: starts mid-GOP, without a keyframe
    ffmpeg("-i", str(bikes), "-t", "4", *enc, "-g", "50", "-an", "-f", "mpegts", str(gop))
    ts = gop.read_bytes()
    corpus["no_keyframe"] = d / "no_keyframe.ts"
    corpus["no_keyframe"].write_bytes(ts[(len(ts) // 188 * 3 // 10) * 188 :])
    whole = d / "faststart.mp4"
    ffmpeg("-i", str(clip), "-c", "copy", "-movflags", "+faststart", str(whole))
    corpus["truncated"] = d / "truncated.mp4"
    corpus["truncated"].write_bytes(whole.read_bytes()[: whole.stat().st_size // 2])
    corpus["zero_byte"] = d / "zero_byte.mp4"
    corpus["zero_byte"].write_bytes(b"")
    corpus["many_audio"] = d / "many_audio.mkv"
    tones = [a for f in (220, 440, 660, 880) for a in ("-f", "lavfi", "-i", f"sine=frequency={f}:duration=2")]
    maps = [a for i in range(5) for a in ("-map", str(i))]
    ffmpeg("-i", str(clip), *tones, *maps, "-t", "2", "-c:v", "copy", "-c:a", "aac", str(corpus["many_audio"]))
    corpus["rotated"] = d / "rotated.mp4"
    ffmpeg("-i", str(clip), "-t", "2", "-c", "copy", "-metadata:s:v", "rotate=90", str(corpus["rotated"]))
    corpus["vfr"] = d / "vfr.mp4"  # 25 fps for 1 s, then every third frame's slot (8.3 fps)
    ffmpeg("-i", str(bikes), "-t", "3", "-vf", "settb=1/1000,setpts='if(lt(N,25),N*40,1000+(N-25)*120)'",
           "-fps_mode", "passthrough", *enc, "-video_track_timescale", "1000", str(corpus["vfr"]))  # fmt: skip
    corpus["gray_odd"] = d / "gray_odd.mkv"
    ffmpeg("-i", str(bikes), "-t", "2", "-vf", "scale=321:137", "-pix_fmt", "gray", "-c:v", "ffv1", str(corpus["gray_odd"]))
    return corpus


@pytest.fixture(scope="module")
def edge_run(tmp_path_factory, bikes_path, models_dir) -> dict:
    """Every corpus video and a good camera on one edge, run to the end; returns the launcher's summary."""
    d = tmp_path_factory.mktemp("corpus")
    corpus = make_corpus(d, bikes_path)
    config = write_deployment(d, bikes_path, None)
    dep = yaml.safe_load(config.read_text())
    dep["cameras"] = {"good": {"url": str(bikes_path), "edge": "edge-a", "max_frames": 60}}
    dep["cameras"].update({name: {"url": str(path), "edge": "edge-a", "read_timeout_s": 5.0}
                           for name, path in corpus.items()})  # fmt: skip
    del dep["edges"]["edge-b"]
    dep["edges"]["edge-a"].update(overflow="block", max_in_flight=64, send_queue_max=256, roi_timeout_s=120.0)
    dep["edges"]["edge-a"]["roi"]["policy"]["refresh_s"] = 0.5
    config.write_text(yaml.safe_dump(dep))
    proc = subprocess.run(
        [str(Path(sys.executable).with_name("vcascade")), "run", str(config), "--model-dir", str(models_dir),
         "--summary-json", str(d / "summary.json")], capture_output=True, text=True, timeout=RUN_TIMEOUT_S,
    )  # fmt: skip
    summary = json.loads((d / "summary.json").read_text())
    summary["_stdout"], summary["_counts"] = proc.stdout, {n: frame_count(p) for n, p in corpus.items()}
    return summary


def _cameras(summary: dict) -> dict:
    (edge,) = [s for s in summary["processes"] if s["component"] == "edge"]
    return edge["cameras"]


def test_edge_survives_the_corpus_and_every_roi_is_accounted(edge_run):
    assert edge_run["exit_codes"]["edge edge-a"] == 0, edge_run["_stdout"]
    comps = {(c["kind"], c["name"]): c for c in edge_run["components"]}
    assert comps[("edge", "edge-a")]["restarts"] == 0
    for name, cam in _cameras(edge_run).items():
        assert cam["sent"] == cam["results"] + sum(cam["drops"].values()), (name, cam)


def test_good_camera_beside_the_corpus_gets_every_frame_and_result(edge_run):
    good = _cameras(edge_run)["good"]
    assert good["state"] == "ended" and good["error"] is None and good["frames"] == 60
    assert good["corrupt_frames"] == 0 and good["sent"] > 0
    assert good["results"] == good["sent"] and good["drops"] == {}


def test_bad_files_get_a_clear_specific_error(edge_run):
    cams = _cameras(edge_run)
    assert cams["zero_byte"]["state"] == "failed" and "file is empty" in cams["zero_byte"]["error"]
    truncated = cams["truncated"]
    assert cams["zero_byte"]["reason"] == "empty_file"
    assert truncated["state"] == "failed" and truncated["reason"] == "truncated_file"
    assert "truncated" in truncated["error"] and 0 < truncated["frames"] < 100
    corrupt = cams["corrupt_middle"]
    assert corrupt["state"] == "ended" and corrupt["frames"] > 0
    assert corrupt["corrupt_frames"] > 0 and corrupt["losses"].get("corrupt", 0) > 0, corrupt


@pytest.mark.parametrize("name", ["no_keyframe", "many_audio", "rotated", "vfr", "gray_odd"])
def test_unusual_but_valid_files_are_read_whole_with_results(edge_run, name):
    cam, expected = _cameras(edge_run)[name], edge_run["_counts"][name]
    assert cam["state"] == "ended" and cam["error"] is None, cam
    assert cam["frames"] == expected > 0, (cam["frames"], expected)
    assert cam["results"] == cam["sent"] and cam["drops"] == {}, cam
    if name != "rotated":  # upright riders lie on their side once rotated: YOLOX-nano rarely finds them
        assert cam["sent"] > 0, cam


# ---------------------------------------------------------------- models


def _edited(src: Path, dst: Path, edit) -> Path:
    model = onnx.load(str(src))
    edit(model)
    onnx.save(model, str(dst))
    return dst


def _nhwc(model: onnx.ModelProto) -> None:
    """Channels-last input: a Transpose (0, 3, 1, 2) in front of the original NCHW input."""
    old = model.graph.input[0]
    old_name, new_name = old.name, old.name + "_nhwc"
    model.graph.input.remove(old)
    model.graph.input.insert(0, helper.make_tensor_value_info(new_name, TensorProto.FLOAT, [1, 416, 416, 3]))
    model.graph.node.insert(0, helper.make_node("Transpose", [new_name], [old_name], perm=[0, 3, 1, 2]))


def _fp16_input(model: onnx.ModelProto) -> None:
    """float16 input: a Cast to float32 in front of the original input."""
    old = model.graph.input[0]
    old_name, new_name = old.name, old.name + "_fp16"
    model.graph.input.remove(old)
    model.graph.input.insert(0, helper.make_tensor_value_info(new_name, TensorProto.FLOAT16, [1, 3, 416, 416]))
    model.graph.node.insert(0, helper.make_node("Cast", [new_name], [old_name], to=TensorProto.FLOAT))


def _declared_batch_2(model: onnx.ModelProto) -> None:
    """Declares batch 2 on input and output; the graph's Reshape still assumes one image."""
    for value in (*model.graph.input, *model.graph.output):
        value.type.tensor_type.shape.dim[0].dim_value = 2


def _open(path: Path):
    return build_detector(YoloxDetectorConfig(type="yolox", path=str(path), score_threshold=0.3), path)


@pytest.fixture(scope="module")
def bikes_frame(bikes_path) -> np.ndarray:
    cap = cv2.VideoCapture(str(bikes_path))
    for _ in range(151):  # frame 150: riders and bicycles in view
        ok, frame = cap.read()
    cap.release()
    assert ok
    return frame


def test_nhwc_model_is_refused_at_open_naming_the_shape_it_has(tmp_path, yolox_path):
    path = _edited(yolox_path, tmp_path / "nhwc.onnx", _nhwc)
    with pytest.raises(DetectorContractError) as err:
        _open(path)
    assert "nhwc.onnx" in str(err.value) and "(B, 3, 416, 416)" in str(err.value) and "[1, 416, 416, 3]" in str(err.value)


def test_fp16_input_model_gives_the_float32_detections(tmp_path, yolox_path, bikes_frame):
    ref = _open(yolox_path)(bikes_frame)
    half = _open(_edited(yolox_path, tmp_path / "fp16.onnx", _fp16_input))
    assert half.input.dtype == np.float16
    got = half(bikes_frame)
    assert len(ref) > 0 and len(got) == len(ref)
    assert np.array_equal(got.class_id, ref.class_id)
    assert np.abs(got.xyxy - ref.xyxy).max() < 2.0 and np.abs(got.score - ref.score).max() < 0.02


def test_batch_declared_but_not_built_is_refused_at_open_naming_the_shape_it_returns(tmp_path, yolox_path):
    with pytest.raises(DetectorContractError) as err:
        _open(_edited(yolox_path, tmp_path / "batch2.onnx", _declared_batch_2))
    assert "(2, 3549, 85)" in str(err.value) and "[1, 3549, 85]" in str(err.value)


def test_run_refuses_an_edge_with_a_broken_model_before_starting_it(tmp_path, yolox_path, bikes_path, models_dir):
    """The model's error, in one line, before any process starts (issue 18: the edge used to start, fail its
    contract check and be restarted 5 times); the launcher's no-restart of a start-up error that still happens is
    tests/app/test_launcher_startup.py's."""
    model = _edited(yolox_path, tmp_path / "batch2.onnx", _declared_batch_2)
    config = write_deployment(tmp_path, bikes_path, None)
    dep = yaml.safe_load(config.read_text())
    dep["cameras"] = {"good": {"url": str(bikes_path), "edge": "edge-a", "max_frames": 10}}
    del dep["edges"]["edge-b"]
    detector = dep["edges"]["edge-a"]["detector"]
    del detector["model"]
    detector["path"] = str(model)
    config.write_text(yaml.safe_dump(dep))
    proc = subprocess.run(
        [str(Path(sys.executable).with_name("vcascade")), "run", str(config), "--model-dir", str(models_dir),
         "--summary-json", str(tmp_path / "summary.json")], capture_output=True, text=True, timeout=RUN_TIMEOUT_S,
    )  # fmt: skip
    assert proc.returncode == 1, proc.stdout
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    (line,) = lines
    assert line.startswith("vcascade: edges.edge-a.detector: ") and "[1, 3549, 85]" in line and "(2, 3549, 85)" in line
    assert not (tmp_path / "summary.json").exists()  # no process was started