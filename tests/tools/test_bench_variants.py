"""The edge variants of tools/bench.py (tools/bench_variants.py): names parsed into the keys each sets, bad names
refused with the part at fault."""

from __future__ import annotations

import argparse

import pytest

from tools.bench_variants import EdgeVariant, Inputs


@pytest.mark.parametrize(("name", "motion", "int8", "detect_fps", "input_size"), [
    ("plain", False, False, None, None),
    ("motion+int8", True, True, None, None),
    ("fps12.5", False, False, 12.5, None),
    ("fps8.33+size320", False, False, 8.33, 320),
    ("motion+size256", True, False, None, 256),
])  # fmt: skip
def test_a_variant_name_gives_its_parts(name, motion, int8, detect_fps, input_size):
    assert EdgeVariant.parse(name) == EdgeVariant(name, motion, int8, detect_fps, input_size)


@pytest.mark.parametrize(("name", "fault"), [
    ("fps0", "'fps0'"), ("fpsx", "'fpsx'"), ("size300", "'size300'"), ("plain+motion", "'plain'"),
    ("int8+size320", "int8 does not combine with sizeS"),
])  # fmt: skip
def test_a_bad_variant_name_is_refused_naming_the_part(name, fault):
    with pytest.raises(argparse.ArgumentTypeError, match=fault):
        EdgeVariant.parse(name)


def test_rate_and_size_variants_set_detect_fps_and_a_model_at_that_size(tmp_path, models_dir):
    import onnxruntime as ort

    inputs = Inputs(tmp_path, argparse.Namespace(model_dir=models_dir))
    variant = EdgeVariant.parse("fps12.5+size320")
    assert inputs.camera_keys(variant) == {"detect_fps": 12.5}
    keys = inputs.detector_keys(variant)
    assert keys["input_size"] == 320 and inputs.made == {"input_sizes": [320]}
    session = ort.InferenceSession(keys["path"], providers=["CPUExecutionProvider"])
    assert session.get_inputs()[0].shape == [1, 3, 320, 320]
    assert inputs.detector_keys(EdgeVariant.parse("size320")) == keys  # made once per size
    plain = EdgeVariant.parse("plain")
    assert inputs.camera_keys(plain) == {} and inputs.detector_keys(plain) == {}
