"""A camera's ``motion`` and a detector's ``precision`` keys: off / fp32 by default; a bad value is one line naming
the key path at load time (``vcascade check``)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from vcascade.core.config import ConfigError, load_config

DEMO = Path(__file__).resolve().parents[3] / "configs" / "demo.yaml"


def _load(tmp_path: Path, camera: dict | None = None, detector: dict | None = None):
    data = yaml.safe_load(DEMO.read_text())
    data["cameras"]["street-1"].update(camera or {})
    data["edges"]["edge-1"].setdefault("detector", {}).update(detector or {})
    path = tmp_path / "deploy.yaml"
    path.write_text(yaml.safe_dump(data))
    return load_config(path)


def test_motion_is_off_and_fp32_the_default_and_an_empty_motion_takes_the_defaults(tmp_path):
    dep = _load(tmp_path)
    assert dep.cameras["street-1"].motion is None and dep.edges["edge-1"].detector.precision == "fp32"
    motion = _load(tmp_path, camera={"motion": {}}).cameras["street-1"].motion
    assert (motion.width, motion.pixel_threshold, motion.min_area, motion.max_gap_s) == (160, 25, 0.0005, 1.0)


@pytest.mark.parametrize(
    ("camera", "detector", "key"),
    [
        ({"motion": {"min_area": 2}}, None, "cameras.street-1.motion.min_area"),
        ({"motion": {"max_gap_s": 0}}, None, "cameras.street-1.motion.max_gap_s"),
        ({"motion": {"threshold": 10}}, None, "cameras.street-1.motion.threshold"),
        (None, {"precision": "int4"}, "edges.edge-1.detector"),
    ],
)
def test_a_bad_value_names_its_key(tmp_path, camera, detector, key):
    with pytest.raises(ConfigError) as info:
        _load(tmp_path, camera, detector)
    assert key in str(info.value)
