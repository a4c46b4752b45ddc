#!/usr/bin/env python3
"""Center checks on a CUDA machine (written for one H200; runs in well under 5 minutes and prints everything).

    .venv/bin/python -m tools.gpu_center [--out out/gpu_center.json]

1. correctness of the CUDA paths against the CPU:
   * crop preprocessing on the device (uint8 batch moved through pinned memory, normalised with torch; stretch
     and keep_ratio_pad) vs CPU;
   * torch stages on ``cuda:0`` (own streams, events between stages), also mixed ``cpu -> cuda`` and
     ``cuda -> cpu`` placements, vs the unsplit model on the CPU; and through the pipelined StageEngine;
   * an ONNX export of the same model under ONNX Runtime's CUDA provider vs its CPU provider (skipped, with
     the reason printed, when onnxruntime has no CUDA provider here);
2. throughput by micro-batch size: bare unsplit model vs engine K=1 and K=2 on ``cuda:0``;
3. the whole worker (real sockets, K=1 on ``cuda:0``) vs a bare loop of decode + preprocess + model + head.

Each section catches its own failure and prints it, so one broken path does not hide the others. Writes JSON.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import traceback
from pathlib import Path


from tools import bench_center as bc  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

from vcascade.center.intake.microbatch import MicroBatch, RoiItem  # noqa: E402
from vcascade.center.intake.preprocess import PreprocessSpec, decode_crops, normalise_on_device, resize_crops  # noqa: E402
from vcascade.center.stages.torch_stages import build_model, place_stages  # noqa: E402
from vcascade.center.stages.engine import StageEngine  # noqa: E402
from vcascade.center.stages.transfer import Placed  # noqa: E402
from vcascade.core.config import Deployment  # noqa: E402

TOLERANCE = 2e-2
"""Largest accepted |CUDA - CPU| on L2-normalisable embeddings: cuDNN may use TF32 and other algorithms."""


def check_preprocess(recognizer, crops: list[bytes]) -> dict:
    """CUDA vs CPU normalisation of the recognizer's crops (stretch), and of PP-OCR text crops (keep_ratio_pad:
    each row's padding zeroed on the device)."""
    spec = PreprocessSpec.from_config(recognizer)
    out = _preprocess_cuda_vs_cpu(spec, crops)
    out["keep_ratio_pad"] = _preprocess_cuda_vs_cpu(PreprocessSpec((48, 320), "bgr", (0.5,) * 3, (0.5,) * 3,
                                                                   "keep_ratio_pad"), crops)  # fmt: skip
    return out


def _preprocess_cuda_vs_cpu(spec: PreprocessSpec, crops: list[bytes]) -> dict:
    pixels, widths_px = resize_crops(decode_crops([RoiItem(None, c, 0, 0.0) for c in crops[:32]])[0], spec)
    cpu = normalise_on_device(pixels, spec, "cpu", widths_px)
    cuda = normalise_on_device(pixels, spec, "cuda:0", widths_px)
    diff = (cuda.cpu() - cpu).abs().max().item()
    return {"max_abs_diff": diff, "ok": diff < 1e-5, "layout_channels_last": cuda.is_contiguous(memory_format=torch.channels_last)}


def check_torch_stages(recognizer, crops: list[bytes]) -> dict:
    spec = PreprocessSpec.from_config(recognizer)
    x = bc.crop_batch([RoiItem(None, c, 0, 0.0) for c in crops[:16]], spec, "cpu")
    with torch.inference_mode():
        expected = build_model(recognizer)(x)
    out = {}
    for devices in (["cuda:0", "cuda:0"], ["cpu", "cuda:0"], ["cuda:0", "cpu"]):
        stages = _stages(recognizer, devices)
        first = stages[0]((x,))
        got = bc.run_chained(stages, x)
        diff = (got.float().cpu() - expected).abs().max().item()
        out["->".join(devices)] = {
            "max_abs_diff": diff, "ok": diff < TOLERANCE,
            "first_stage_returns_event": isinstance(first, Placed) and first.ready is not None if devices[0] != "cpu" else None,
        }
    out["engine cuda:0->cuda:0"] = _check_engine(recognizer, x, expected)
    return out


