"""The real embedder + head keep one identity for a parked bicycle across frames of bikes.mp4.

Measured cosine similarities (MobileNetV2 embedder, crops at tests/center/conftest.py PARKED_BIKE):
bike150 vs bike160/170/180: 0.93, 0.93, 0.93; each later bike crop vs the identity's running-mean gallery vector:
0.93, 0.95, 0.97; car vs bike150 0.66 (0.60..0.68 vs the other bike crops), vehicle roof vs bike 0.53..0.55.
So the demo threshold 0.8 separates them with margin on both sides.
"""

from __future__ import annotations

import numpy as np
import torch

from vcascade.center.heads import EmbeddingHead
from vcascade.center.intake.preprocess import PreprocessSpec, decode_jpeg, stack_batch, to_input
from tests.center.chain import run_chained
from vcascade.center.stages.torch_stages import TorchStage


def _embed(embedder, spec: PreprocessSpec, payloads: list[bytes]) -> np.ndarray:
    _, modules = embedder
    batch = stack_batch([to_input(decode_jpeg(p), spec) for p in payloads])
    return run_chained([TorchStage(m, "cpu") for m in modules], torch.from_numpy(batch)).numpy()


def test_parked_bicycle_keeps_one_identity_and_others_differ(embedder, demo_recognizer, crops):
    spec = PreprocessSpec.from_config(demo_recognizer)
    head = EmbeddingHead(demo_recognizer.head.match_threshold, demo_recognizer.head.max_identities)
    names = ["bike150", "bike160", "bike170", "bike180", "car", "roof"]
    matches = []
    for name in names:  # one crop per micro-batch, as frames arrive
        matches += head(_embed(embedder, spec, [crops[name]]))
    by_name = dict(zip(names, matches))
    bike_ids = {by_name[n].identity_id for n in names[:4]}
    assert bike_ids == {by_name["bike150"].identity_id}
    assert all(by_name[n].similarity >= 0.9 for n in names[1:4]), matches
    assert by_name["car"].enrolled and by_name["roof"].enrolled
    assert len({by_name["bike150"].identity_id, by_name["car"].identity_id, by_name["roof"].identity_id}) == 3


def test_same_bike_twice_in_one_micro_batch_gets_one_id(embedder, demo_recognizer, crops):
    spec = PreprocessSpec.from_config(demo_recognizer)
    head = EmbeddingHead(demo_recognizer.head.match_threshold, 100)
    first, second, car = head(_embed(embedder, spec, [crops["bike160"], crops["bike170"], crops["car"]]))
    assert first.enrolled and not second.enrolled
    assert second.identity_id == first.identity_id
    assert car.identity_id != first.identity_id
