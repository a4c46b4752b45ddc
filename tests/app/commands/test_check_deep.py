"""``vcascade check FILE --deep`` (issue 18, item 3): the pre-flight checks on this host, one line per problem and
exit 2; real models (the shared folder), a real video file, real ports. The "Done when" case: a missing model, a
missing camera file and a refused RTSP URL give three lines."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
import yaml

from tests.demo import TEXT, demo_data
from tests.hls import HttpServer, hls_source, stale_playlist
from vcascade.app.cli import main
from vcascade.app.preflight import key_problems
from vcascade.core.config import Deployment
from vcascade.core.transport.keys import component_names, generate_keys

pytestmark = pytest.mark.timeout(300)


def _deployment(tmp_path: Path, free_port, bikes_path: Path) -> dict:
    """configs/demo.yaml reduced to the embedder (torch, split at features.3), both cameras on bikes.mp4, no sinks,
    every port free."""
    data = demo_data()
    for cam in data["cameras"].values():
        cam["url"] = str(bikes_path)
    edge = data["edges"]["edge-1"]
    edge.pop("sinks", None)
    edge["metrics_port"] = free_port()
    data["brokers"]["broker-1"].update(frontend_port=free_port(), backend_port=free_port(), metrics_port=free_port())
    for worker in data["workers"].values():
        worker["metrics_port"] = free_port()
    return data


def _check(tmp_path: Path, data: dict, models_dir: Path, *extra: str) -> int:
    path = tmp_path / "deploy.yaml"
    path.write_text(yaml.safe_dump(data))
    return main(["check", str(path), "--deep", "--model-dir", str(models_dir), "--camera-timeout-s", "5", *extra])


def test_a_missing_model_a_missing_camera_file_and_a_refused_url_give_three_lines(
    tmp_path, free_port, bikes_path, models_dir, capsys
):
    data = _deployment(tmp_path, free_port, bikes_path)
    data["edges"]["edge-1"]["detector"] = {"type": "yolox", "path": str(tmp_path / "absent.onnx")}
    data["cameras"]["street-1"]["url"] = str(tmp_path / "missing.mp4")
    data["cameras"]["street-2"]["url"] = f"rtsp://127.0.0.1:{free_port()}/cam"  # nothing listens there
    assert _check(tmp_path, data, models_dir) == 2
    out, err = capsys.readouterr()
    lines = err.splitlines()
    print(err)
    assert out == "" and len(lines) == 3, lines
    assert "edges.edge-1.detector: " in lines[0] and "absent.onnx" in lines[0]
    assert "cameras.street-1: missing_file: " in lines[1] and "missing.mp4" in lines[1]
    assert "cameras.street-2: connection_refused: " in lines[2]


def test_a_sound_file_passes_and_says_what_was_checked(tmp_path, free_port, bikes_path, models_dir, capsys):
    assert _check(tmp_path, _deployment(tmp_path, free_port, bikes_path), models_dir) == 0
    out, err = capsys.readouterr()
    assert err == "" and out.endswith("; cameras, models, key files and ports checked\n")


def test_a_port_in_use_a_split_point_the_model_lacks_and_a_detector_of_the_wrong_type_are_each_one_line(
    tmp_path, free_port, bikes_path, models_dir, capsys
):
    data = _deployment(tmp_path, free_port, bikes_path)
    data["recognizers"]["mobilenetv2-embedder"]["split_points"] = ["features.99"]
    data["edges"]["edge-1"]["detector"] = {"type": "yolov8", "path": str(models_dir / "yolox_nano.onnx")}
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", data["brokers"]["broker-1"]["frontend_port"]))
        taken.listen()
        assert _check(tmp_path, data, models_dir) == 2
    lines = capsys.readouterr().err.splitlines()
    print("\n".join(lines))
    assert len(lines) == 3, lines
    assert "edges.edge-1.detector: " in lines[0] and "yolox_nano.onnx" in lines[0]
    assert "recognizers.mobilenetv2-embedder: " in lines[1] and "features.99" in lines[1]
    assert "brokers.broker-1.frontend_port = " in lines[2] and "in use" in lines[2]


def test_a_text_detector_that_does_not_fit_and_a_reid_model_of_another_length_are_each_one_line(
    tmp_path, free_port, bikes_path, models_dir, capsys
):
    """Issue 33: an ``ocr`` recognizer whose detection model is not a DB text detector (YOLOX here), and an
    embedding head whose ``dim`` is not the model's output: one line each, naming the file and the shape."""
    data = _deployment(tmp_path, free_port, bikes_path)
    text = demo_data(both_recognizers=True)["recognizers"][TEXT]
    data["recognizers"]["plates"] = {**text, "detector_model": str(models_dir / "yolox_nano.onnx")}
    data["recognizers"]["reid"] = {"type": "onnx", "model": str(models_dir / "yolox_nano.onnx"),  # (1, 3549, 85) out
                                   "input_hw": [416, 416], "head": {"type": "embedding", "dim": 512}}  # fmt: skip
    assert _check(tmp_path, data, models_dir) == 2
    lines = capsys.readouterr().err.splitlines()
    print("\n".join(lines))
    assert len(lines) == 2, lines
    assert "recognizers.plates: TextModelMismatch: text detection model " in lines[0] and "yolox_nano.onnx" in lines[0]
    assert "(N, 1, H, W)" in lines[0]
    assert "recognizers.reid: ModelContractError: " in lines[1] and "expected (N, 512) from head.dim 512" in lines[1]


def test_missing_key_files_are_one_line_per_component_and_generated_ones_pass(tmp_path, free_port, bikes_path):
    data = _deployment(tmp_path, free_port, bikes_path)
    keys = tmp_path / "keys"
    data["security"] = {"curve": {"enabled": True, "keys_dir": str(keys)}}
    dep = Deployment.model_validate(data)
    lines = key_problems(dep)
    assert [line.split(":")[0] for line in lines] == [f"security.curve ({name})" for name in component_names(dep)]
    assert all("edge-1" in line or "broker-1" in line or "worker-1" in line for line in lines)
    generate_keys(keys, component_names(dep))
    assert key_problems(dep) == []


def test_a_stale_hls_playlist_is_one_line_with_its_reason(tmp_path, free_port, bikes_path, models_dir, capsys):
    """An HLS playlist without an end whose writer is gone (issue 31): `playlist_stale`, exit 2."""
    source = hls_source(bikes_path, tmp_path / "bikes.ts")
    server = HttpServer(tmp_path, free_port())
    try:
        data = _deployment(tmp_path, free_port, bikes_path)
        data["cameras"]["street-2"]["url"] = server.url(stale_playlist(source, tmp_path, seconds=2))
        assert _check(tmp_path, data, models_dir) == 2
    finally:
        server.stop()
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1, lines
    assert "cameras.street-2: playlist_stale: " in lines[0] and "did not grow" in lines[0], lines