def _stages(recognizer, devices: list[str]) -> list:
    """The torch recognizer split at its explicit split points, stage ``k`` on ``devices[k]``."""
    return place_stages(build_model(recognizer), recognizer.split_points, devices, recognizer.input_hw)


def _check_engine(recognizer, x: torch.Tensor, expected: torch.Tensor) -> dict:
    """16 micro-batches of one row each through the pipelined engine on the GPU: each row its own result."""
    stages = _stages(recognizer, ["cuda:0", "cuda:0"])
    done: dict[int, torch.Tensor] = {}
    engine = StageEngine(stages, 2, lambda b: done.__setitem__(b.seq, b.data[0].cpu()), lambda b, w, e: print(w, e))
    engine.start()
    for row in range(x.shape[0]):
        engine.submit(MicroBatch(row, [row], (x[row : row + 1].to("cuda:0"),), 0.0, 0.0))
    engine.stop(60)
    diff = max((done[r][0] - expected[r]).abs().max().item() for r in range(x.shape[0]))
    return {"max_abs_diff": diff, "ok": len(done) == x.shape[0] and diff < TOLERANCE}


def check_onnx(recognizer) -> dict:
    import onnxruntime as ort

    if "CUDAExecutionProvider" not in ort.get_available_providers():
        return {"skipped": f"onnxruntime {ort.__version__} has no CUDA provider ({ort.get_available_providers()})"}
    model = build_model(recognizer)
    x = torch.randn(8, 3, *recognizer.input_hw, generator=torch.Generator().manual_seed(0))
    with tempfile.TemporaryDirectory() as tmp:
        path = str(Path(tmp) / "embedder.onnx")
        torch.onnx.export(model, (x,), path, input_names=["x"], output_names=["y"], dynamic_axes={"x": {0: "n"}},
                          opset_version=17, dynamo=False)
        results = {}
        for provider in ("CPUExecutionProvider", "CUDAExecutionProvider"):
            session = ort.InferenceSession(path, providers=[provider])
            results[provider] = session.run(None, {"x": x.numpy()})[0]
    diff = float(np.abs(results["CUDAExecutionProvider"] - results["CPUExecutionProvider"]).max())
    return {"max_abs_diff": diff, "ok": diff < TOLERANCE}


def throughput_by_batch(recognizer) -> dict:
    return {batch: bc.bench_stages(recognizer, batch, batches=30, device="cuda:0") for batch in (1, 8, 32, 128)}


def worker_vs_bare(raw: dict, recognizer, crops: list[bytes]) -> dict:
    bare = bc.bare_loop(recognizer, crops, 32, device="cuda:0")
    worker = bc.bench_worker(raw, crops, 32, device="cuda:0")
    return {"batch": 32, "bare_loop": bare, "worker": worker, "ratio": worker / bare}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=bc.REPO / "out" / "gpu_center.json")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        sys.exit("gpu_center.py: no CUDA device visible to torch")
    print(f"torch {torch.__version__}, CUDA {torch.version.cuda}, {torch.cuda.get_device_name(0)}", flush=True)
    torch.set_num_threads(1)
    raw = bc.demo_deployment()
    recognizer = Deployment.model_validate(raw).recognizers["mobilenetv2-embedder"]
    crops = bc.real_crops(512)
    sections = {
        "preprocess_cuda_vs_cpu": lambda: check_preprocess(recognizer, crops),
        "torch_stages_cuda_vs_cpu": lambda: check_torch_stages(recognizer, crops),
        "onnx_cuda_vs_cpu": lambda: check_onnx(recognizer),
        "throughput_by_batch_rois_per_s": lambda: throughput_by_batch(recognizer),
        "worker_vs_bare_rois_per_s": lambda: worker_vs_bare(raw, recognizer, crops),
    }
    results: dict = {}
    for name, run in sections.items():
        started = time.perf_counter()
        try:
            results[name] = run()
        except Exception:  # noqa: BLE001 - print and go on with the other sections
            results[name] = {"error": traceback.format_exc()}
        print(f"== {name} ({time.perf_counter() - started:.1f} s)\n{json.dumps(results[name], indent=2)}", flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2, default=str))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
