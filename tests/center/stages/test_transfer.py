"""Stage placement (CPU paths; CUDA in tools/gpu_center.py)."""

from __future__ import annotations

import torch

from tests.center.chain import run_chained
from vcascade.center.stages.torch_stages import TorchStage
from vcascade.center.stages.transfer import Placed, Placement


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
