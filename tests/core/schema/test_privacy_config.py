"""A camera's ``privacy`` section: good settings load; a mask outside the frame, a self-crossing mask, a mask of
fewer than 3 corners and a face model that is not there each give one line naming the key at ``vcascade check``;
routes that leave faces unredacted are listed by ``check``."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from vcascade.app.cli import main
from vcascade.core.config import ConfigError, PrivacyConfig, load_config

DEMO = Path(__file__).resolve().parents[3] / "configs" / "demo.yaml"
SQUARE = [[10, 10], [60, 10], [60, 50], [10, 50]]


def _write(tmp_path: Path, privacy: dict, routes: list | None = None) -> Path:
    data = yaml.safe_load(DEMO.read_text())
    data["cameras"]["street-1"]["privacy"] = privacy
    if routes is not None:
        data["cameras"]["street-1"]["routes"] = routes
    path = tmp_path / "deploy.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _error(tmp_path: Path, privacy: dict) -> str:
    with pytest.raises(ConfigError) as info:
        load_config(_write(tmp_path, privacy))
    return str(info.value)


def test_defaults_and_a_good_file(tmp_path):
    cfg = PrivacyConfig()
    assert (cfg.coordinates, cfg.masks, cfg.faces, cfg.fill_bgr) == ("pixels", [], None, (0, 0, 0))
    dep = load_config(_write(tmp_path, {"masks": [{"name": "window", "polygon": SQUARE}], "frame_size_px": [640, 272]}))
    assert dep.cameras["street-1"].privacy.masks[0].name == "window"


@pytest.mark.parametrize(
    ("privacy", "expected"),
    [
        ({"frame_size_px": [640, 272], "masks": [{"name": "m", "polygon": [[0, 0], [700, 0], [0, 100]]}]},
         "cameras.street-1.privacy.masks[0].polygon = [700.0, 0.0]: outside the 640x272 frame"),
        ({"coordinates": "normalized", "masks": [{"name": "m", "polygon": [[0, 0], [1.2, 0], [0, 1]]}]},
         ("cameras.street-1.privacy.masks[0].polygon = [1.2, 0.0]: outside the frame: normalised corners lie "
          "within 0..1")),
        ({"masks": [{"name": "m", "polygon": [[0, 0], [10, 10], [10, 0], [0, 10]]}]},
         ("cameras.street-1.privacy.masks[0].polygon = [[0.0, 0.0], [10.0, 10.0], [10.0, 0.0], [0.0, 10.0]]: "
          "edges 0 and 2 cross or overlap")),
        ({"masks": [{"name": "m", "polygon": [[0, 0], [10, 10]]}]},
         "cameras.street-1.privacy.masks[0].polygon = [[0, 0], [10, 10]]: expected list should have at least 3 items"),
        ({"masks": [{"name": "m", "polygon": SQUARE}, {"name": "m", "polygon": SQUARE}]},
         "cameras.street-1.privacy.masks[1].name = 'm': used twice"),
        ({"faces": {"head_rule": {"classes": ["dragon"]}}},
         "cameras.street-1.privacy.faces.head_rule.classes[0] = 'dragon': expected one of the detector's class names"),
        ({"faces": {"exits": ["roi", "window"]}},
         "cameras.street-1.privacy.faces.exits[1] = 'window': expected 'roi', 'preview' or 'snapshot'"),
    ],
)
def test_bad_privacy_is_one_line_naming_the_key(tmp_path, privacy, expected):
    message = _error(tmp_path, privacy)
    assert expected in message
    assert len([line for line in message.splitlines() if "privacy" in line]) == 1


def test_check_refuses_face_redaction_without_its_model(tmp_path, capsys):
    path = _write(tmp_path, {"faces": {"model": "no-such-centerface.onnx"}})
    code = main(["check", str(path), "--model-dir", str(tmp_path)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1
    assert "cameras.street-1.privacy.faces.model = 'no-such-centerface.onnx': no such file" in err[0]
    assert "python -m tools.fetch_models --faces" in err[0]


def test_check_refuses_text_redaction_without_its_model(tmp_path, capsys, models_dir):
    path = _write(tmp_path, {"text": {"model": "no-such-text-detector.onnx"}})
    code = main(["check", str(path), "--model-dir", str(models_dir)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1
    assert "cameras.street-1.privacy.text.model = 'no-such-text-detector.onnx': no such file" in err[0]
    assert "text redaction needs it" in err[0] and "python -m tools.fetch_models --text" in err[0]
    assert main(["check", str(_write(tmp_path, {"text": {"method": "pixelate"}})), "--model-dir", str(models_dir)]) == 0


@pytest.mark.parametrize(("text", "key"), [({"exits": ["roi"]}, "privacy.text.exits[0]"),
                                           ({"min_score": 1.5}, "privacy.text.min_score")])
def test_text_redaction_settings_are_checked(tmp_path, text, key):
    assert f"cameras.street-1.{key}" in _error(tmp_path, {"text": text})


def test_check_lists_routes_that_leave_faces_unredacted(tmp_path, capsys, models_dir):
    routes = [{"recognizer": "mobilenetv2-embedder", "classes": ["person"], "unredacted_faces": True}]
    path = _write(tmp_path, {"faces": {}}, routes=routes)
    assert main(["check", str(path), "--model-dir", str(models_dir)]) == 0
    out = capsys.readouterr().out
    assert ("privacy: cameras.street-1.routes[0].unredacted_faces: crops of camera street-1 for recognizer "
            "mobilenetv2-embedder leave with faces unredacted") in out
