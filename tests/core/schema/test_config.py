"""Configuration: the demo file is valid; bad files give one clear line per problem and exit code 2."""

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from vcascade.app.cli import main
from vcascade.core.config import ConfigError, load_config

DEMO = Path(__file__).resolve().parents[3] / "configs" / "demo.yaml"


def _write(tmp_path, data) -> Path:
    path = tmp_path / "deploy.yaml"
    path.write_text(yaml.safe_dump(data) if not isinstance(data, str) else data)
    return path


def _demo() -> dict:
    return yaml.safe_load(DEMO.read_text())


def test_demo_is_valid():
    dep = load_config(DEMO)
    assert set(dep.cameras) == {"street-1", "street-2"}
    assert dep.workers["worker-1"].devices == ["cpu", "cpu"]
    embedder = dep.recognizers["mobilenetv2-embedder"]
    assert embedder.engine == "onnxruntime" and embedder.split_points == "auto"


def _error(tmp_path, data) -> str:
    with pytest.raises(ConfigError) as info:
        load_config(_write(tmp_path, data))
    return str(info.value)


def test_bad_value_names_key_path_value_and_expectation(tmp_path):
    data = _demo()
    data["edges"]["edge-1"]["detector"]["score_threshold"] = 1.5
    msg = _error(tmp_path, data)
    assert "edges.edge-1.detector.score_threshold = 1.5: expected a value less than or equal to 1" in msg


def test_unknown_key_is_rejected(tmp_path):
    data = _demo()
    data["brokers"]["broker-1"]["frontend_prot"] = 1
    assert "brokers.broker-1.frontend_prot: unknown key" in _error(tmp_path, data)


def test_wrong_sink_type(tmp_path):
    data = _demo()
    data["edges"]["edge-1"]["sinks"][0]["type"] = "kafka"
    assert "edges.edge-1.sinks[0].type = 'kafka': expected one of 'jsonl', 'zmq_pub'" in _error(tmp_path, data)


def test_unknown_head_type_is_reported_on_the_type_key(tmp_path):
    data = _demo()
    data["recognizers"]["ppocr-text"]["head"]["type"] = "segmenter"
    msg = _error(tmp_path, data)  # the key was printed as `head._head_type()`
    assert "recognizers.ppocr-text.head.type = 'segmenter': expected 'embedding', 'classifier' or 'text'" in msg


def test_union_tags_are_not_printed_as_keys(tmp_path):
    data = _demo()
    data["recognizers"]["ppocr-text"]["head"] = {"type": "classifier", "top_k": 0}
    msg = _error(tmp_path, data)
    assert "recognizers.ppocr-text.head.labels: missing (required)" in msg.splitlines()[0]
    assert "recognizers.ppocr-text.head.top_k = 0: expected a value greater than or equal to 1" in msg


def test_a_name_equal_to_a_union_tag_stays_in_the_key_path(tmp_path):
    data = _demo()
    data["cameras"]["onnx"] = {"url": "x.mp4", "edge": "edge-1", "fps": 5}  # the name was dropped as a tag
    data["edges"]["yolov8"] = {**data["edges"]["edge-1"], "metrics_port": 9200, "path": "/m/v8.onnx"}
    msg = _error(tmp_path, data)
    assert "cameras.onnx.fps: unknown key" in msg
    assert "edges.yolov8.path: unknown key" in msg


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [
        (lambda d: d["cameras"]["street-1"].update(edge="nowhere"), "cameras.street-1.edge = 'nowhere': expected one of the edges"),
        (lambda d: (d["workers"]["worker-1"].update(devices=["cpu"]),
                    d["recognizers"]["mobilenetv2-embedder"].update(split_points=["features.3"])), "expected 2 devices"),
        (lambda d: d["workers"]["worker-1"].update(devices=["cpu", "gpu0"]), "devices[1] = 'gpu0': expected `cpu` or `cuda:N`"),
        (lambda d: d["edges"]["edge-1"]["detector"].update(classes=["unicorn"]), "expected a COCO class name"),
        (lambda d: d["workers"]["worker-1"].update(metrics_port=9101), "workers.worker-1.metrics_port = 9101: expected a port not already used by edges.edge-1.metrics_port"),
        (lambda d: d["workers"]["worker-1"].update(recognizer="nope"), "workers.worker-1.recognizer = 'nope'"),
    ],
)
def test_cross_references(tmp_path, mutate, expected):
    data = _demo()
    mutate(data)
    assert expected in _error(tmp_path, data)


def test_env_interpolation(tmp_path, monkeypatch):
    data = _demo()
    data["cameras"]["street-1"]["url"] = "rtsp://${CAM_USER}:${CAM_PASS:-changeme}@10.0.0.5/stream"
    monkeypatch.setenv("CAM_USER", "admin")
    dep = load_config(_write(tmp_path, data))
    assert dep.cameras["street-1"].url == "rtsp://admin:changeme@10.0.0.5/stream"
    monkeypatch.delenv("CAM_USER")
    assert "environment variable CAM_USER is not set" in _error(tmp_path, data)


def test_yaml_syntax_error_has_line(tmp_path):
    assert "not valid YAML at line 3" in _error(tmp_path, "cameras:\n  a: [1,\n")


def test_check_command_exit_codes(tmp_path, capsys):
    assert main(["check", str(DEMO)]) == 0
    data = _demo()
    data["edges"]["edge-1"]["roi"]["jpeg_quality"] = 0
    assert main(["check", str(_write(tmp_path, data))]) == 2
    err = capsys.readouterr().err
    assert "edges.edge-1.roi.jpeg_quality = 0" in err and "Traceback" not in err


def test_check_as_a_process_prints_no_traceback(tmp_path):
    path = _write(tmp_path, {"cameras": "nope"})
    proc = subprocess.run([sys.executable, "-m", "vcascade", "check", str(path)], capture_output=True, text=True)
    assert proc.returncode == 2
    assert "cameras = 'nope': expected a valid dictionary" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_config_reference_is_current():
    proc = subprocess.run([sys.executable, "-m", "tools.gen_config_docs", "--check"], capture_output=True, text=True,
                          cwd=Path(__file__).resolve().parents[3])
    assert proc.returncode == 0, proc.stderr
