"""Detector config combinations: clear ConfigError lines at load time, and `path` models found at start-up."""

from __future__ import annotations

from pathlib import Path
from typing import get_args

import pytest
import yaml

from vcascade.core.config import (
    YOLOX_NANO_URL,
    ConfigError,
    DetectorConfig,
    EdgeConfig,
    Yolov5DetectorConfig,
    Yolov8DetectorConfig,
    YoloxDetectorConfig,
    load_config,
)
from vcascade.core.runtime.models import ModelUnavailable
from vcascade.core.schema.base import family_union
from vcascade.core.schema.detector import DETECTOR_CONFIGS
from vcascade.edge.detection import DETECTOR_FAMILIES, DetectorFamily, YoloxDetector
from vcascade.edge.detection.model_file import ensure_detector_model
from vcascade.edge.detection.registry import registry

DEMO = Path(__file__).resolve().parents[3] / "configs" / "demo.yaml"


def _load_with_detector(tmp_path: Path, detector: dict):
    data = yaml.safe_load(DEMO.read_text())
    edge = next(iter(data["edges"]))
    data["edges"][edge]["detector"] = detector
    path = tmp_path / "deploy.yaml"
    path.write_text(yaml.safe_dump(data))
    return load_config(path), edge


def _errors(tmp_path: Path, detector: dict) -> str:
    with pytest.raises(ConfigError) as info:
        _load_with_detector(tmp_path, detector)
    return str(info.value)


def test_user_model_types_need_a_local_path(tmp_path):
    msg = _errors(tmp_path, {"type": "yolov8"})
    assert ".detector.path: missing (required for type yolov8: only yolox models are downloaded)" in msg
    msg = _errors(tmp_path, {"type": "yolov5", "path": "/m/v5.onnx", "model": "v5.onnx"})
    assert ".detector.model: only used by type yolox; set `path` to the yolov5 model file" in msg
    assert _errors(tmp_path, {"type": "yolov4"}).count("expected 'yolox', 'yolov5' or 'yolov8'") == 1


def test_yolox_takes_path_or_model_not_both(tmp_path):
    msg = _errors(tmp_path, {"path": "/m/x.onnx", "model": "yolox_nano.onnx"})
    assert ".detector.path = '/m/x.onnx': set either `path` or `model`/`url`, not both" in msg
    dep, edge = _load_with_detector(tmp_path, {"path": "/m/x.onnx"})
    assert dep.edges[edge].detector.type == "yolox" and dep.edges[edge].detector.max_batch == 8


def test_class_filter_is_checked_against_the_class_names(tmp_path):
    msg = _errors(tmp_path, {"type": "yolov8", "path": "/m/v8.onnx", "class_names": ["cat", "dog", "cat"],
                             "classes": ["dog", "person"]})
    assert ".detector.class_names[2] = 'cat': expected each name once" in msg
    assert ".detector.classes[1] = 'person': expected one of `class_names`" in msg
    assert "expected a COCO class name" in _errors(tmp_path, {"classes": ["unicorn"]})
    assert "expected at least one class name" in _errors(tmp_path, {"type": "yolov8", "path": "/m", "class_names": []})
    assert "max_batch = 0" in _errors(tmp_path, {"max_batch": 0})
    dep, edge = _load_with_detector(tmp_path, {"type": "yolov5", "path": "/m/v5.onnx", "class_names": "names.txt",
                                               "classes": ["anything"]})  # a names file is checked at start-up
    assert dep.edges[edge].detector.class_names == "names.txt"


def test_path_is_used_as_is_and_never_downloaded(tmp_path):
    model = tmp_path / "v8.onnx"
    model.write_bytes(b"not checked here")
    assert ensure_detector_model(Yolov8DetectorConfig(type="yolov8", path=str(model)), None) == model
    with pytest.raises(ModelUnavailable, match="absent.onnx.*`path`.*does not exist"):
        ensure_detector_model(Yolov8DetectorConfig(type="yolov8", path=str(tmp_path / "absent.onnx")), None)


def test_each_detector_type_has_its_config_class_and_detector():
    (union, _) = get_args(DetectorConfig)
    members = [get_args(member)[0] for member in get_args(union)]
    assert members == list(DETECTOR_CONFIGS) == [YoloxDetectorConfig, Yolov5DetectorConfig, Yolov8DetectorConfig]
    assert {name: family.config for name, family in DETECTOR_FAMILIES.items()} == {
        "yolox": YoloxDetectorConfig, "yolov5": Yolov5DetectorConfig, "yolov8": Yolov8DetectorConfig,
    }  # fmt: skip


def test_a_family_missing_on_either_side_is_refused_at_import():
    """The edge's registry must pair every config class of the schema with a detector, and nothing else; the
    schema's union refuses two classes of one ``type``."""
    with pytest.raises(ValueError, match=r"differ from the schema's \['yolov5', 'yolov8', 'yolox'\]"):
        registry(DetectorFamily(YoloxDetectorConfig, YoloxDetector))
    with pytest.raises(ValueError, match="each once"):
        family_union([Yolov8DetectorConfig, Yolov8DetectorConfig], default=Yolov8DetectorConfig)


def test_an_unknown_type_names_every_registered_family(tmp_path):
    assert "type = 'yolov9': expected 'yolox', 'yolov5' or 'yolov8'" in _errors(tmp_path, {"type": "yolov9"})


def test_the_default_detector_is_the_downloaded_yolox_nano():
    detector = EdgeConfig(brokers=["b"], metrics_port=9000).detector
    assert isinstance(detector, YoloxDetectorConfig)
    assert (detector.model, detector.url, detector.path) == ("yolox_nano.onnx", YOLOX_NANO_URL, None)
    for user_model in (Yolov5DetectorConfig, Yolov8DetectorConfig):  # only YOLOX is downloaded
        assert {"model", "url"}.isdisjoint(user_model.model_fields) and user_model.model_fields["path"].is_required()
