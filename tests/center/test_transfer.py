"""Crop preprocessing on the first stage's device and stage placement (CPU paths; CUDA in scripts/gpu_center.py)."""

from __future__ import annotations

import time

import numpy as np
import pytest
import torch

from vcascade.center.batcher import preprocess_items
from vcascade.center.microbatch import RoiItem
from vcascade.center.preprocess import PreprocessSpec
from vcascade.center.recognizer import TorchStage, run_chained
from vcascade.center.transfer import Placed, Placement, decode_items_uint8, normalise_on_device, prepare_batch
from vcascade.core import wire


def _item(roi_id: str, payload: bytes) -> RoiItem:
    roi = wire.Roi(roi_id=roi_id, camera="c", frame_seq=0, stream_ts_ms=0.0, capture_unix_ms=0.0,
                   xyxy=(0.0, 0.0, 1.0, 1.0), crop_xyxy=(0, 0, 1, 1), class_id=0, score=0.9)
    return RoiItem(roi, payload, 0, time.perf_counter())


@pytest.mark.parametrize("order", ["rgb", "bgr"])
def test_device_preprocessing_equals_numpy_preprocessing(crops, demo_recognizer, order):
    spec = PreprocessSpec((224, 224), order, tuple(demo_recognizer.mean), tuple(demo_recognizer.std))
    items = [_item(name, payload) for name, payload in crops.items()] + [_item("bad", b"not a jpeg")]
    expected = preprocess_items(items, spec)
    tensor, ok, failed = prepare_batch(items, spec, "cpu")
    assert [i.roi.roi_id for i in ok] == [i.roi.roi_id for i in expected.items]
    assert [i.roi.roi_id for i in failed] == ["bad"]
    assert tensor.shape == expected.batch.shape == (len(crops), 3, 224, 224) and tensor.dtype == torch.float32
    assert tensor.is_contiguous(memory_format=torch.channels_last)
    np.testing.assert_allclose(tensor.numpy(), expected.batch, rtol=0, atol=1e-5)


def test_uint8_batch_is_a_quarter_of_float32(crops, demo_recognizer):
    spec = PreprocessSpec.from_config(demo_recognizer)
    batch, ok, failed = decode_items_uint8([_item(n, p) for n, p in crops.items()], spec)
    assert batch.dtype == np.uint8 and batch.shape == (len(crops), 224, 224, 3) and not failed
    tensor = normalise_on_device(batch, spec, "cpu")
    assert tensor.numel() * tensor.element_size() == 4 * batch.nbytes  # what a host-to-device copy saves
    assert prepare_batch([], spec, "cpu") == (None, [], [])


def test_torch_stages_through_placement_match_the_unsplit_model(embedder):
    model, modules = embedder
    stages = [TorchStage(m, "cpu") for m in modules]
    x = torch.randn(3, 3, 224, 224, generator=torch.Generator().manual_seed(0))
    with torch.inference_mode():
        expected = model(x)
    out = run_chained(stages, x)
    assert not isinstance(out, Placed) and out.shape == expected.shape
    torch.testing.assert_close(out, expected, rtol=1e-4, atol=1e-4)


def test_cpu_placement_has_no_stream_and_returns_plain_tuples():
    placement = Placement("cpu")
    assert placement.stream is None
    out = placement.run(torch.nn.ReLU(), (torch.tensor([-1.0, 2.0]),), lambda t: t)
    assert type(out) is tuple and out[0].tolist() == [0.0, 2.0]
    placed = Placed.of((torch.ones(1),), None)
    assert placed.ready is None and placement.run(torch.nn.Identity(), placed, lambda t: t)[0].item() == 1.0
